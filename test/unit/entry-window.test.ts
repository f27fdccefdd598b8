import { test } from "node:test";
import assert from "node:assert/strict";
import type { Entry } from "../../src/link/entry.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { EntryWindow } from "../../src/link/stages/window.js";

/** The fields the window reads of an entry. */
function entry(seq: number, dseq: number): Entry {
  return { seq, dseq, reply: `ack.${dseq}`, state: "claim", heldBytes: 10 } as unknown as Entry;
}

function redelivery(seq: number, dseq: number): Delivery {
  return { streamSequence: seq, consumerSequence: dseq, reply: `ack.${dseq}` } as unknown as Delivery;
}

/** What the cumulative ack must stay below, by brute force. */
function scan(w: EntryWindow): { seq: number; dseq: number } | undefined {
  if (w.size === 0) return undefined;
  const held = [...w.bySeq.values()];
  return { seq: Math.min(...held.map((e) => e.seq)), dseq: Math.min(...held.map((e) => e.dseq)) };
}

test("lowest held: the oldest live entry while deliveries arrive in order, whatever finished before it", () => {
  const w = new EntryWindow();
  const es = [1, 2, 3, 4, 5].map((s) => entry(s, s));
  for (const e of es) w.add(e);
  assert.deepEqual(w.lowestHeld(), { seq: 1, dseq: 1 });
  w.remove(es[1]!); // finished out of order: 1 still holds the ack back
  assert.deepEqual(w.lowestHeld(), { seq: 1, dseq: 1 });
  w.remove(es[0]!);
  assert.deepEqual(w.lowestHeld(), { seq: 3, dseq: 3 }, "past finished entries not trimmed yet");
  w.trim();
  assert.deepEqual(w.lowestHeld(), { seq: 3, dseq: 3 });
  for (const e of es.slice(2)) w.remove(e);
  assert.equal(w.lowestHeld(), undefined);
});

test("lowest held: a redelivery below what arrived, a raised delivery sequence and a consumer that numbers again are found", () => {
  const w = new EntryWindow();
  for (const s of [10, 11, 12]) w.add(entry(s, s));
  w.add(entry(5, 13)); // an old message delivered again after newer ones
  assert.deepEqual(w.lowestHeld(), { seq: 5, dseq: 10 });
  // Seq 10 redelivered while held: its delivery sequence rises; 11 now holds the lowest.
  assert.equal(w.redelivered(redelivery(10, 14)), true);
  assert.deepEqual(w.lowestHeld(), { seq: 5, dseq: 11 });
  // A new consumer leader numbers deliveries from lower again.
  w.add(entry(13, 2));
  assert.deepEqual(w.lowestHeld(), { seq: 5, dseq: 2 });
});

test("lowest held: the same as a scan of every held entry through random arrivals, redeliveries and finishes", () => {
  let rnd = 42;
  const next = (n: number) => {
    rnd = (rnd * 1_103_515_245 + 12_345) % 2 ** 31;
    return rnd % n;
  };
  for (let round = 0; round < 20; round++) {
    const w = new EntryWindow();
    const held: Entry[] = [];
    let seq = 0;
    let dseq = 0;
    for (let step = 0; step < 2_000; step++) {
      const r = next(100);
      if (r < 45) {
        // Mostly in order; sometimes an old sequence again, sometimes a consumer sequence going back.
        const s = next(20) === 0 && seq > 10 ? seq - 1 - next(10) : ++seq;
        const d = next(50) === 0 ? Math.max(1, dseq - next(20)) : ++dseq;
        if (w.bySeq.has(s)) continue;
        const e = entry(s, d);
        w.add(e);
        held.push(e);
      } else if (r < 50 && held.length > 0) {
        const e = held[next(held.length)]!;
        w.redelivered(redelivery(e.seq, ++dseq));
      } else if (held.length > 0) {
        // Finishes mostly in order, sometimes one from the middle.
        const i = next(4) === 0 ? next(held.length) : 0;
        const [e] = held.splice(i, 1);
        w.remove(e!);
        if (next(3) === 0) w.trim();
      }
      assert.deepEqual(w.lowestHeld(), scan(w), `round ${round}, step ${step}`);
    }
    w.clear();
    assert.equal(w.lowestHeld(), undefined);
  }
});

test("redelivered: a held sequence is found (its ack subject updated) below the highest held; above it, none is", () => {
  const w = new EntryWindow();
  const es = [3, 7, 9].map((s) => entry(s, s));
  for (const e of es) w.add(e);
  assert.equal(w.redelivered(redelivery(7, 20)), true);
  assert.equal(es[1]?.reply, "ack.20");
  assert.equal(w.redelivered(redelivery(8, 21)), false, "not held");
  assert.equal(w.redelivered(redelivery(10, 22)), false, "above every held sequence");
  w.remove(es[2]!);
  assert.equal(w.redelivered(redelivery(9, 23)), false, "finished: no longer held");
  assert.equal(w.redelivered(redelivery(3, 24)), true);
  w.clear();
  assert.equal(w.redelivered(redelivery(3, 25)), false, "forgotten with the window");
});
