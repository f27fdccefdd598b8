import { test } from "node:test";
import { PumpScheduler } from "../../src/link/stages/scheduler.js";
import { check } from "../helpers/check.js";

test("pump scheduler: a deadline asked for after cancel() arms a timer of its own (a backoff after an abandoned pipeline wakes it)", async () => {
  let pumps = 0;
  const s = new PumpScheduler(() => pumps++, () => 1);
  s.scheduleAt(Date.now() + 60_000); // a far deadline, then the pipeline is abandoned
  s.cancel();
  s.scheduleAt(Date.now() + 20);
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
