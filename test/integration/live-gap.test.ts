import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import type { HasAfter } from "../helpers/servers.js";
import { assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { updateStream } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";

const linkOf = (relay: Relay) => relay.status().links[0];

/**
 * A live link far above the source's first sequence: the source deletes messages the consumer has not
 * reached yet (here by hand; a per-subject limit or a purge does the same). The consumer jumps over them
 * without a word, and the stream's first sequence never passes the cursor, so only the deliveries show
 * the holes. Set up: a window of 20 held by a full destination, seq 31-100 waiting at the source, seq
 * 40-44 and 60 deleted; then the destination takes everything again.
 */
async function holesAheadOfTheCursor(t: HasAfter, onGap: string) {
  const r = await twoRegions(t);
  const sent: string[] = [];
  const { relay } = await startRelay(t, r.yaml(`    batchSize: 10\n    inFlight: 20\n    onGap: ${onGap}\n`), "b", { gaps: true });
  await check(() => linkOf(relay)?.state === "live", { name: "the link is live", timeoutMs: 20_000 });
  await updateStream(r.ncb, r.dst, { max_msgs: 10, discard: DiscardPolicy.New });
  sent.push(...(await publishIds(r.nca, r.src, "m", 100)));
  await check(() => linkOf(relay)?.inFlight === 20, { name: "the link holds a full window (seq 11-30) for the full destination", timeoutMs: 20_000 });
  const jsm = await jetstreamManager(r.nca);
  const holes = [40, 41, 42, 43, 44, 60];
  for (const seq of holes) await jsm.streams.deleteMessage(r.src, seq, false);
  await updateStream(r.ncb, r.dst, { max_msgs: -1 });
  const lost = new Set(holes.map((seq) => `m-${seq - 1}`));
  return { r, relay, sent, kept: sent.filter((id) => !lost.has(id)) };
}

test("onGap continue: holes the consumer jumps over while live are reported exactly (each range once) and everything else relayed in order", async (t) => {
  const { r, relay, kept } = await holesAheadOfTheCursor(t, "continue");
  await waitForCount(r.ncb, r.dst, kept.length, 20_000, "everything the source still holds");
  await assertInOrder(r.ncb, r.dst, kept);
  await check(async () => (await metricValue(relay, "relay_gap_messages_total", { link: "a-to-b" })) === 6, {
    name: "relay_gap_messages_total counts the 6 deleted messages",
    timeoutMs: 5_000,
  });
  const gaps = linkOf(relay)?.gaps.map((g) => [g.fromSeq, g.toSeq, g.count, g.exact]);
  assert.deepEqual(gaps, [
    [40, 44, 5, true],
    [60, 60, 1, true],
  ]);
});

test("onGap halt: the link stops at the first hole, with its exact range, and relays nothing after it", async (t) => {
  const { r, relay, sent } = await holesAheadOfTheCursor(t, "halt");
  await check(() => linkOf(relay)?.state === "failed", { name: "the link halted", timeoutMs: 20_000 });
  const link = linkOf(relay);
  assert.equal(link?.lastError?.code, "SOURCE_GAP");
  assert.match(link?.stateReason ?? "", /source seq 40-44 \(5 messages\) deleted before they were relayed; onGap is halt/);
  await waitForCount(r.ncb, r.dst, 39, 10_000, "everything before the hole");
  await assertInOrder(r.ncb, r.dst, sent.slice(0, 39));
});
