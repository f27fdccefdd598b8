import { test } from "node:test";
import assert from "node:assert/strict";
import { assertDelivery, computeReport, storedCopies } from "../faults/checker.js";
import type { FaultReport, SourceMessage, StoredCopy } from "../faults/checker.js";
import { ownershipOverlaps } from "../faults/ownership.js";
import { duplicateKeys } from "../helpers/log-lines.js";

/** m-0 .. m-(n-1) on S.<i % 2>, seq i + 1. */
function source(n: number): SourceMessage[] {
  return Array.from({ length: n }, (_, i) => ({ id: `m-${i}`, subject: `S.${i % 2}`, seq: i + 1 }));
}

/** The destination holding these source indexes, in this order, on their source subjects. */
function storedAs(src: readonly SourceMessage[], order: readonly number[]): StoredCopy[] {
  return order.map((i) => ({ id: src[i]!.id, subject: src[i]!.subject }));
}

const counts = (r: FaultReport) => ({
  lost: r.lost,
  duplicated: r.duplicated,
  reordered: r.reordered,
  reorderedBySubject: r.reorderedBySubject,
  versionsRegressed: r.versionsRegressed,
  extra: r.extra,
});
const ZERO = { lost: 0, duplicated: 0, reordered: 0, reorderedBySubject: 0, versionsRegressed: 0, extra: 0 };

test("clean: every message once, in order", () => {
  const src = source(6);
  const r = computeReport("clean", storedAs(src, [0, 1, 2, 3, 4, 5]), src);
  assert.deepEqual(counts(r), ZERO);
  assert.equal(r.messages, 6);
  assert.equal(storedCopies(r), 6);
  assertDelivery(r);
});

test("the source may be given in any order: its seq is the order", () => {
  const src = source(4);
  const r = computeReport("shuffled source", storedAs(src, [0, 1, 2, 3]), [
    src[2]!,
    src[0]!,
    src[3]!,
    src[1]!,
  ]);
  assert.deepEqual(counts(r), ZERO);
});

test("lost: missing ids are counted and sampled in source order", () => {
  const src = source(6);
  const r = computeReport("lost", storedAs(src, [0, 2, 3, 5]), src);
  assert.deepEqual(counts(r), { ...ZERO, lost: 2 });
  assert.deepEqual(r.samples.lost, ["m-1", "m-4"]);
  assert.throws(() => assertDelivery(r), /lost: 2 lost/);
});

test("duplicated: every copy beyond the first counts; only first copies are checked for order", () => {
  const src = source(4);
  // m-1 three times, and its later copies (after m-3) are not a reordering.
  const r = computeReport("dup", storedAs(src, [0, 1, 1, 2, 3, 1]), src);
  assert.deepEqual(counts(r), { ...ZERO, duplicated: 2 });
  assert.deepEqual(r.samples.duplicated, ["m-1"]);
  assert.equal(storedCopies(r), 6);
  assert.throws(() => assertDelivery(r), /2 duplicated/);
});

test("reordered overall but in order within each subject", () => {
  // S.0 gets m-0 m-2 m-4, S.1 gets m-1 m-3 m-5: storing all of S.1 first keeps each subject in order.
  const src = source(6);
  const r = computeReport("interleaved", storedAs(src, [1, 3, 5, 0, 2, 4]), src);
  assert.deepEqual(counts(r), { ...ZERO, reordered: 3 });
  assert.deepEqual(r.samples.reordered, ["m-0", "m-2", "m-4"]);
  assert.throws(() => assertDelivery(r), /3 reordered \(allowed 0\)/);
  assertDelivery(r, { reorderedAllowed: 3 });
});

test("reordered within a subject counts in both", () => {
  const src = source(6);
  // m-4 before m-2, both on S.0.
  const r = computeReport("swap", storedAs(src, [0, 1, 4, 3, 2, 5]), src);
  assert.deepEqual(counts(r), { ...ZERO, reordered: 2, reorderedBySubject: 1 });
  assert.deepEqual(r.samples.reordered, ["m-3", "m-2"]);
  assertDelivery(r, { reorderedAllowed: 2 });
  assert.throws(() => assertDelivery(r, { reorderedAllowed: 0 }), /1 reordered within a subject/);
});

test("one message stored late counts once; one stored early makes what it overtook count", () => {
  const src = source(5);
  assert.equal(computeReport("late", storedAs(src, [1, 2, 3, 4, 0]), src).reordered, 1);
  assert.equal(computeReport("early", storedAs(src, [4, 0, 1, 2, 3]), src).reordered, 4);
});

test("versions: a lower version stored after a higher one of the same entity regresses, other entities do not interfere", () => {
  const src: SourceMessage[] = [
    { id: "a1", subject: "S.a", seq: 1, entity: "a", version: 1 },
    { id: "a2", subject: "S.a", seq: 2, entity: "a", version: 2 },
    { id: "b9", subject: "S.b", seq: 3, entity: "b", version: 9 },
    { id: "a3", subject: "S.a", seq: 4, entity: "a", version: 3 },
  ];
  const inOrder = computeReport("versions ok", storedAs(src, [0, 1, 2, 3]), src);
  assert.deepEqual(counts(inOrder), ZERO);
  const regressed = computeReport("versions regressed", storedAs(src, [1, 2, 0, 3]), src);
  assert.equal(regressed.versionsRegressed, 1);
  assert.throws(() => assertDelivery(regressed, { reorderedAllowed: 10 }), /1 versions regressed/);
  // A stale duplicate stored after the newer version moves the entity back too.
  const staleCopy = computeReport("stale copy", storedAs(src, [0, 1, 2, 3, 1]), src);
  assert.deepEqual(counts(staleCopy), { ...ZERO, duplicated: 1, versionsRegressed: 1 });
});

