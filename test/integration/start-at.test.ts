/**
 * Where a new link starts (README "Where a new link starts"): `startAt` earliest, new, a time or a
 * source sequence, on a source that already holds messages; and a link with a record (its consumer,
 * or its markers in the destination) goes on from the record, whatever startAt says.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { TwoRegions } from "../helpers/scenario.js";
import { parseConfigText } from "../../src/config/load.js";
import { runPreflight } from "../../src/preflight/preflight.js";
import type { Relay } from "../../src/relay/relay.js";

const DURABLE = "relay-a-to-b";

/** The link has taken everything it was given: nothing pending or awaiting ack at the source. */
async function caughtUp(r: TwoRegions, what: string): Promise<void> {
  const jsm = await jetstreamManager(r.nca);
  await check(
    async () => {
      const info = await jsm.consumers.info(r.src, DURABLE);
      return info.num_pending === 0 && info.num_ack_pending === 0;
    },
    { name: `${what}: the link's consumer has nothing pending`, timeoutMs: 15_000, intervalMs: 100 },
  );
}

async function consumerCreated(r: TwoRegions): Promise<void> {
  const jsm = await jetstreamManager(r.nca);
  await check(() => jsm.consumers.info(r.src, DURABLE).then(() => true, () => false), { name: "the link created its source consumer", timeoutMs: 10_000, intervalMs: 50 });
}

async function noGap(relay: Relay): Promise<void> {
  assert.deepEqual(relay.status().links[0]?.gaps, [], "no gap reported");
  assert.equal(await metricValue(relay, "relay_gap_messages_total", { link: "a-to-b" }), 0);
}

/** The line the link logged where it placed its new consumer. */
function startLine(lines: readonly string[]): Record<string, unknown> {
  const line = lines.find((l) => l.includes("no source consumer: created one"));
  assert.ok(line, "a log line says where the link started");
  return JSON.parse(line) as Record<string, unknown>;
}

/** Deletes the source's first `n` messages: its first sequence is n + 1 (a gap check would see 1..n). */
async function dropHead(r: TwoRegions, n: number): Promise<void> {
  const jsm = await jetstreamManager(r.nca);
  await jsm.streams.purge(r.src, { seq: n + 1 });
  assert.equal((await jsm.streams.info(r.src)).state.first_seq, n + 1);
}

/** A moment strictly after everything stored so far, and strictly before anything stored from now on. */
async function instantBetween(): Promise<string> {
  const before = Date.now();
  await check(() => Date.now() >= before + 2, { name: "the clock moved past the last message stored", timeoutMs: 1_000, intervalMs: 1 });
  const at = Date.now();
  await check(() => Date.now() >= at + 2, { name: "the clock moved past the start time", timeoutMs: 1_000, intervalMs: 1 });
  return new Date(at).toISOString();
}

test("startAt earliest (explicit): a new link relays everything the source holds, in order", async (t) => {
  const r = await twoRegions(t);
  const old = await publishIds(r.nca, r.src, "old", 10);
  const { relay, logs } = await startRelay(t, r.yaml("    startAt: earliest\n"), "b");
  const live = await publishIds(r.nca, r.src, "live", 5);
  await waitForCount(r.ncb, r.dst, 15, 15_000);
  await caughtUp(r, "earliest");
  await assertInOrder(r.ncb, r.dst, [...old, ...live]);
  await noGap(relay);
  assert.equal(startLine(logs.lines)["startAt"], "earliest");
  await relay.stop(); // before the servers go (the test's after hooks stop them first)
});

test("startAt new: only messages stored after the link first runs are relayed, and the skipped ones are no gap", async (t) => {
  const r = await twoRegions(t);
  await publishIds(r.nca, r.src, "old", 10);
  await dropHead(r, 3); // first seq 4: a cursor read as 0 would see 1-3 as lost
  const { relay, logs } = await startRelay(t, r.yaml("    startAt: new\n"), "b");
  await consumerCreated(r);
  const line = startLine(logs.lines);
  assert.equal(line["startAt"], "new");
  assert.equal(line["startSeq"], 11, "the next message stored");
  // A backlog reading before the first delivery: the cursor is compared with the source's first sequence.
  const created = new Date().toISOString();
  await check(() => (relay.status().links[0]?.backlog?.at ?? "") > created, { name: "a backlog reading of the new consumer", timeoutMs: 5_000, intervalMs: 50 });
  const live = await publishIds(r.nca, r.src, "live", 5);
  await waitForCount(r.ncb, r.dst, 5, 15_000);
  await caughtUp(r, "new");
  await assertInOrder(r.ncb, r.dst, live);
  await noGap(relay);
  await relay.stop();
});

