import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BUSY_MSGS_PER_SEC,
  CHECK_EVERY_MS,
  HeapGrowth,
  REST_GROWING_PERCENT,
} from "../../src/lifecycle/heap-growth.js";

test("at rest the old generation may grow to twice what is live; a busy relay gives the choice back to V8, and takes it again at rest", () => {
  let relayed = 0;
  const set: string[] = [];
  const heap = new HeapGrowth(
    () => relayed,
    [],
    (flags) => void set.push(flags),
  );
  try {
    assert.equal(heap.start(), true);
    assert.deepEqual(set, [`--heap-growing-percent=${REST_GROWING_PERCENT}`], "a starting relay is at rest");
    relayed += 10 * CHECK_EVERY_MS; // 10,000 a second
    heap.check();
    assert.equal(heap.current, "busy");
    assert.deepEqual(set.slice(1), ["--heap-growing-percent=0"], "busy: V8's own factor");
    relayed += (BUSY_MSGS_PER_SEC * CHECK_EVERY_MS) / 1000 - 1; // just under the line
    heap.check();
    assert.equal(heap.current, "rest");
    assert.equal(set.length, 3, "each change set once");
    heap.check();
    assert.equal(set.length, 3, "no change, nothing set");
  } finally {
    heap.stop();
  }
});

test("a --heap-growing-percent given to node stays, whatever the load", () => {
  for (const argv of [["--heap-growing-percent=20"], ["--heap_growing_percent", "20"]]) {
    const set: string[] = [];
    const heap = new HeapGrowth(
      () => 0,
      argv,
      (flags) => void set.push(flags),
    );
    assert.equal(heap.start(), false);
    assert.deepEqual(set, []);
  }
});