test("extra: unknown ids, messages without an id, and expected ids on the wrong subject", () => {
  const src = source(3);
  const stored: StoredCopy[] = [
    { id: "m-0", subject: "S.0" },
    { id: "stranger", subject: "S.0" },
    { id: undefined, subject: "S.1" },
    { id: "m-1", subject: "S.elsewhere" },
    { id: "m-2", subject: "S.0" },
  ];
  const r = computeReport("extra", stored, src);
  assert.deepEqual(counts(r), { ...ZERO, extra: 3, lost: 1 });
  assert.deepEqual(r.samples.lost, ["m-1"]);
  assert.equal(storedCopies(r), stored.length);
  assert.throws(() => assertDelivery(r), /3 extra/);
});

test("subjectOf maps source subjects to the destination's", () => {
  const src = source(4);
  const stored = src.map((s) => ({ id: s.id, subject: `b.${s.subject}` }));
  assert.equal(computeReport("unmapped", stored, src).extra, 4);
  assert.deepEqual(counts(computeReport("mapped", stored, src, (s) => `b.${s.subject}`)), ZERO);
});

test("assertDelivery: liveness failures or a slow probe fail, and the message carries the whole report", () => {
  const src = source(2);
  const clean = computeReport("live", storedAs(src, [0, 1]), src);
  assertDelivery({ ...clean, liveness: { probes: 10, failures: 0, worstMs: 999 } });
  assert.throws(
    () =>
      assertDelivery({
        ...clean,
        liveness: { probes: 10, failures: 1, worstMs: 12, firstFailure: "probe 3: HTTP 500" },
      }),
    (err: Error) =>
      /1 failed \/healthz probes \(probe 3: HTTP 500\)/.test(err.message) &&
      err.message.includes('"probes": 10'),
  );
  assert.throws(
    () => assertDelivery({ ...clean, liveness: { probes: 10, failures: 0, worstMs: 1_000 } }),
    /slowest \/healthz 1000ms \(limit 1000ms\)/,
  );
  const shared = { ...clean, liveness: { probes: 10, failures: 0, worstMs: 1_500 } };
  assertDelivery(shared, { livenessLimitMs: 2_000 });
  assert.throws(() => assertDelivery(shared), /slowest \/healthz 1500ms \(limit 1000ms\)/);
  assert.throws(() => assertDelivery({ ...shared, liveness: { ...shared.liveness, worstMs: 2_000 } }, { livenessLimitMs: 2_000 }), /limit 2000ms/);
});

test("assertDelivery: relayedMustEqualStored compares the counter with the stored copies when it was read", () => {
  const src = source(3);
  const dup = computeReport("metric", storedAs(src, [0, 1, 2]), src);
  assertDelivery({ ...dup, relayedMetric: 3 }, { relayedMustEqualStored: true });
  assertDelivery({ ...dup, relayedMetric: 5 }); // not asked for
  assertDelivery(dup, { relayedMustEqualStored: true }); // not read: nothing to compare
  assert.throws(
    () => assertDelivery({ ...dup, relayedMetric: 4 }, { relayedMustEqualStored: true }),
    /relayed metric 4 != 3 stored copies/,
  );
});

test("ownershipOverlaps: intervals of two relays on one lease key that intersect are reported; back-to-back ones are not", () => {
  const line = (time: number, key: string, from: string, to: string) =>
    JSON.stringify({ level: 30, time, component: "lease", key, from, to, msg: `lease ${to}` });
  const relay0 = [line(100, "k1", "contending", "owner"), line(200, "k1", "owner", "idle"), line(300, "k2", "contending", "owner")];
  const relay1 = [line(200, "k1", "contending", "owner"), line(350, "k2", "contending", "owner"), line(400, "k2", "owner", "lost")];
  const overlaps = ownershipOverlaps([relay0, relay1]);
  assert.deepEqual(
    overlaps.map((o) => [o.key, o.first.relay, o.second.relay]),
    [["k2", 0, 1]],
    "k1 handed over at 200 (no overlap); k2 still held by relay 0 when relay 1 took it",
  );
});

test("duplicateKeys finds a key written twice in one object, at any depth, and nothing else", () => {
  assert.deepEqual(duplicateKeys('{"level":30,"region":"b","region":"a","msg":"x"}'), ["region"]);
  assert.deepEqual(duplicateKeys('{"a":{"b":1,"b":2},"c":[{"d":1,"d":2},{"d":3}],"e":"\\"e\\":1"}'), ["a.b", "c.d"]);
  assert.deepEqual(duplicateKeys('{"component":"link","link":"x","err":{"component":"guard"}}'), [], "the same key in different objects is fine");
  assert.deepEqual(duplicateKeys('{"msg":"a, \\"msg\\": b","list":["msg","msg"]}'), []);
});

test("a message the source itself stored twice (a publisher's retry): expected once, in its first copy's place; two messages under one id are refused", () => {
  const src = source(4);
  const retried = [...src.slice(0, 3), { ...src[1]!, seq: 4 }, { ...src[3]!, seq: 5 }];
  const r = computeReport("source retry", storedAs(src, [0, 1, 2, 3]), retried);
  assert.deepEqual(counts(r), ZERO);
  assert.equal(r.messages, 4);
  assert.equal(r.sourceDuplicates, 1);
  // The copy stored in the retry's place (after m-2) is late for the first copy's.
  assert.equal(computeReport("late", storedAs(src, [0, 2, 1, 3]), retried).reordered, 1);
  assert.equal(computeReport("lost", storedAs(src, [0, 2, 3]), retried).lost, 1);
  assert.throws(() => computeReport("reused", [], [...src, { ...src[1]!, subject: "S.other", seq: 9 }]), /m-1 names two different messages in the source \(seq 2 and 9\)/);
});
