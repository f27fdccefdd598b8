import { test } from "node:test";
import assert from "node:assert/strict";
import { CumulativeAcks } from "../../src/link/cumulative-acks.js";

test("CumulativeAcks: one ack covers the finished run below the lowest held message, never past it", () => {
  const acks = new CumulativeAcks();
  assert.equal(acks.flush(undefined), undefined, "nothing finished: nothing to ack");
  for (const seq of [1, 2, 3, 5, 6]) acks.done(seq, `r${seq}`);
  // 4 is still held: 5 and 6 must wait, or the ack of 6 would cover 4.
  assert.equal(acks.flush(4), "r3");
  assert.equal(acks.waiting, 2);
  assert.equal(acks.flush(4), undefined, "still held");
  acks.done(4, "r4");
  assert.equal(acks.flush(undefined), "r6", "held nothing: the highest finished one");
  assert.equal(acks.waiting, 0);
  // A redelivery of a covered message (the source lost the ack, e.g. restarted from disk) is acked again.
  acks.done(5, "again");
  assert.equal(acks.flush(undefined), "again");
});

test("CumulativeAcks: a redelivery finished out of order is kept sorted, its latest ack subject wins; reset forgets", () => {
  const acks = new CumulativeAcks();
  acks.done(10, "r10");
  acks.done(12, "r12");
  acks.done(11, "r11");
  acks.done(11, "r11-latest");
  assert.equal(acks.flush(12), "r11-latest");
  assert.equal(acks.flush(undefined), "r12");
  acks.done(20, "r20");
  acks.reset();
  assert.equal(acks.flush(undefined), undefined, "the cursor moved: nothing of the old one is acked");
  acks.done(3, "r3");
  assert.equal(acks.flush(undefined), "r3", "after a reset, sequences start over");
  acks.done(1, "");
  assert.equal(acks.waiting, 0, "a delivery without an ack subject cannot be acked");
});

test("CumulativeAcks: a long run acked in steps (the consumed part dropped on the way) and a redelivery below the pending ones", () => {
  const acks = new CumulativeAcks();
  for (let seq = 1; seq <= 5_000; seq++) acks.done(seq, `r${seq}`);
  for (let held = 700; held <= 4_900; held += 700) {
    assert.equal(acks.flush(held), `r${held - 1}`, `held ${held}`);
    assert.equal(acks.waiting, 5_000 - held + 1);
  }
  // 4,900..5,000 wait; a redelivery of 4,950 (a newer ack subject) and of 10 (covered long ago) finish now.
  acks.done(4_950, "r4950-latest");
  acks.done(10, "r10-again");
  assert.equal(acks.waiting, 102);
  assert.equal(acks.flush(4_951), "r4950-latest", "everything below 4,951 is finished: its latest subject covers it");
  assert.equal(acks.flush(undefined), "r5000");
  assert.equal(acks.waiting, 0);
});

test("CumulativeAcks: a redelivery's ack subject (high delivery sequence, old message) is not sent while messages delivered before it are held", () => {
  // After a source failover the new consumer leader redelivers message 5 (finished long ago) as
  // delivery 120; messages 10-12 were delivered before it (deliveries 101-103) and are still held.
  // AckAll takes an ack only above the highest delivery sequence it took: sending delivery 120's
  // subject now would make the server ignore the acks of 10-12 until their ack wait.
  const acks = new CumulativeAcks();
  acks.done(5, "r5-redelivered", 120);
  assert.equal(acks.flush(10, 101), undefined, "held back: messages delivered before it are still held");
  acks.done(10, "r10", 101);
  acks.done(11, "r11", 102);
  assert.equal(acks.flush(12, 103), "r11", "the ack of 11 covers 5 too, below the held delivery 103");
  acks.done(12, "r12", 103);
  assert.equal(acks.flush(undefined, undefined), "r12");
  // Nothing held: a redelivery's own subject is the ack (nothing delivered before it is waiting).
  acks.done(3, "r3-redelivered", 130);
  assert.equal(acks.flush(undefined, undefined), "r3-redelivered");
  // Passed over, not lost: the highest subject below a redelivery's is sent, the next flush covers it.
  acks.done(20, "r20", 140);
  acks.done(21, "r21-redelivered", 160);
  assert.equal(acks.flush(23, 150), "r20", "21's subject (delivery 160) would stall delivery 150");
  acks.done(22, "r22", 151);
  assert.equal(acks.flush(undefined, undefined), "r22", "covers 21 too");
  assert.equal(acks.waiting, 0);
});
