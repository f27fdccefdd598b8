import { test } from "node:test";
import assert from "node:assert/strict";
import { chaosSchedule, FAULT_KINDS } from "../faults/chaos/schedule.js";

test("chaos schedule: the same seed and length give the same schedule; another seed another", () => {
  assert.deepEqual(chaosSchedule(21, 240_000), chaosSchedule(21, 240_000));
  assert.notDeepEqual(chaosSchedule(21, 240_000), chaosSchedule(22, 240_000));
});

test("chaos schedule: one fault at a time, 8-15 s apart, each healed before the next and before the load ends", () => {
  for (const seed of [1, 2, 3, 21, 4_294_967_295]) {
    const faults = chaosSchedule(seed, 300_000);
    assert.ok(faults.length >= 15, `seed ${seed}: ${faults.length} faults in 5 minutes`);
    assert.equal(faults[0]?.atMs, 5_000);
    for (const [i, f] of faults.entries()) {
      assert.ok(f.atMs + f.durationMs <= 300_000, `seed ${seed}: fault ${i} heals before the load ends`);
      const next = faults[i + 1];
      if (!next) continue;
      const gap = next.atMs - f.atMs;
      assert.ok(gap >= 8_000 && (gap <= 15_000 || next.atMs === f.atMs + f.durationMs + 1_000), `seed ${seed}: gap ${gap} ms after fault ${i}`);
      assert.ok(next.atMs >= f.atMs + f.durationMs + 1_000, `seed ${seed}: fault ${i + 1} starts after fault ${i} healed`);
    }
  }
});

test("chaos schedule: every fault kind in the first seven faults (any run of two minutes or more)", () => {
  for (const seed of [1, 5, 9, 21]) {
    const kinds = new Set(chaosSchedule(seed, 120_000).slice(0, FAULT_KINDS.length).map((f) => f.kind));
    assert.deepEqual([...kinds].sort(), [...FAULT_KINDS].sort(), `seed ${seed}`);
  }
});
