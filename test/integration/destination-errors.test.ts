import { createHash } from "node:crypto";
import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { StreamConfig } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { check, uniqueName } from "../helpers/check.js";
import {
  createCursorFromStart,
  createStream,
  publishMany,
  readStream,
  streamCount,
  updateStream,
} from "../helpers/streams.js";
import type { OutMessage, StoredMessage } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { withServers } from "../helpers/servers.js";
import type { HasAfter } from "../helpers/servers.js";
import type { Relay } from "../../src/relay/relay.js";
import {
  assertExactlyOnce,
  assertInOrder,
  publishIds,
  twoRegions,
  waitForCount,
} from "../helpers/scenario.js";

/** A stream in the destination region that captures the link's dead-letter subject. */
async function deadLetterStream(
  nc: NatsConnection,
): Promise<{ stream: string; subject: string; yaml: string }> {
  const stream = uniqueName("DLQ");
  const subject = `dlq.${stream}`;
  await createStream(nc, { name: stream, subjects: [subject] });
  return { stream, subject, yaml: `    onBadMessage: { deadLetter: "${subject}" }\n` };
}

function link(relay: Relay) {
  const l = relay.status().links[0];
  assert.ok(l, "the relay runs one link");
  return l;
}

async function waitForState(relay: Relay, state: string, timeoutMs = 15_000) {
  return check(() => (link(relay).state === state ? link(relay) : undefined), {
    name: `link state ${state}`,
    timeoutMs,
  });
}

/** Stops at once: a link that holds messages it cannot publish (failed, or refused) would wait out the whole grace. */
const stopNow = (relay: Relay) => relay.stop(AbortSignal.timeout(500));
const ids = (stored: readonly StoredMessage[]) => stored.map((m) => m.headers["Nats-Msg-Id"]);
const sha256 = (data: Uint8Array) => `sha-256=${createHash("sha256").update(data).digest("hex")}`;
const expectedHeader = /^nats-expected-/i;

/**
 * The header block the relay sends with a first-hop message from region a that has only a Nats-Msg-Id
 * (README "Headers on relayed messages"; Relay-Source-Time is always 30 characters; the link is a-to-b).
 */
const relayHeaderBytes = (id: string, src: string, seq: number) =>
  Buffer.byteLength(
    `NATS/1.0\r\nNats-Msg-Id: ${id}\r\nRelay-Origin: a\r\nRelay-Path: a\r\nRelay-Source: a ${src} ${seq}\r\nRelay-Source-Time: ${"0".repeat(30)}\r\nRelay-Link: a-to-b\r\n\r\n`,
  );

test("a destination that does not bind the link's subjects: the link fails at start, naming them", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  // The source stores `${src}.>`; the destination only `${src}.0`: everything else would go elsewhere or nowhere.
  await updateStream(ncb, dst, { subjects: [`${src}.0`] });
  await publishIds(nca, src, "m", 10);
  const { relay } = await startRelay(t, yaml(), "b", { http: true });
  const failed = await waitForState(relay, "failed");
  assert.equal(failed.lastError?.code, "DESTINATION_MISMATCH");
  assert.ok(failed.lastError?.message.includes(`does not bind ${src}.>`), failed.lastError?.message);
  assert.ok(failed.stateReason?.includes(`${src}.>`), failed.stateReason);
  assert.equal(await streamCount(ncb, dst), 0, "nothing published, not even the bound subject");
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 0);
  assert.equal(
    await metricValue(relay, "relay_errors_total", { code: "DESTINATION_MISMATCH" }),
    1,
    "the failure is counted",
  );
});