test("startAt time: the first message stored at or after the time, then everything after it", async (t) => {
  const r = await twoRegions(t);
  await publishIds(r.nca, r.src, "before", 10);
  await dropHead(r, 2);
  const at = await instantBetween();
  const after = await publishIds(r.nca, r.src, "after", 10);
  const { relay, logs } = await startRelay(t, r.yaml(`    startAt: { time: "${at}" }\n`), "b");
  await consumerCreated(r);
  const line = startLine(logs.lines);
  assert.equal(line["startAt"], `time ${at}`);
  assert.equal(line["startSeq"], 11);
  const live = await publishIds(r.nca, r.src, "live", 5);
  await waitForCount(r.ncb, r.dst, 15, 15_000);
  await caughtUp(r, "time");
  await assertInOrder(r.ncb, r.dst, [...after, ...live]);
  await noGap(relay);
  await relay.stop();
});

test("startAt seq: from that source sequence on", async (t) => {
  const r = await twoRegions(t);
  const old = await publishIds(r.nca, r.src, "old", 10);
  const { relay, logs } = await startRelay(t, r.yaml("    startAt: { seq: 7 }\n"), "b");
  const live = await publishIds(r.nca, r.src, "live", 5);
  await waitForCount(r.ncb, r.dst, 9, 15_000);
  await caughtUp(r, "seq");
  await assertInOrder(r.ncb, r.dst, [...old.slice(6), ...live]);
  await noGap(relay);
  const line = startLine(logs.lines);
  assert.equal(line["startAt"], "seq 7");
  assert.equal(line["startSeq"], 7);
  await relay.stop();
});

test("a link with a record ignores startAt: its consumer, then the destination's markers, say where it goes on", async (t) => {
  const r = await twoRegions(t);
  const first = await publishIds(r.nca, r.src, "first", 10);
  const run1 = await startRelay(t, r.yaml(), "b");
  await waitForCount(r.ncb, r.dst, 10, 15_000);
  await caughtUp(r, "run 1");
  await run1.relay.stop();

  // Down: messages published meanwhile are relayed when it comes back with startAt new (the consumer rules).
  const down1 = await publishIds(r.nca, r.src, "down1", 5);
  const run2 = await startRelay(t, r.yaml("    startAt: new\n"), "b");
  await waitForCount(r.ncb, r.dst, 15, 15_000);
  await caughtUp(r, "run 2");
  assert.ok(run2.logs.lines.some((l) => l.includes("the link's source consumer exists: it goes on from its ack floor")), "the log says startAt did not apply");
  await run2.relay.stop();

  // Down again, and its consumer deleted: the destination's markers rule, not startAt.
  const down2 = await publishIds(r.nca, r.src, "down2", 5);
  await (await jetstreamManager(r.nca)).consumers.delete(r.src, DURABLE);
  const run3 = await startRelay(t, r.yaml("    startAt: new\n"), "b");
  await waitForCount(r.ncb, r.dst, 20, 15_000);
  await caughtUp(r, "run 3");
  await assertInOrder(r.ncb, r.dst, [...first, ...down1, ...down2]);
  await noGap(run3.relay);
  const line = startLine(run3.logs.lines);
  assert.equal(line["startSeq"], 16, "after the last source seq the destination holds");
  assert.match(String(line["msg"]), /startAt new does not apply/);
  await run3.relay.stop();
});

test("check --live: the start row says where each link starts and how many messages that is", async (t) => {
  const r = await twoRegions(t);
  await publishIds(r.nca, r.src, "old", 10);
  const at = await instantBetween();
  await publishIds(r.nca, r.src, "after", 6);
  const startRow = async (extra: string) => {
    const report = await runPreflight(parseConfigText(r.yaml(extra), "test.yaml", {}));
    const row = report.links[0]?.rows.find((x) => x.name === "start");
    assert.ok(row, "a start row");
    return row;
  };
  assert.match((await startRow("")).detail, /startAt earliest starts it at a\/SRC\S* seq 1, 16 messages to relay now$/);
  assert.match((await startRow("    startAt: new\n")).detail, /startAt new starts it with the next message stored \(after seq 16\), 0 messages to relay now$/);
  assert.match((await startRow(`    startAt: { time: "${at}" }\n`)).detail, /starts it at a\/SRC\S* seq 11, 6 messages to relay now$/);
  assert.match((await startRow("    startAt: { seq: 14 }\n")).detail, /startAt seq 14 starts it at a\/SRC\S* seq 14, 3 messages to relay now$/);
  const jsm = await jetstreamManager(r.nca);
  assert.equal((await jsm.streams.info(r.src)).state.consumer_count, 0, "the check's counting consumers are gone");

  // Once the link has run, its consumer says where it goes on.
  const { relay } = await startRelay(t, r.yaml("    startAt: { seq: 14 }\n"), "b");
  await waitForCount(r.ncb, r.dst, 3, 15_000);
  await caughtUp(r, "check");
  await relay.stop();
  const row = await startRow("    startAt: new\n");
  assert.equal(row.level, "ok");
  assert.match(row.detail, /^relay-a-to-b exists: the link goes on after a\/SRC\S* seq 16 \(its ack floor\), 0 messages to relay; startAt new applies only to a link without a record$/);
});
