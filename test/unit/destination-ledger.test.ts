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
