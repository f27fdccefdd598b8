import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, assertInOrder, DEFAULT_GROUP, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { publishMany } from "../helpers/streams.js";

/**
 * A link's rate cap (maxRate, src/link/rate-cap.ts) holds what it pulls to the cap. The rate is read from
 * the relay's own counter (relay_messages_total) at two moments the test takes, over an interval it
 * measures itself: not a wall-clock assertion on how fast the relay could go. `npm test` measures 30 s at
 * 2,000 msgs/s, as the issue asks (a 70,000-message backlog); `RATE_CAP_SECONDS=5` for a quick look.
 */
const SECONDS = Number(process.env["RATE_CAP_SECONDS"] ?? 30);
const BACKLOG = 2_000 * (SECONDS + 5);

test(`a 2,000 msgs/s cap holds within 10 % over ${SECONDS} s of a ${BACKLOG}-message backlog; a reload changes the cap without a restart; every id once, in order`, async (t) => {
  const r = await twoRegions(t);
  const ids = await publishIds(r.nca, r.src, "m", BACKLOG);
  // The lease transitions witness that a reload did not restart the link: the default lease, so that a
  // busy machine (a renewal late past a short lease) cannot pass for a restart.
  const yaml = (cap: string) => r.yaml(`    maxRate: ${cap}\n`, DEFAULT_GROUP);
  const started = performance.now();
  const { relay } = await startRelay(t, yaml('{ messages: "2000/s" }'), "b");
  const relayed = () => metricValue(relay, "relay_messages_total", { link: "a-to-b", outcome: "relayed" });
  /** Messages relayed per second over `ms`, the interval as the test measured it. */
  const rateOver = async (ms: number): Promise<{ rate: number; count: number; seconds: number }> => {
    const c0 = await relayed();
    const t0 = performance.now();
    await new Promise((resolve) => setTimeout(resolve, ms));
    const c1 = await relayed();
    const seconds = (performance.now() - t0) / 1000;
    return { rate: (c1 - c0) / seconds, count: c1 - c0, seconds };
  };
  assert.equal(await metricValue(relay, "relay_link_max_rate", { link: "a-to-b", unit: "messages" }), 2_000);
  // Past the first second's burst (the bucket starts full) and the start: steady state.
  await check(async () => (await relayed()) >= 3_000, { name: "the link moves (3,000 relayed)", timeoutMs: 15_000, intervalMs: 50 });

  const capped = await rateOver(SECONDS * 1_000);
  t.diagnostic(`capped at 2,000/s: ${capped.count} in ${capped.seconds.toFixed(2)} s`);
  assert.ok(Math.abs(capped.rate - 2_000) <= 200, `2,000 msgs/s ± 10 %: relayed ${capped.count} in ${capped.seconds.toFixed(2)} s (${Math.round(capped.rate)}/s)`);
  const status = relay.status().links[0]?.window;
  assert.deepEqual(status?.maxRate, { messages: 2_000 }, `/status shows the cap: ${JSON.stringify(status)}`);
  assert.equal(status?.limit, "rate cap", `the window names the cap as what holds it: ${JSON.stringify(status)}`);
  assert.equal(await metricValue(relay, "relay_window_limit", { link: "a-to-b", limit: "rate cap" }), 1);
  // Deliveries waiting for the cap's tokens: counted, never more than the time that passed. (The window
  // is sized to the cap, so after the first burst deliveries arrive about as fast as the cap admits
  // them and wait only part of the time: the window names the cap as what holds the link, above.)
  const cappedSeconds = (await metricValue(relay, "relay_link_rate_capped_seconds_total", { link: "a-to-b" })) ?? 0;
  t.diagnostic(`relay_link_rate_capped_seconds_total ${cappedSeconds.toFixed(1)} after ${SECONDS} s measured`);
  assert.ok(cappedSeconds > 0 && cappedSeconds <= (performance.now() - started) / 1000 + 1, `the time held by the cap is counted: ${cappedSeconds} s`);

  // A lower cap, in place: the link is not restarted (no drain, no lease released and taken again), the rate follows.
  const leases = () => Promise.all(["acquired", "released"].map((reason) => metricValue(relay, "relay_lease_transitions_total", { link: "a-to-b", reason })));
  const leasesBefore = await leases();
  const lowered = await relay.reload(parseConfigText(yaml('{ messages: "1000/s" }'), "test.yaml"));
  assert.deepEqual({ retuned: lowered.retuned, changed: lowered.changed, result: lowered.result }, { retuned: ["a-to-b"], changed: [], result: "success" });
  assert.equal(await metricValue(relay, "relay_link_max_rate", { link: "a-to-b", unit: "messages" }), 1_000);
  await new Promise((resolve) => setTimeout(resolve, 500)); // what the pipeline held at the old rate goes first
  const slower = await rateOver(2_000);
  t.diagnostic(`capped at 1,000/s: ${slower.count} in ${slower.seconds.toFixed(2)} s`);
  assert.ok(Math.abs(slower.rate - 1_000) <= 100, `1,000 msgs/s ± 10 % after the reload: relayed ${slower.count} in ${slower.seconds.toFixed(2)} s (${Math.round(slower.rate)}/s)`);
  assert.deepEqual(await leases(), leasesBefore, "the same running link: its lease was neither released nor taken again");

  // The cap removed, in place: the rest of the backlog goes at the link's own pace.
  const removed = await relay.reload(parseConfigText(r.yaml("", DEFAULT_GROUP), "test.yaml"));
  assert.deepEqual(removed.retuned, ["a-to-b"]);
  assert.equal(relay.status().links[0]?.window?.maxRate, undefined);
  await waitForCount(r.ncb, r.dst, ids.length, 30_000, "every message");
  await assertExactlyOnce(r.ncb, r.dst, ids);
  await assertInOrder(r.ncb, r.dst, ids);
  assert.equal(await metricValue(relay, "relay_link_stalls_total", {}), 0, "a capped link is never taken for a stalled one");
});