test("Nats-Expected-* headers are never stored in the destination, whatever stripHeaders says", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  // Every expectation holds at the source, so the source stores the headers with the messages. The
  // destination, another stream one sequence ahead, would refuse them, or keep them for its mirrors.
  await publishMany(ncb, 1, () => ({ subject: `${src}.h`, headers: { "Nats-Msg-Id": "already-there" } }));
  const sent: Record<string, string>[] = [
    {
      "Nats-Msg-Id": "h-0",
      "Nats-Expected-Stream": src,
      "Nats-Expected-Last-Sequence": "0",
      "X-Internal": "secret",
      "X-Keep": "kept",
    },
    {
      "Nats-Msg-Id": "h-1",
      "Nats-Expected-Last-Msg-Id": "h-0",
      "Nats-Expected-Last-Subject-Sequence": "1",
      "X-Keep": "kept",
    },
    {
      "Nats-Msg-Id": "h-2",
      "Nats-Expected-Last-Subject-Sequence": "2",
      "Nats-Expected-Last-Subject-Sequence-Subject": `${src}.h`,
      "X-Keep": "kept",
    },
    { "Nats-Msg-Id": "h-3", "nats-expected-stream": "NOT-THE-SOURCE", "X-Keep": "kept" },
    { "Nats-Msg-Id": "h-4", "Nats-Expected-Something-New": "x", "X-Keep": "kept" },
  ];
  await publishMany(nca, sent.length, (i) => ({ subject: `${src}.h`, headers: sent[i] ?? {} }), 1);
  // The source kept them all (the premise of the test).
  const atSource = await readStream(nca, src);
  assert.deepEqual(
    atSource.map((m) => Object.keys(m.headers).filter((k) => expectedHeader.test(k)).length),
    [2, 2, 2, 1, 1],
  );
  const { relay } = await startRelay(t, yaml("    stripHeaders: [X-Internal]\n"), "b", { http: true });
  await waitForCount(ncb, dst, 1 + sent.length, 15_000, "(none refused for a copied expectation)");
  const stored = (await readStream(ncb, dst)).slice(1);
  assert.deepEqual(ids(stored), ["h-0", "h-1", "h-2", "h-3", "h-4"]);
  for (const m of stored) {
    assert.equal(m.headers["X-Keep"], "kept", "other headers are copied");
    assert.equal(m.headers["X-Internal"], undefined, "the link's own strip list still applies");
  }
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), sent.length);
  assert.equal(await metricValue(relay, "relay_errors_total", {}), 0);
  assert.deepEqual(
    stored.map((m) => [
      m.headers["Nats-Msg-Id"],
      Object.keys(m.headers).filter((k) => expectedHeader.test(k)),
    ]),
    ids(stored).map((id) => [id, []]),
    "no Nats-Expected-* header stored, copied or added",
  );
});

test("a subject re-bound to another stream after start: the destination's update fails the link before anything goes astray", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const durable = uniqueName("cursor");
  const { relay } = await startRelay(t, yaml(`    durable: ${durable}\n`), "b", { http: true });
  const before = await publishIds(nca, src, "m", 5);
  await waitForCount(ncb, dst, 5, 15_000);
  // Rebind `${src}.moved` from the link's destination to another stream while the link runs.
  const other = uniqueName("OTHER");
  await updateStream(ncb, dst, { subjects: [0, 1, 2, 3, 4].map((i) => `${src}.${i}`) });
  const failed = await waitForState(relay, "failed");
  assert.equal(failed.lastError?.code, "DESTINATION_MISMATCH");
  assert.ok(failed.lastError?.message.includes(`does not bind ${src}.>`), failed.lastError?.message);
  assert.equal(await metricValue(relay, "relay_destination_changes_total", { kind: "updated" }), 1);
  assert.equal(await metricValue(relay, "relay_errors_total", { code: "DESTINATION_MISMATCH" }), 1);
  await createStream(ncb, { name: other, subjects: [`${src}.moved`] });
  await publishMany(nca, 1, () => ({ subject: `${src}.moved`, headers: { "Nats-Msg-Id": "moved-1" } }));
  // Not relayed, not acked: it waits at the source for an operator.
  const jsm = await jetstreamManager(nca);
  const consumer = await check(
    async () => {
      const info = await jsm.consumers.info(src, durable);
      return info.ack_floor.stream_seq === 5 ? info : undefined;
    },
    { name: "acked up to the last message stored in the destination" },
  );
  assert.equal(consumer.num_ack_pending, 0, "moved-1 not delivered: the link failed before it was published");
  assert.equal(await streamCount(ncb, other), 0, "nothing in the other stream");
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 5);
  await assertExactlyOnce(ncb, dst, before);
  await stopNow(relay);
});

