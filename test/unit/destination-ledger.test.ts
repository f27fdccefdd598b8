import assert from "node:assert/strict";
import { test } from "node:test";
import { DestinationLedger } from "../../src/link/destination-ledger.js";
import { FinishedSeqs } from "../../src/link/finished-seqs.js";

test("the finished ledger keeps the newest 65,536 sequences, forgets the oldest first, and a repeat does not take a second slot", () => {
  const ledger = new DestinationLedger();
  const kept = 65_536;
  for (let seq = 1; seq <= kept + 10; seq++) ledger.done(seq, seq * 10);
  for (let seq = 1; seq <= 10; seq++) assert.equal(ledger.finishedAt(seq), undefined, `seq ${seq} forgotten`);
  assert.equal(ledger.finishedAt(11), 110);
  assert.equal(ledger.finishedAt(kept + 10), (kept + 10) * 10);
  ledger.done(11, 0); // the same sequence again (a redelivery finished twice): updated, not added
  ledger.done(kept + 11, 1);
  assert.equal(ledger.finishedAt(11), undefined, "the next oldest went for the one new sequence");
  assert.equal(ledger.finishedAt(12), 120);
  ledger.reset();
  assert.equal(ledger.finishedAt(12), undefined);
  ledger.done(5, 50);
  assert.equal(ledger.finishedAt(5), 50);
});

test("the finished ledger starts small and grows: nothing below 65,536 is forgotten while it grows, also after a reset", () => {
  const ledger = new DestinationLedger();
  for (let round = 0; round < 2; round++) {
    for (let seq = 1; seq <= 5_000; seq++) ledger.done(seq, seq + 1);
    for (let seq = 1; seq <= 5_000; seq++) assert.equal(ledger.finishedAt(seq), seq + 1, `round ${round}: seq ${seq} kept`);
    ledger.reset();
    assert.equal(ledger.finishedAt(1), undefined);
  }
});

test("the finished ledger answers for sequences finished out of order, below and above the highest one", () => {
  const ledger = new DestinationLedger();
  ledger.done(100, 7);
  ledger.done(40, 0); // a redelivery finished after a later message: not stored (0), still remembered
  ledger.done(250, 9);
  assert.equal(ledger.finishedAt(40), 0);
  assert.equal(ledger.finishedAt(100), 7);
  assert.equal(ledger.finishedAt(250), 9);
  assert.equal(ledger.finishedAt(41), undefined);
  assert.equal(ledger.finishedAt(251), undefined);
  ledger.reset();
  ledger.done(3, 30);
  assert.equal(ledger.finishedAt(40), undefined, "forgotten by the reset, though below the highest before it");
  assert.equal(ledger.finishedAt(3), 30);
});

test("finished sequences: in order with gaps, across the ring's growth and wrap, the newest `kept` are found, older ones not", () => {
  const kept = 8;
  const f = new FinishedSeqs(kept, 2);
  const appended: number[] = [];
  let seq = 0;
  for (let i = 0; i < 50; i++) {
    seq += 1 + ((i * 7) % 5); // gaps (a filtered consumer)
    f.set(seq, seq * 3);
    appended.push(seq);
    const newest = appended.slice(-kept);
    for (const s of appended) assert.equal(f.get(s), newest.includes(s) ? s * 3 : undefined, `after ${seq}: seq ${s}`);
    assert.equal(f.get(seq + 1), undefined);
    if (seq > 1 && !appended.includes(seq - 1)) assert.equal(f.get(seq - 1), undefined, "a gap is not found");
  }
});

test("finished sequences: finished below the newest (out of order) are kept aside, updated in place, the oldest of them forgotten first", () => {
  const f = new FinishedSeqs(4, 2);
  for (const s of [10, 20, 30]) f.set(s, s);
  f.set(20, 0); // in the ring: updated
  assert.equal(f.get(20), 0);
  for (const s of [1, 2, 3, 4]) f.set(s, s + 100); // late
  f.set(2, 7); // late, updated: no new place
  assert.deepEqual([1, 2, 3, 4].map((s) => f.get(s)), [101, 7, 103, 104]);
  f.set(5, 105); // a fifth late one: the oldest late one (1) goes
  assert.deepEqual([1, 2, 5].map((s) => f.get(s)), [undefined, 7, 105]);
  assert.deepEqual([10, 20, 30].map((s) => f.get(s)), [10, 0, 30], "the in-order ones are not touched");
  f.clear();
  assert.deepEqual([2, 30].map((s) => f.get(s)), [undefined, undefined]);
  f.set(1, 9);
  assert.equal(f.get(1), 9);
});