/**
 * A bytes cap below one message: each 8 KiB message waits ~2 s for the cap's tokens with nothing
 * else delivered meanwhile (the window is one message). With stallAfter 1s the stall watch would call
 * that a stall and heal it (a new pull: what the cap held is dropped and redelivered); a link held by its
 * cap is not eligible.
 */
test("a link held by its bytes cap for longer than stallAfter is not stalled; it moves at the cap, in order", async (t) => {
  const r = await twoRegions(t);
  const ids = Array.from({ length: 4 }, (_, i) => `big-${i}`);
  await publishMany(r.nca, ids.length, (i) => ({ subject: `${r.src}.${i}`, headers: { "Nats-Msg-Id": ids[i] ?? "" }, data: new Uint8Array(8 * 1024).fill(i) }));
  const { relay } = await startRelay(t, r.yaml('    maxRate: { bytes: "4KiB/s" }\n    batchSize: 1\n    stallAfter: 1s\n'), "b");
  const states = new Set<string>();
  const t0 = performance.now();
  await check(
    async () => {
      states.add(relay.status().links[0]?.state ?? "");
      return (await metricValue(relay, "relay_messages_total", { link: "a-to-b", outcome: "relayed" })) >= ids.length;
    },
    { name: "every message relayed at the bytes cap", timeoutMs: 20_000, intervalMs: 100 },
  );
  const seconds = (performance.now() - t0) / 1000;
  // 32 KiB at 4 KiB/s: the first message on the full bucket, then ~2 s a message.
  assert.ok(seconds >= 5, `held to the cap: 4 messages of 8 KiB took ${seconds.toFixed(1)} s`);
  assert.ok(!states.has("stalled"), `never stalled: ${[...states].join(", ")}`);
  assert.equal(await metricValue(relay, "relay_link_stalls_total", { link: "a-to-b" }), 0, "no healing step");
  assert.ok((await metricValue(relay, "relay_link_rate_capped_seconds_total", { link: "a-to-b" })) >= 3);
  await assertExactlyOnce(r.ncb, r.dst, ids);
  await assertInOrder(r.ncb, r.dst, ids);
});
