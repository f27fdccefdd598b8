import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { createLogger } from "../../src/observability/logger.js";
import { StallWatch } from "../../src/link/stall-watch.js";
import type { StallStep } from "../../src/link/stall-watch.js";

function harness(opts: { filtered?: boolean } = {}) {
  let now = 0;
  const steps: StallStep[] = [];
  const reasons: (string | undefined)[] = [];
  const watch = new StallWatch({
    stallAfterMs: 10_000,
    filtered: opts.filtered ?? false,
    logger: createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, cb) => cb() }), secrets: [] }),
    now: () => now,
    counted: (s) => steps.push(s),
    heal: () => Promise.resolve(),
    changed: (r) => reasons.push(r),
  });
  const tick = (ms: number) => (now += ms);
  return { watch, steps, reasons, tick };
}

const waiting = { streamLastSeq: 200, pending: 100, deliveredSeq: 100 };

test("stall watch: no delivery for stallAfter while the source has messages: stalled, healed pull → consumer → reconnect (repeated), ended by progress", async () => {
  const h = harness();
  h.watch.observe(waiting, 5, true); // the first reading is the baseline
  for (let s = 0; s <= 9; s++) {
    h.watch.observe(waiting, 5, true);
    h.tick(1_000);
  }
  assert.equal(h.watch.stalled, undefined, "not before stallAfter");
  h.watch.observe(waiting, 5, true); // 10 s without progress
  assert.match(h.watch.stalled ?? "", /no delivery for 10 s while the source has messages for the link \(100 messages pending, consumer delivered up to seq 100\)/);
  assert.deepEqual(h.steps, ["pull"]);
  for (let s = 0; s < 35; s++) {
    await Promise.resolve();
    h.tick(1_000);
    h.watch.observe(waiting, 5, true);
  }
  assert.deepEqual(h.steps, ["pull", "consumer", "reconnect", "reconnect"], "each step gets stallAfter; the last repeats");
  h.watch.observe({ ...waiting, deliveredSeq: 101 }, 6, true);
  assert.equal(h.watch.stalled, undefined, "progress ends it");
  assert.deepEqual(h.reasons.map((r) => r === undefined), [false, true]);
});

test("stall watch: never on an idle source, a filtered link with nothing pending, or while not eligible", () => {
  const idle = harness();
  for (let s = 0; s < 60; s++) {
    idle.watch.observe({ streamLastSeq: 100, pending: 0, deliveredSeq: 100 }, 5, true);
    idle.tick(1_000);
  }
  assert.equal(idle.steps.length, 0, "an idle source is no stall");

  const filtered = harness({ filtered: true });
  for (let s = 0; s < 60; s++) {
    // Other subjects move the stream's last sequence; none is for this link.
    filtered.watch.observe({ streamLastSeq: 100 + s, pending: 0, deliveredSeq: 50 }, 5, true);
    filtered.tick(1_000);
  }
  assert.equal(filtered.steps.length, 0, "under a filter only pending messages are work");

  const held = harness();
  for (let s = 0; s < 60; s++) {
    held.watch.observe(waiting, 5, s % 9 !== 0); // ineligible now and then: the clock starts again each time
    held.tick(1_000);
  }
  assert.equal(held.steps.length, 0, "a link that may not move (standby, paused, holding messages) is no stall");
});

test("stall watch: a delivery counted by the relay is progress even when the consumer's reading lags", () => {
  const h = harness();
  for (let s = 0; s < 30; s++) {
    h.watch.observe(waiting, s, true);
    h.tick(1_000);
  }
  assert.equal(h.steps.length, 0);
});
