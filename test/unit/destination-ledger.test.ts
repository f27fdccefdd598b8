import assert from "node:assert/strict";
import { test } from "node:test";
import { DestinationLedger } from "../../src/link/destination-ledger.js";

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
