import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { needsServer } from "../helpers/nats-version.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { readStream } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";

const HOUR = 3_600_000;
const linkOf = (relay: Relay) => relay.status().links[0];

/**
 * Review #21 item 9: `maxReplayAge` compares a backlog's age with the limit, and the message timestamps
 * are the source server's. Measured on the relay's clock, a relay running an hour ahead resyncs (and
 * skips every delta of) a backlog seconds old, and one running behind never resyncs. The relays here
 * run with a skewed clock against servers on the true one.
 */
test("a relay whose clock runs an hour ahead replays a backlog seconds old (maxReplayAge 10m): no resync, every delta in order", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const config = yaml("    maxReplayAge: 10m\n");
  const first = await startRelay(t, config, "b");
  await publishIds(nca, src, "before", 10);
  await waitForCount(ncb, dst, 10, 20_000);
  await first.relay.stop();
  const backlog = await publishIds(nca, src, "backlog", 200);
  const ahead = await startRelay(t, config, "b", { clock: () => Date.now() + HOUR });
  await waitForCount(ncb, dst, 210, 30_000, "the backlog replayed");
  const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(ids.slice(10), backlog, "every delta, in order");
  assert.equal(await metricValue(ahead.relay, "relay_resyncs_total", {}), 0, "no resync");
  const offset = await metricValue(ahead.relay, "relay_source_clock_offset_seconds", { link: "a-to-b" });
  assert.ok(Math.abs(offset - HOUR / 1000) < 5, `the measured offset is the hour (${offset} s)`);
  assert.ok(ahead.logs.lines.some((l) => /clock is 3600\.\d s ahead of the source region's/.test(l)), "the skew is logged");
});

test("a relay whose clock runs an hour behind still resyncs a backlog older than maxReplayAge (2s)", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const config = yaml("    maxReplayAge: 2s\n");
  const first = await startRelay(t, config, "b");
  await publishIds(nca, src, "before", 10);
  await waitForCount(ncb, dst, 10, 20_000);
  await first.relay.stop();
  await publishIds(nca, src, "old", 50);
  const published = Date.now();
  await check(() => Date.now() - published > 3_000, { name: "a backlog older than 2 s", timeoutMs: 6_000 });
  const behind = await startRelay(t, config, "b", { clock: () => Date.now() - HOUR });
  await check(() => linkOf(behind.relay)?.lastResync, { name: "resync after maxReplayAge", timeoutMs: 30_000 });
  assert.equal(await metricValue(behind.relay, "relay_resyncs_total", { reason: "max_replay_age" }), 1);
  await waitForCount(ncb, dst, 15, 20_000, "the snapshot");
  const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(ids.slice(10).sort(), ["old-45", "old-46", "old-47", "old-48", "old-49"], "the latest of the 5 subjects, not 50 deltas");
});

/**
 * #39 item 4: a server that says its own time (`ts` in stream and consumer infos, 2.10+) gives the
 * relay its clock offset with every backlog reading: no backlog needed, and no probe consumer created
 * on the source (on 2.9 the relay creates one, and only while a backlog exists).
 */
test("a server that says its time (2.10+): the offset is measured from its infos, with no backlog and no probe consumer", { skip: needsServer("2.10") }, async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const created: string[] = [];
  const sub = nca.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.CREATED.${src}.*`, {
    callback: (_err, m) => {
      created.push(m.subject.split(".").at(-1) ?? "");
    },
  });
  t.after(() => sub.unsubscribe());
  const ahead = await startRelay(t, yaml(), "b", { clock: () => Date.now() + HOUR });
  await publishIds(nca, src, "m", 10);
  await waitForCount(ncb, dst, 10, 20_000);
  await check(async () => Math.abs((await metricValue(ahead.relay, "relay_source_clock_offset_seconds", { link: "a-to-b" })) - HOUR / 1000) < 5, {
    name: "the offset measured from the server's ts is the hour",
    timeoutMs: 30_000,
  });
  await nca.flush();
  assert.deepEqual(created.filter((name) => name !== "relay-a-to-b"), [], "no consumer but the link's durable was created on the source");
});