test("a full discard-new destination pauses the link, which resumes by itself; another refusal pauses it too", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const dlq = await deadLetterStream(ncb);
  await updateStream(ncb, dst, { discard: DiscardPolicy.New, max_msgs: 20 });
  const sent = await publishIds(nca, src, "m", 50);
  const { relay } = await startRelay(t, yaml(dlq.yaml), "b", { http: true });
  const paused = await waitForState(relay, "paused");
  assert.equal(paused.lastError?.code, "DESTINATION_FULL");
  assert.match(paused.stateReason ?? "", /maximum messages exceeded.*err_code 10077/);
  assert.equal(await streamCount(ncb, dst), 20);
  await check(
    async () => (await metricValue(relay, "relay_errors_total", { code: "DESTINATION_FULL" })) >= 2,
    { name: "refusals counted (the link keeps trying)", timeoutMs: 10_000 },
  );
  assert.equal(link(relay).state, "paused");
  assert.equal(link(relay).inFlight, 30, "the other 30 wait in the link");

  // Room again: the link resumes on its own, nothing lost, nothing doubled, source order kept.
  await updateStream(ncb, dst, { max_msgs: 1_000 });
  await waitForCount(ncb, dst, 50, 15_000, "after max_msgs was raised");
  await assertInOrder(ncb, dst, sent);
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) === 50, {
    name: "50 relayed",
  });
  await waitForState(relay, "live");

  // Any other 4xx (here: a sealed stream, err_code 10109) concerns every message alike: paused, not dead-lettered.
  await updateStream(ncb, dst, { sealed: true });
  await publishIds(nca, src, "sealed", 5);
  const refused = await waitForState(relay, "paused");
  assert.equal(refused.lastError?.code, "PUBLISH_REJECTED");
  assert.match(refused.stateReason ?? "", /err_code 10109/);
  await check(
    async () => (await metricValue(relay, "relay_errors_total", { code: "PUBLISH_REJECTED" })) >= 2,
    { name: "refusals counted (still retrying)", timeoutMs: 10_000 },
  );
  assert.equal(link(relay).inFlight, 5);
  assert.equal(await streamCount(ncb, dlq.stream), 0, "nothing dead-lettered");
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "dead_lettered" }), 0);
  assert.equal(await streamCount(ncb, dst), 50);
  await stopNow(relay);
});

