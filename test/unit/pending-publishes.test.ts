import { test } from "node:test";
import assert from "node:assert/strict";
import { PendingPublishes } from "../../src/nats/pending-publishes.js";

test("pending publishes: taken once by id, in any order; unknown, answered and expired ids give nothing", () => {
  const p = new PendingPublishes<string>(4);
  const ids = ["a", "b", "c"].map((v, i) => p.add(v, 100 + i));
  assert.deepEqual(ids, [0, 1, 2]);
  assert.equal(p.take(1), "b");
  assert.equal(p.take(1), undefined, "a second answer for the same id");
  assert.equal(p.take(7), undefined, "an id never handed out");
  assert.equal(p.take(Number.NaN), undefined, "a reply subject whose last token is not a number");
  assert.equal(p.size, 2);
  assert.equal(p.take(0), "a");
  assert.equal(p.take(2), "c");
  assert.equal(p.size, 0);
});

test("pending publishes: an old unanswered one while thousands pass keeps its slot (the ring grows) and expires first", () => {
  const p = new PendingPublishes<number>(4);
  const stuck = p.add(-1, 10);
  for (let i = 0; i < 5_000; i++) {
    const id = p.add(i, 20 + i);
    if (i % 3 !== 0) assert.equal(p.take(id), i);
  }
  assert.equal(p.size, 1 + Math.ceil(5_000 / 3));
  assert.deepEqual(p.expire(9), [], "nothing is due before the oldest deadline");
  const due = p.expire(25);
  assert.deepEqual(due, [-1, 0, 3], "the stuck one, then the unanswered ones due by 25, in publish order");
  assert.equal(p.take(stuck), undefined, "expired: a late PubAck finds nothing");
  const rest = p.drain();
  assert.equal(rest.length, Math.ceil(5_000 / 3) - 2);
  assert.deepEqual(rest.slice(0, 2), [6, 9]);
  assert.equal(p.size, 0);
  assert.equal(p.add(42, 1) > 5_000, true, "ids keep counting after a drain: a late answer to an old id finds nothing");
});
