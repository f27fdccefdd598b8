import { test } from "node:test";
import assert from "node:assert/strict";
import { newTotals, parseAuditState } from "../../src/audit/audit-state.js";
import type { Copy } from "../../src/audit/copies.js";
import { CopyOrder, RangeRecord } from "../../src/audit/range-record.js";

const copy = (sourceSeq: number, destSeq: number, extra: Partial<Copy> = {}): Copy => ({ sourceSeq, destSeq, id: `m-${sourceSeq}`, late: false, ...extra });

test("a range record marks each source seq once: gaps are the seqs without a copy, extras the second copies, later ones are kept for the next pass", () => {
  const r = new RangeRecord(100, 110);
  for (const s of [101, 102, 104, 105, 106, 107, 108, 110]) assert.equal(r.note(copy(s, s)), true);
  assert.equal(r.note(copy(104, 200)), false, "a second copy");
  assert.equal(r.note(copy(99, 201)), false, "below the range");
  assert.equal(r.note(copy(111, 202)), true, "above the range: the next pass's");
  assert.deepEqual(r.gaps().seqs, [103, 109]);
  assert.deepEqual(r.gaps(1), { seqs: [103], more: 1 });
  assert.equal(r.extra, 1);
  assert.deepEqual(r.extraExamples, [{ sourceSeq: 104, destSeq: 200, id: "m-104" }]);
  assert.equal(r.earlier, 1);
  assert.deepEqual(r.later.map((c) => c.sourceSeq), [111]);
  // Every bit of a large range, byte boundaries included.
  const big = new RangeRecord(0, 1_000);
  for (let s = 1; s <= 1_000; s++) if (s % 97 !== 0) big.note(copy(s, s));
  assert.deepEqual(big.gaps().seqs, [97, 194, 291, 388, 485, 582, 679, 776, 873, 970]);
});

test("copy order counts a copy stored after a later one, leaves repaired copies alone, and catches versions going backwards", () => {
  const o = new CopyOrder(5);
  o.note(copy(6, 1, { entity: "e1", version: 1 }));
  o.note(copy(8, 2, { entity: "e1", version: 3 }));
  o.note(copy(7, 3, { entity: "e1", version: 2 }));
  o.note(copy(3, 4, { late: true }));
  const found = o.take();
  assert.equal(found.reordered, 1);
  assert.deepEqual(found.reorderExamples, [{ sourceSeq: 7, destSeq: 3, afterSourceSeq: 8 }]);
  assert.equal(found.backwards, 1);
  assert.deepEqual(found.backwardExamples, [{ entity: "e1", before: 3, after: 2, destSeq: 3 }]);
  assert.equal(o.take().reordered, 0, "taken: counted once");
  assert.equal(o.highest, 8);
});

test("the stored audit state parses back, and anything else is no state (never guessed from)", () => {
  const state = { sourceCreatedMs: 1, destCreatedMs: 2, originSeq: 0, judgedSeq: 40, judgedAt: "T", judgedDestSeq: 44, readFrom: 41, orderedTo: 44, highest: 40, nextSweepMs: 9, totals: { ...newTotals(), missing: 2 } };
  assert.deepEqual(parseAuditState(JSON.stringify(state)), state);
  assert.equal(parseAuditState("not json"), undefined);
  assert.equal(parseAuditState(JSON.stringify({ ...state, judgedSeq: -1 })), undefined);
  assert.equal(parseAuditState(JSON.stringify({ ...state, judgedAt: 5 })), undefined);
});