test("a message larger than the stream's max_msg_size (headers included): dead-lettered as a record, or halts", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const dlq = await deadLetterStream(ncb);
  await updateStream(ncb, dst, { max_msg_size: 4096 });
  const big = new Uint8Array(8_000).fill(0x62);
  // Under the limit as a payload, over it once the relay's headers are added.
  const nearly = new Uint8Array(4_000).fill(0x6e);
  // Exactly at the limit with the relay's headers (the server takes it), and one byte over.
  const exact = new Uint8Array(4096 - relayHeaderBytes("exact-4", src, 5)).fill(0x78);
  const over = new Uint8Array(4097 - relayHeaderBytes("over-5", src, 6)).fill(0x79);
  const messages = [
    { id: "small-0" },
    { id: "big-1", data: big },
    { id: "small-2" },
    { id: "nearly-3", data: nearly },
    { id: "exact-4", data: exact },
    { id: "over-5", data: over },
    { id: "small-6" },
  ];
  await publishMany(
    nca,
    messages.length,
    (i) => ({
      subject: `${src}.s`,
      headers: { "Nats-Msg-Id": messages[i]?.id ?? "" },
      ...(messages[i]?.data ? { data: messages[i]?.data } : {}),
    }),
    1,
  );
  const { relay } = await startRelay(t, yaml(dlq.yaml), "b", { http: true });
  await waitForCount(ncb, dst, 4, 15_000);
  await waitForCount(ncb, dlq.stream, 3, 15_000);
  await assertInOrder(ncb, dst, ["small-0", "small-2", "exact-4", "small-6"]);
  const parked = await readStream(ncb, dlq.stream);
  assert.deepEqual(ids(parked), ["big-1", "nearly-3", "over-5"]);
  for (const [record, payload, seq] of [
    [parked[0], big, 2],
    [parked[1], nearly, 4],
    [parked[2], over, 6],
  ] as const) {
    assert.equal(record?.data, "", "no payload in the record");
    assert.match(
      record?.headers["Relay-Dead-Letter-Reason"] ?? "",
      /^message is \d+ bytes with headers; the destination takes at most 4096$/,
      "found before publishing",
    );
    assert.equal(record?.headers["Relay-Dead-Letter-Link"], "a-to-b");
    assert.equal(record?.headers["Relay-Dead-Letter-Size"], String(payload.length));
    assert.equal(record?.headers["Relay-Dead-Letter-Digest"], sha256(payload));
    assert.equal(record?.headers["Relay-Source"], `a ${src} ${seq}`);
  }
  assert.match(parked[2]?.headers["Relay-Dead-Letter-Reason"] ?? "", /^message is 4097 bytes/);
  await check(
    async () => (await metricValue(relay, "relay_messages_total", { outcome: "dead_lettered" })) === 3,
    { name: "3 dead-lettered" },
  );
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 4);
  assert.equal(await metricValue(relay, "relay_errors_total", { code: "MESSAGE_TOO_LARGE" }), 3);
  await waitForState(relay, "live");
  await relay.stop();

  // onBadMessage: halt, on a fresh cursor over the same messages.
  await createCursorFromStart(nca, src, "strict");
  const { relay: strict } = await startRelay(t, yaml("    durable: strict\n    onBadMessage: halt\n"), "b", {
    http: true,
  });
  const failed = await waitForState(strict, "failed");
  assert.equal(failed.lastError?.code, "MESSAGE_TOO_LARGE");
  assert.match(
    failed.lastError?.message ?? "",
    /message big-1 \(source seq 2\): message is \d+ bytes with headers; the destination takes at most 4096/,
  );
  assert.equal(await metricValue(strict, "relay_errors_total", { code: "MESSAGE_TOO_LARGE" }), 1);
  assert.equal(await streamCount(ncb, dlq.stream), 3, "nothing more parked");
  assert.equal(await streamCount(ncb, dst), 4);
  await stopNow(strict);
});

test("a dead-lettered version does not advance its entity: an older, smaller version after it is relayed", async (t) => {
  // Live, version 4 arriving after 5 was parked; then 5 and 4 waiting together, behind a full destination
  // (memory guard) or a Redis outage (one claim batch). Had 5 counted, 4 would be stale each time.
  await t.test("memory guard, then versions 5 and 4 behind a full destination", async (t) => {
    // One message per claim: the guard never sees 5 and 4 together, only the pipeline holds them.
    const v = await versionScenario(
      t,
      "memory: true",
      { discard: DiscardPolicy.New, max_msgs: 2 },
      "    batchSize: 1\n",
    );
    await v.publish(v.version("fill-1", "fill", 1)); // the destination is full now
    await v.publish(v.version("f-1", "f", 1));
    // Four refusals: the next retry is 800 ms or more away, so 5 and 4 are both claimed before it, while
    // 5 waits behind f-1 where its size is not looked at yet.
    await check(
      async () => (await metricValue(v.relay, "relay_errors_total", { code: "DESTINATION_FULL" })) >= 4,
      {
        name: "f-1 refused four times",
      },
    );
    await v.publish(v.version("e-5", "e", 5, v.big), v.version("e-4", "e", 4));
    await v.waitHeld("paused behind a full destination");
    await updateStream(v.ncb, v.dst, { max_msgs: 100 });
    await v.assertOutcome(["g-4", "fill-1", "f-1", "e-4"]);
  });
  await t.test("redis guard, then versions 5 and 4 claimed in one batch after an outage", async (t) => {
    const redis = await withServers(t).startRedis({ appendonly: true });
    const v = await versionScenario(t, `redis: { url: "${redis.url}" }`, {});
    await redis.stop();
    await v.publish(v.version("f-1", "f", 1));
    await waitForState(v.relay, "paused");
    await v.publish(v.version("e-5", "e", 5, v.big), v.version("e-4", "e", 4));
    await v.waitHeld("claims waiting for Redis");
    await redis.restart();
    await v.assertOutcome(["g-4", "f-1", "e-4"]);
  });
});

