import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { defaultDurableName } from "../../src/config/defaults.js";

/**
 * An idle owner's backlog reading (a consumer-info and a stream-info request every 5 s) is skipped while
 * the source's stream listing shows its stream unchanged (backlog-poll.ts, nats/stream-listing.ts), and
 * what a reading would find still is: a consumer deleted at rest (the listing's consumer count) is
 * re-created within seconds, and a message published after the quiet is relayed.
 */
test("an idle owner whose readings the stream listing spares: a consumer deleted at rest is re-created within seconds, a message after the quiet relayed", async (t) => {
  const r = await twoRegions(t);
  const durable = defaultDurableName("a-to-b");
  const { relay } = await startRelay(t, r.yaml(), "b");
  await publishIds(r.nca, r.src, "first", 5);
  await waitForCount(r.ncb, r.dst, 5, 20_000);
  // At rest: the last reading found nothing owed. (A reading under way when the count is read is let finish.)
  await check(() => relay.status().links[0]?.backlog?.messages === 0, {
    name: "a reading found nothing owed",
    timeoutMs: 10_000,
  });
  const settledFrom = Date.now();
  // Idle for two quiet stretches: the readings skipped while the listing shows the stream unchanged
  // (the skipping itself: test/unit/backlog-poll.test.ts).
  await check(() => Date.now() - settledFrom > 12_000, { name: "12 s at rest", timeoutMs: 15_000 });
  assert.equal(relay.status().links[0]?.state, "live");
  const jsm = await jetstreamManager(r.nca);
  const before = (await jsm.consumers.info(r.src, durable)).created;
  await jsm.consumers.delete(r.src, durable);
  await check(
    async () => {
      const info = await jsm.consumers.info(r.src, durable).catch(() => undefined);
      return info !== undefined && info.created !== before;
    },
    { name: "the consumer deleted at rest is re-created", timeoutMs: 10_000, intervalMs: 100 },
  );
  await publishIds(r.nca, r.src, "after", 3);
  await waitForCount(r.ncb, r.dst, 8, 20_000, "published after the quiet");
});
