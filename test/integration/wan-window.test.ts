import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startDelayProxy } from "../helpers/delay-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertInOrder, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";
import { startChaosLoad } from "../faults/chaos/load.js";
import { DEFAULTS } from "../../src/config/defaults.js";
import { WINDOW_LIMITS } from "../../src/link/window-controller.js";
import type { WindowLimit } from "../../src/link/window-controller.js";

/** A link's default window cap (16384). */
const CAP = DEFAULTS.inFlight;

/**
 * A link reading another region over a WAN, with its default settings: what limits it is how much may
 * be on the wire per round trip (the source consumer's MaxAckPending). A cursor placed across a round
 * trip of 10 ms or more starts its window at its cap (`inFlight`, 16384 by default) instead of half of
 * it, so a backlog across 300 ms does not spend its first second growing (before the window sized
 * itself: 500, one batch per round trip). Read from the window gauge, `/status` and the consumer
 * itself, not from a clock.
 */
test("over a 300 ms round trip with default settings the window starts at its cap (16384, not one batch) and the consumer's MaxAckPending is that window; the round trip is measured; every message in order", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 150 });
  t.after(() => wan.close());
  const yaml = linkYaml({
    regions: { a: [`nats://127.0.0.1:${wan.port}`], b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
  });
  const ids = await publishIds(nca, src, "m", 30_000);
  const { relay, logs } = await startRelay(t, yaml, "b");
  const window = () => metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" });
  const jsm = await jetstreamManager(nca);
  let peak = 0;
  let maxAckPending = 0;
  await check(
    async () => {
      const info = await jsm.consumers.info(src, "relay-a-to-b").catch(() => undefined);
      peak = Math.max(peak, info?.num_ack_pending ?? 0);
      maxAckPending = info?.config.max_ack_pending ?? 0;
      return maxAckPending > 0 && relay.status().links[0]?.window?.rttMs !== undefined;
    },
    { name: "the cursor is placed (the consumer exists, the round trip is measured)", timeoutMs: 30_000, intervalMs: 100 },
  );
  assert.equal(maxAckPending, CAP, "the consumer is placed with the window at its cap");
  assert.equal(await window(), CAP, "placed across a WAN, the window is at its cap");
  const status = relay.status().links[0]?.window;
  // The proxy times its delays in whole milliseconds (Date.now()): each way may take up to 1 ms less.
  assert.ok(status && status.rttMs !== undefined && status.rttMs >= 298 && status.rttMs < 1_000, `the round trip is measured: ${JSON.stringify(status)}`);
  assert.ok(status && WINDOW_LIMITS.includes(status.limit as WindowLimit), `a limit is named: ${JSON.stringify(status)}`);
  assert.equal(await metricValue(relay, "relay_window_limit", { link: "a-to-b", limit: status?.limit ?? "" }), 1, "the metric names the limit /status names");
  assert.ok((await metricValue(relay, "relay_source_rtt_seconds", { link: "a-to-b" })) >= 0.298, "the round trip is exported");
  await waitForCount(ncb, dst, ids.length, 90_000, "every message over the WAN");
  await assertInOrder(ncb, dst, ids);
  assert.ok(peak <= CAP, `never more than the cap unacked (peak ${peak})`);
  const doubled = logs.lines.filter((l) => l.includes("pull window doubled"));
  assert.deepEqual(doubled, [], "it started at its cap: no slow start to climb");
});

/**
 * A cursor placed across loopback starts at half its cap; when the round trip then grows to 300 ms and
 * a backlog builds, the window grows by itself while the round trip is what holds the link, and the
 * consumer's MaxAckPending follows it. Small caps (inFlight 1000, batches of 50: a start of 500, at
 * most ~1,700 msgs/s across 300 ms) so that publishing 12,000 at once builds a backlog on any machine.
 */
