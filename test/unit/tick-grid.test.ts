import { test } from "node:test";
import assert from "node:assert/strict";
import { TickGrid } from "../../src/lifecycle/tick-grid.js";

test("waits due in the same tick share one timer (one callback wakes them all); a wait never ends later than asked", async () => {
  const grid = new TickGrid(() => 1_000); // a frozen clock: every wait is computed from t = 1000
  const started = performance.now();
  const a = grid.sleep(950, 500); // last tick at or before 1950: 1500
  const b = grid.sleep(800, 500); // at or before 1800: 1500 too
  assert.equal(grid.pending, 1, "one timer for both");
  await Promise.all([a, b]);
  const took = performance.now() - started;
  assert.ok(took < 800, `woken at the tick (500 ms), not after the longer wait: ${Math.round(took)} ms`);
  assert.equal(grid.pending, 0);
});

test("a wait shorter than the grid is not rounded up; an abort ends a wait at once and its timer with it", async () => {
  const grid = new TickGrid(() => 1_000);
  const started = performance.now();
  await grid.sleep(30, 1_000); // no tick of 1000 in (1000, 1030]: after 30 ms
  assert.ok(performance.now() - started < 500, "not rounded up to the grid");
  const ac = new AbortController();
  const long = grid.sleep(60_000, 1, ac.signal);
  assert.equal(grid.pending, 1);
  ac.abort();
  await long;
  assert.equal(grid.pending, 0, "the aborted wait's timer is gone");
  await grid.sleep(10, 1, AbortSignal.abort()); // already aborted: at once
});

test("every: functions of one period share one timer, called at each tick until they leave; the last one out ends it", async () => {
  const grid = new TickGrid();
  const calls = { a: 0, b: 0 };
  const leaveA = grid.every(20, () => calls.a++);
  const leaveB = grid.every(20, () => calls.b++);
  assert.equal(grid.pending, 1, "one timer for the period");
  while (calls.b < 3) await new Promise((r) => setTimeout(r, 5));
  assert.ok(Math.abs(calls.a - calls.b) <= 1, `called together: ${JSON.stringify(calls)}`);
  leaveA();
  const a = calls.a;
  while (calls.b < 6) await new Promise((r) => setTimeout(r, 5));
  assert.equal(calls.a, a, "a left: no more calls");
  leaveB();
  assert.equal(grid.pending, 0, "the period's timer ended with its last function");
});