/**
 * A link with a version guard into a destination with max_msg_size 4096 (plus `limits`), which has
 * already dead-lettered entity g's version 5 (too large) and then relayed its version 4 (live).
 */
async function versionScenario(t: HasAfter, store: string, limits: Partial<StreamConfig>, linkExtra = "") {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const dlq = await deadLetterStream(ncb);
  await updateStream(ncb, dst, { max_msg_size: 4096, ...limits });
  const guard = `    guard: { ${store}, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`;
  const { relay } = await startRelay(t, yaml(dlq.yaml + guard + linkExtra), "b", { http: true });
  const big = new Uint8Array(8_000).fill(0x35);
  const version = (id: string, entity: string, n: number, data?: Uint8Array) => ({
    subject: `${src}.e`,
    headers: { "Nats-Msg-Id": id, "Entity-Id": entity, "Entity-Version": String(n) },
    ...(data ? { data } : {}),
  });
  const publish = (...messages: OutMessage[]) =>
    publishMany(nca, messages.length, (i) => messages[i] ?? { subject: "never" }, 1);
  const decided = () => metricValue(relay, "relay_messages_total", {});
  await publish(version("g-5", "g", 5, big));
  await waitForCount(ncb, dlq.stream, 1, 15_000);
  await publish(version("g-4", "g", 4));
  await waitForCount(ncb, dst, 1, 15_000);
  let sent = 2;
  return {
    relay,
    ncb,
    dst,
    big,
    version,
    publish: async (...messages: OutMessage[]) => {
      await publish(...messages);
      sent += messages.length;
    },
    /** Until every message sent is in the pipeline, or (were a version wrongly counted) decided stale. */
    waitHeld: async (what: string) => {
      await waitForState(relay, "paused");
      await check(async () => (await decided()) + link(relay).inFlight === sent && link(relay).inFlight > 0, {
        name: `every message received: ${what}`,
      });
      // At least one more retry (100 ms or later) after that: any claim in flight has answered by then.
      const errors = await metricValue(relay, "relay_errors_total", {});
      await check(async () => (await metricValue(relay, "relay_errors_total", {})) > errors, {
        name: "the link retried",
      });
    },
    assertOutcome: async (relayed: string[]) => {
      await check(async () => (await decided()) === sent, { name: `all ${sent} decided`, timeoutMs: 15_000 });
      assert.deepEqual(ids(await readStream(ncb, dlq.stream)), ["g-5", "e-5"]);
      assert.deepEqual(ids(await readStream(ncb, dst)), relayed);
      assert.equal(
        await metricValue(relay, "relay_messages_total", { outcome: "stale" }),
        0,
        "no version stale",
      );
      assert.equal(await metricValue(relay, "relay_corrections_total", { kind: "stale_version" }), 0);
      assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "dead_lettered" }), 2);
      assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), relayed.length);
    },
  };
}