test("a round trip that grows to 300 ms after the cursor was placed on loopback: the window grows by itself past its start (two batches) up to its cap; the consumer's MaxAckPending follows; every message in order", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 0 });
  t.after(() => wan.close());
  const yaml = linkYaml({
    regions: { a: [`nats://127.0.0.1:${wan.port}`], b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    inFlight: 1000\n    batchSize: 50\n" }],
  });
  // A few messages first: an empty stream says nothing of its sizes, and the bytes cap would judge the
  // first window by the largest message the stream allows.
  const first = await publishIds(nca, src, "w", 10);
  const { relay } = await startRelay(t, yaml, "b");
  await waitForCount(ncb, dst, first.length, 20_000, "the first messages, across loopback");
  const window = () => metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" });
  assert.equal(await window(), 100, "placed across loopback, it starts at two batches");
  wan.setOneWayMs(150);
  const ids = [...first, ...(await publishIds(nca, src, "m", 12_000))];

  const jsm = await jetstreamManager(nca);
  let peak = 0;
  let maxAckPending = 0;
  await check(
    async () => {
      const w = await window();
      const info = await jsm.consumers.info(src, "relay-a-to-b").catch(() => undefined);
      peak = Math.max(peak, info?.num_ack_pending ?? 0);
      maxAckPending = info?.config.max_ack_pending ?? 0;
      return w > 100 && maxAckPending === w;
    },
    { name: "the window grows past its start (100) by itself and the consumer's MaxAckPending follows it", timeoutMs: 30_000, intervalMs: 100 },
  ).catch(async (err: unknown) => {
    throw new Error(`${(err as Error).message}; window ${await window()}, MaxAckPending ${maxAckPending}, status ${JSON.stringify(relay.status().links[0]?.window)}`);
  });
  await waitForCount(ncb, dst, ids.length, 90_000, "every message over the WAN");
  await assertInOrder(ncb, dst, ids);
  assert.ok(peak <= 1_000, `never more than the cap unacked (peak ${peak})`);
});

/**
 * The round trip jumps between 20 and 400 ms every 2 s under a steady load: the window follows without
 * leaving its bounds, nothing is mistaken for a silent path or a stall (a 400 ms round trip is slow, not
 * silent), and every message arrives once, in order.
 */
test("a round trip jumping between 20 and 400 ms under load: the window stays within one batch and its cap, no false stall, every id once and in order", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 10 });
  t.after(() => wan.close());
  const yaml = linkYaml({
    regions: { a: [`nats://127.0.0.1:${wan.port}`], b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
  });
  const first = await publishIds(nca, src, "w", 10); // sizes to judge the first window by (see above)
  const { relay } = await startRelay(t, yaml, "b");
  await waitForCount(ncb, dst, first.length, 20_000, "the first messages");
  assert.equal(await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" }), CAP, "placed across a 20 ms round trip (a WAN), it starts at its cap");
  const total = 2_000 * 12;
  const load = startChaosLoad(nca, src, { total, ratePerSec: 2_000, entities: 10 });
  const finished = () => load.published >= total;
  t.after(() => load.stop());
  const windows: number[] = [];
  const states = new Set<string>();
  let slow = false;
  while (!finished()) {
    slow = !slow;
    wan.setOneWayMs(slow ? 200 : 10);
    const until = Date.now() + 2_000;
    await check(
      async () => {
        windows.push(await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" }));
        states.add(relay.status().links[0]?.state ?? "?");
        return Date.now() >= until || finished();
      },
      { name: "two seconds at this round trip", timeoutMs: 5_000, intervalMs: 200 },
    );
  }
  await load.done;
  await waitForCount(ncb, dst, first.length + total, 60_000, "every message");
  assertDelivery(await checkDelivery({ fault: "round trip jumping 20-400 ms", dest: ncb, stream: dst, source: await readSource(nca, src) }));
  assert.ok(Math.min(...windows) >= 500 && Math.max(...windows) <= CAP, `the window within [500, ${CAP}]: ${Math.min(...windows)}-${Math.max(...windows)}`);
  assert.ok(!states.has("stalled") && !states.has("recovering") && !states.has("paused"), `no false stall or trouble: ${[...states].join(", ")}`);
  assert.equal(await metricValue(relay, "relay_link_stalls_total", {}), 0, "no stall step");
});
