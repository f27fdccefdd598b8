import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startDelayProxy } from "../helpers/delay-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertInOrder, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";
import { startChaosLoad } from "../faults/chaos/load.js";

/**
 * A link reading another region over a WAN, with its default settings: what limits it is how much may
 * be on the wire per round trip (the source consumer's MaxAckPending). The window sizes itself
 * (link-window.ts): it starts at half its cap and grows while the round trip is what holds the link, up
 * to `inFlight` (8192 by default), so a 300 ms round trip does not cap the link at one batch per round
 * trip (before: 500). Read from the window gauge, `/status` and the consumer itself, not from a clock.
 */
test("over a 300 ms round trip with default settings the window grows by itself past its start (half its cap, 8 batches) as the round trip needs; the consumer's MaxAckPending follows it; every message in order", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 150 });
  t.after(() => wan.close());
  const yaml = linkYaml({
    regions: { a: [`nats://127.0.0.1:${wan.port}`], b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
  });
  const ids = await publishIds(nca, src, "m", 30_000);
  const { relay } = await startRelay(t, yaml, "b");
  const window = () => metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" });
  assert.equal(await window(), 4_096, "it starts at half its cap");

  const jsm = await jetstreamManager(nca);
  let peak = 0;
  let maxAckPending = 0;
  await check(
    async () => {
      const w = await window();
      const info = await jsm.consumers.info(src, "relay-a-to-b").catch(() => undefined);
      peak = Math.max(peak, info?.num_ack_pending ?? 0);
      maxAckPending = info?.config.max_ack_pending ?? 0;
      return w > 4_096 && maxAckPending === w;
    },
    { name: "the window grows past its start (4096) by itself and the consumer's MaxAckPending follows it", timeoutMs: 30_000, intervalMs: 100 },
  ).catch(async (err: unknown) => {
    throw new Error(`${(err as Error).message}; window ${await window()}, MaxAckPending ${maxAckPending}, status ${JSON.stringify(relay.status().links[0]?.window)}`);
  });
  const status = relay.status().links[0]?.window;
  assert.ok(status && status.rttMs !== undefined && status.rttMs >= 300 && status.rttMs < 1_000, `the round trip is measured: ${JSON.stringify(status)}`);
  assert.ok(status && ["rtt", "messages cap", "destination", "relay"].includes(status.limit), `a limit is named: ${JSON.stringify(status)}`);
  assert.equal(await metricValue(relay, "relay_window_limit", { link: "a-to-b", limit: status?.limit ?? "" }), 1);
  await waitForCount(ncb, dst, ids.length, 90_000, "every message over the WAN");
  await assertInOrder(ncb, dst, ids);
  assert.ok(peak <= 8_192, `never more than the cap unacked (peak ${peak})`);
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
  const { relay } = await startRelay(t, yaml, "b");
  await check(() => relay.status().links[0]?.state === "live", { name: "the link is live", timeoutMs: 20_000 });
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
  await waitForCount(ncb, dst, total, 60_000, "every message");
  assertDelivery(await checkDelivery({ fault: "round trip jumping 20-400 ms", dest: ncb, stream: dst, source: await readSource(nca, src) }));
  assert.ok(Math.min(...windows) >= 500 && Math.max(...windows) <= 8_192, `the window within [500, 8192]: ${Math.min(...windows)}-${Math.max(...windows)}`);
  assert.ok(!states.has("stalled") && !states.has("recovering") && !states.has("paused"), `no false stall or trouble: ${[...states].join(", ")}`);
  assert.equal(await metricValue(relay, "relay_link_stalls_total", {}), 0, "no stall step");
});
