import { test } from "node:test";
import assert from "node:assert/strict";
import { PumpScheduler } from "../../src/link/stages/scheduler.js";
import { check } from "../helpers/check.js";

test("pump scheduler: a deadline asked for after cancel() arms a timer of its own (a backoff after an abandoned pipeline wakes it)", async () => {
  let pumps = 0;
  const s = new PumpScheduler(() => pumps++, () => 1);
  const from = Date.now();
  s.scheduleAt(from + 10); // a deadline, then the pipeline is abandoned before it fires
  s.cancel();
  s.scheduleAt(from + 50); // later than the cancelled one: it must not count as armed
  await check(() => Date.now() > from + 30, { name: "past the cancelled deadline", timeoutMs: 1_000, intervalMs: 5 });
  assert.equal(pumps, 0, "the cancelled deadline did not pump");
  await check(() => pumps === 1, { name: "the pump ran at the new deadline", timeoutMs: 2_000, intervalMs: 10 });
});

test("pump scheduler: the earliest deadline wins; a later one never pushes it back", async () => {
  let pumps = 0;
  const s = new PumpScheduler(() => pumps++, () => 1);
  const from = Date.now();
  s.scheduleAt(from + 30);
  s.scheduleAt(from + 60_000);
  await check(() => pumps === 1, { name: "the pump ran at the earlier deadline", timeoutMs: 2_000, intervalMs: 10 });
  s.cancel();
});
