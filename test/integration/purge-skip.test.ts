import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { converged, kvRegions, kvYaml } from "../helpers/kv.js";
import { metricValue, RelayProcess, startRelay, writeConfig } from "../helpers/relays.js";
import { assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { updateStream } from "../helpers/streams.js";
import { skipsOnSubjectPurge } from "../../src/nats/purge-skips.js";
import type { Relay } from "../../src/relay/relay.js";

/**
 * An operator's clean-up on the source: `nats stream purge --subject <one subject> --keep 1` while the
 * link is behind. A nats-server before 2.10.11 moves every consumer whose filter is wider than that
 * subject to the subject's remaining message — past every other subject's messages in between, which
 * the stream still holds — and 2.9 forgets what it delivered and was not acked yet (nats-server #5075).
 * The link reads every such jump back from the stream: what is still there is relayed, in order, and
 * only what the purge removed is a gap. On a fixed server the consumer does not jump, and the same
 * verdict holds with nothing read back.
 *
 * The source: m-0..m-49 (seq 1-50), the temporary subject (seq 51), m-50..m-98 (seq 52-100), the
 * temporary subject again (seq 101), m-99..m-108 (seq 102-111). The purge keeps seq 101 and removes 51.
 */
async function sourceWithTemporarySubject(nc: NatsConnection, src: string): Promise<string[]> {
  const js = jetstream(nc);
  const tmp = async (n: number) => {
    const h = headers();
    h.set("Nats-Msg-Id", `tmp-${n}`);
    await js.publish(`${src}.tmp`, new TextEncoder().encode(`tmp ${n}`), { headers: h });
  };
  const ids = await publishIds(nc, src, "m", 50);
  await tmp(1);
  ids.push(...(await publishIds(nc, src, "m", 49, 50)));
  await tmp(2);
  ids.push(...(await publishIds(nc, src, "m", 10, 99)));
  return ids;
}

/** The destination after the purge: every m-* in order with tmp-2 where the source holds it. */
const expectedAfterPurge = (ids: readonly string[]) => [...ids.slice(0, 99), "tmp-2", ...ids.slice(99)];

const linkOf = (relay: Relay) => relay.status().links[0];

async function purgeTemporarySubject(nc: NatsConnection, src: string): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.purge(src, { filter: `${src}.tmp`, keep: 1 });
}

test("a subject purge while the link holds a full window: what the consumer jumps over is read back and relayed in order; only the purged message is a gap", async (t) => {
  const r = await twoRegions(t);
  const { relay } = await startRelay(t, r.yaml("    batchSize: 10\n    inFlight: 20\n"), "b", { gaps: true });
  await check(() => linkOf(relay)?.state === "live", { name: "the link is live", timeoutMs: 20_000 });
  await updateStream(r.ncb, r.dst, { max_msgs: 10, discard: DiscardPolicy.New });
  const ids = await sourceWithTemporarySubject(r.nca, r.src);
  await check(() => linkOf(relay)?.inFlight === 20, { name: "the link holds a full window (seq 11-30) for the full destination", timeoutMs: 20_000 });
  await purgeTemporarySubject(r.nca, r.src);
  await updateStream(r.ncb, r.dst, { max_msgs: -1 });

  const expected = expectedAfterPurge(ids);
  await waitForCount(r.ncb, r.dst, expected.length, 20_000, "everything the source still holds");
  await assertInOrder(r.ncb, r.dst, expected);
  await check(async () => (await metricValue(relay, "relay_gap_messages_total", { link: "a-to-b" })) === 1, {
    name: "relay_gap_messages_total counts the one purged message",
    timeoutMs: 5_000,
  });
  assert.deepEqual(
    linkOf(relay)?.gaps.map((g) => [g.fromSeq, g.toSeq]),
    [[51, 51]],
  );
  const readBack = await metricValue(relay, "relay_source_skips_read_back_total", { link: "a-to-b" });
  // On 2.9.10 the consumer jumps from seq 31 to 101: 69 stored messages read back (51 is gone).
  assert.equal(readBack, skipsOnSubjectPurge(r.nca.info?.version) ? 69 : 0, `messages read back on nats-server ${r.nca.info?.version}`);
});

test("a subject purge while the link is paused: the ack floor the server moved is read back when the link resumes, in order", async (t) => {
  const r = await twoRegions(t);
  const yaml = r.yaml("    batchSize: 10\n");
  const configPath = await writeConfig(yaml);
  const { relay } = await startRelay(t, yaml, "b", { gaps: true });
  await check(() => linkOf(relay)?.state === "live", { name: "the link is live", timeoutMs: 20_000 });
  const first = await publishIds(r.nca, r.src, "m", 5, 1_000);
  await waitForCount(r.ncb, r.dst, 5, 20_000, "before the pause");

  const cli = async (...args: string[]) => {
    const p = new RelayProcess([...args, "a-to-b", "--config", configPath, "--region", "b", "--reason", "the source's clean-up"]);
    assert.equal(await p.exited, 0, p.output());
  };
  await cli("link", "pause");
  await check(() => linkOf(relay)?.state === "paused" && linkOf(relay)?.inFlight === 0, { name: "the link is paused with nothing in flight", timeoutMs: 15_000 });
  const ids = await sourceWithTemporarySubject(r.nca, r.src);
  await purgeTemporarySubject(r.nca, r.src);
  await cli("link", "resume");

  const expected = [...first, ...expectedAfterPurge(ids)];
  await waitForCount(r.ncb, r.dst, expected.length, 20_000, "everything the source still holds");
  await assertInOrder(r.ncb, r.dst, expected);
  await check(async () => (await metricValue(relay, "relay_gap_messages_total", { link: "a-to-b" })) === 1, {
    name: "relay_gap_messages_total counts the one purged message",
    timeoutMs: 5_000,
  });
  const readBack = await metricValue(relay, "relay_source_skips_read_back_total", { link: "a-to-b" });
  // On 2.9.10 the paused consumer's ack floor moves from seq 5 to 105 (seq 106 is tmp-2): 99 stored messages read back (56 is gone).
  assert.equal(readBack, skipsOnSubjectPurge(r.nca.info?.version) ? 99 : 0, `messages read back on nats-server ${r.nca.info?.version}`);
});

