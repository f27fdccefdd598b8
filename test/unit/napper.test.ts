import { test } from "node:test";
import assert from "node:assert/strict";
import { Napper } from "../../src/group/lease-wakeup.js";
import { TickGrid } from "../../src/lifecycle/tick-grid.js";

/** Counts the abort listeners added to a signal (what a nap cost per call before). */
function counted(signal: AbortSignal): { signal: AbortSignal; added: () => number } {
  let added = 0;
  const add = signal.addEventListener.bind(signal);
  signal.addEventListener = ((...args: Parameters<AbortSignal["addEventListener"]>) => {
    added++;
    add(...args);
  }) as AbortSignal["addEventListener"];
  return { signal, added: () => added };
}

test("a lease's naps: many naps follow the loop's signal with one listener; its abort ends a nap at once, on the grid or off it; wake ends the current nap or the next", async () => {
  for (const grid of [undefined, 250]) {
    const napper = new Napper(new TickGrid());
    const ac = new AbortController();
    const { signal, added } = counted(ac.signal);
    for (let i = 0; i < 20; i++) await napper.nap(1, signal, grid && 1);
    assert.equal(added(), 1, `one listener for 20 naps (grid ${grid ?? "none"})`);
    const started = performance.now();
    const long = napper.nap(60_000, signal, grid);
    setTimeout(() => ac.abort(), 20);
    await long;
    assert.ok(performance.now() - started < 1_000, `the abort ended a 60 s nap at once (grid ${grid ?? "none"})`);
    await napper.nap(60_000, signal, grid); // aborted already: returns at once
  }
  const napper = new Napper();
  const signal = new AbortController().signal;
  const started = performance.now();
  const nap = napper.nap(60_000, signal);
  setTimeout(() => napper.wake(), 20);
  await nap;
  napper.wake(); // no nap under way: the next one ends at once
  await napper.nap(60_000, signal);
  assert.ok(performance.now() - started < 1_000, "woken twice, each at once");
});
