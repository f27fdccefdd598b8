import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startDelayProxy } from "../helpers/delay-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertInOrder, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";

/**
 * A link reading another region over a WAN: what limits it is how much it has asked for per round trip.
 * With one pull of `batchSize` outstanding at a time, the source delivers one batch per round trip and
 * the messages the relay holds unacked never grow far beyond a batch; with its pulls covering the window,
 * the source delivers up to `inFlight` per round trip and its ack-pending count reaches the window.
 * (`inFlightBytes: 1GiB`: the window is also bounded by inFlightBytes of the largest possible message.)
 */
test("a link reading over a slow WAN keeps its whole window requested: the source consumer's ack-pending reaches inFlight, not one batch", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 150 });
  t.after(() => wan.close());
  const yaml = linkYaml({
    regions: { a: [`nats://127.0.0.1:${wan.port}`], b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    batchSize: 200\n    inFlight: 1000\n    inFlightBytes: 1GiB\n" }],
  });
  const ids = await publishIds(nca, src, "m", 6_000);
  const { relay, logs } = await startRelay(t, yaml, "b");

  const jsm = await jetstreamManager(nca);
  let peak = 0;
  await check(
    async () => {
      const consumers = await jsm.consumers.list(src).next();
      for (const c of consumers) peak = Math.max(peak, c.num_ack_pending);
      return peak >= 800;
    },
    { name: "the source consumer holds most of the window (1000) as ack-pending, not one batch (200)", timeoutMs: 30_000, intervalMs: 10 },
  ).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}; peak ack-pending ${peak}`);
  });
  await waitForCount(ncb, dst, ids.length, 60_000, "every message over the WAN");
  await assertInOrder(ncb, dst, ids);
  assert.ok(peak <= 1_000, `never more than inFlight unacked (peak ${peak})`);
  const logged = logs.lines.find((l) => l.includes('"msg":"pull window'));
  assert.ok(logged?.includes('"window":1000') && logged.includes("inFlight messages per round trip"), `the window is logged: ${logged ?? "(no line)"}`);
  // With the round trip it was measured over (300 ms through the proxy) and the rate that allows.
  const line = JSON.parse(logged ?? "{}") as { rttMs?: number; capPerSecond?: number };
  assert.ok(line.rttMs !== undefined && line.rttMs >= 300 && line.rttMs < 1_000, `rttMs ${line.rttMs}`);
  assert.equal(line.capPerSecond, Math.round(1_000_000 / line.rttMs));
  assert.equal(await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" }), 1_000);
});