test("a KV link paused while its source bucket is written and one key purged: on resume every key converges, and only the purged key's writes are superseded", async (t) => {
  const bucket = uniqueName("purged").replace(/[^-\w]/g, "_");
  const [a, b] = await kvRegions(t, ["a", "b"], bucket, 64);
  assert.ok(a && b);
  const yaml = kvYaml([a, b], [["a", "b"]], bucket);
  const configPath = await writeConfig(yaml);
  const { relay } = await startRelay(t, yaml, "b");
  const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
  for (const key of keys) await a.kv.put(key, `before ${key}`);
  await check(async () => converged([a, b], bucket, keys), { name: "b holds every key before the pause", timeoutMs: 20_000, intervalMs: 200 });

  const cli = async (...args: string[]) => {
    const p = new RelayProcess([...args, "a-to-b", "--config", configPath, "--region", "b", "--reason", "the bucket's clean-up"]);
    assert.equal(await p.exited, 0, p.output());
  };
  await cli("link", "pause");
  await check(() => linkOf(relay)?.state === "paused" && linkOf(relay)?.inFlight === 0, { name: "the link is paused with nothing in flight", timeoutMs: 15_000 });
  const ROUNDS = 5;
  for (let round = 0; round < ROUNDS; round++) for (const key of keys) await a.kv.put(key, `round ${round} ${key}`);
  // The purge's rollup removes k3's five writes of the pause; on 2.9 it also moves the paused consumer
  // past every other key's writes, to the purge.
  await a.kv.purge("k3");
  await cli("link", "resume");

  await check(async () => converged([a, b], bucket, keys), { name: "b holds a's latest write of every key after the resume", timeoutMs: 20_000, intervalMs: 200 });
  for (const key of keys.filter((k) => k !== "k3")) assert.equal((await b.kv.get(key))?.string(), `round ${ROUNDS - 1} ${key}`, `key ${key}`);
  assert.equal((await b.kv.get("k3"))?.operation, "PURGE");
  assert.equal(await metricValue(relay, "relay_kv_superseded_total", { link: "a-to-b" }), ROUNDS, "only k3's writes the purge removed are superseded");
  const readBack = await metricValue(relay, "relay_source_skips_read_back_total", { link: "a-to-b" });
  // 2.9.10 moves the paused consumer to the purge: the other 9 keys' 45 writes are read back.
  assert.equal(readBack, skipsOnSubjectPurge(a.nc.info?.version) ? (keys.length - 1) * ROUNDS : 0, `writes read back on nats-server ${a.nc.info?.version}`);
});

test("a relay started after a subject purge made the server forget its predecessor's deliveries: ordered recovery relays them first, in order", async (t) => {
  const r = await twoRegions(t);
  const yaml = r.yaml("    batchSize: 10\n    inFlight: 20\n");
  const js = jetstream(r.nca);
  // The temporary subject's two messages come first (seq 1, 2): a purge keeping its last one leaves
  // the consumer's position and floor alone and, on 2.9, drops everything ack-pending.
  for (const n of [1, 2]) {
    const h = headers();
    h.set("Nats-Msg-Id", `tmp-${n}`);
    await js.publish(`${r.src}.tmp`, new TextEncoder().encode(`tmp ${n}`), { headers: h });
  }
  const first = await startRelay(t, yaml, "b");
  await check(() => linkOf(first.relay)?.state === "live", { name: "the first relay's link is live", timeoutMs: 20_000 });
  await waitForCount(r.ncb, r.dst, 2, 20_000, "the temporary subject's messages");
  await updateStream(r.ncb, r.dst, { max_msgs: 12, discard: DiscardPolicy.New });
  const ids = await publishIds(r.nca, r.src, "m", 60);
  await check(() => linkOf(first.relay)?.inFlight === 20, { name: "the first relay holds a full window for the full destination", timeoutMs: 20_000 });
  // It stops without getting them stored: they stay ack-pending at the source, until the purge.
  await first.relay.stop(AbortSignal.timeout(1_000));
  await purgeTemporarySubject(r.nca, r.src);
  const info = await (await jetstreamManager(r.nca)).consumers.info(r.src, "relay-a-to-b");
  await updateStream(r.ncb, r.dst, { max_msgs: -1 });

  const second = await startRelay(t, yaml, "b");
  const expected = ["tmp-1", "tmp-2", ...ids];
  await waitForCount(r.ncb, r.dst, expected.length, 20_000, "everything the source held");
  await assertInOrder(r.ncb, r.dst, expected);
  t.diagnostic(`after the purge the consumer had delivered up to seq ${info.delivered.stream_seq}, ack floor ${info.ack_floor.stream_seq}, ${info.num_ack_pending} ack-pending`);
  assert.equal(await metricValue(second.relay, "relay_gap_messages_total", { link: "a-to-b" }), 0);
});
