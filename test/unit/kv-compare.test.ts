import { test } from "node:test";
import assert from "node:assert/strict";
import { compareKvBuckets, compareKvEntry, kvEntryOf, kvOpOf } from "../../src/verify/kv-compare.js";
import type { KvEntry } from "../../src/verify/kv-compare.js";
import { formatKvRepair, kvRepairExitCode, planKvRepair } from "../../src/verify/kv-repair.js";
import type { KvRepairResult } from "../../src/verify/kv-repair.js";
import { formatKvReport, kvDifferenceCounts } from "../../src/verify/kv-report.js";
import type { KvVerifyReport } from "../../src/verify/kv-report.js";

const headers = (h: Record<string, string>) => ({ get: (name: string) => h[name] ?? "" });
const bytes = (s: string) => new TextEncoder().encode(s);

/** An entry as a bucket read makes it: `version` is a Relay-KV-Version header, else the store time in `region`. */
function entry(seq: number, value: string, opts: { version?: string; op?: "DEL" | "PURGE"; storedNs?: bigint; region?: string } = {}): KvEntry {
  const h: Record<string, string> = {};
  if (opts.version !== undefined) h["Relay-KV-Version"] = opts.version;
  if (opts.op) h["KV-Operation"] = opts.op;
  return kvEntryOf(headers(h), bytes(value), seq, opts.storedNs ?? 1n, opts.region ?? "a");
}

test("a KV entry: its operation, version (carried, else its store time in its bucket's region), size and digest", () => {
  assert.equal(kvOpOf(headers({})), "PUT");
  assert.equal(kvOpOf(headers({ "KV-Operation": "DEL" })), "DEL");
  assert.equal(kvOpOf(headers({ "KV-Operation": "PURGE" })), "PURGE");
  assert.equal(kvOpOf(headers({ "Nats-Marker-Reason": "MaxAge" })), "PURGE", "a server's delete marker is a purge");
  assert.equal(kvOpOf(undefined), "PUT");

  const local = entry(7, "hello", { storedNs: 1733571234567890123n, region: "east" });
  assert.deepEqual(local.version, { ns: 1733571234567890123n, region: "east" });
  assert.equal(local.size, 5);
  assert.equal(local.digest, "2cf24dba5fb0a30e26e83b2ac5b9e29e", "sha256, first 128 bits");
  assert.deepEqual(entry(8, "x", { version: "42 west" }).version, { ns: 42n, region: "west" });

  const bad = entry(9, "x", { version: "soon" });
  assert.equal(bad.version, undefined);
  assert.match(bad.versionProblem ?? "", /Relay-KV-Version "soon"/);
});

test("two entries for a key: agree, missing, older (by version, then region), conflict, unreadable", () => {
  const v = (version: string, value = "v", op?: "DEL" | "PURGE") => entry(1, value, { version, ...(op ? { op } : {}) });
  assert.equal(compareKvEntry("k", v("5 a"), v("5 a")), undefined, "the same write");
  assert.equal(compareKvEntry("k", v("5 a", "", "DEL"), v("5 a", "", "DEL")), undefined, "the same tombstone");
  assert.equal(compareKvEntry("k", undefined, undefined), undefined);

  const pick = (d: ReturnType<typeof compareKvEntry>) => d && { kind: d.kind, winner: d.winner, tvv: d.tombstoneVsValue };
  assert.deepEqual(pick(compareKvEntry("k", v("5 a"), undefined)), { kind: "missing", winner: "from", tvv: false });
  assert.deepEqual(pick(compareKvEntry("k", undefined, v("5 a", "", "PURGE"))), { kind: "missing", winner: "to", tvv: false });
  assert.deepEqual(pick(compareKvEntry("k", v("6 a"), v("5 b"))), { kind: "older", winner: "from", tvv: false });
  assert.deepEqual(pick(compareKvEntry("k", v("5 a"), v("5 b"))), { kind: "older", winner: "to", tvv: false }, "a tie goes to the region name");
  assert.deepEqual(pick(compareKvEntry("k", v("5 a"), v("9 a", "", "DEL"))), { kind: "older", winner: "to", tvv: true });
  assert.deepEqual(pick(compareKvEntry("k", v("5 a", "x"), v("5 a", "y"))), { kind: "conflict", winner: undefined, tvv: false });
  assert.deepEqual(pick(compareKvEntry("k", v("5 a", ""), v("5 a", "", "DEL"))), { kind: "conflict", winner: undefined, tvv: true }, "an empty value is not a tombstone");
  assert.deepEqual(pick(compareKvEntry("k", v("5 a", "", "DEL"), v("5 a", "", "PURGE"))), { kind: "conflict", winner: undefined, tvv: false });
  assert.deepEqual(pick(compareKvEntry("k", v("bad"), v("5 a"))), { kind: "unreadable", winner: undefined, tvv: false });

  const d = compareKvEntry("k", entry(3, "secret", { version: "5 a" }), undefined);
  assert.deepEqual(d?.from, { seq: 3, op: "PUT", version: "5 a", size: 6, digest: "2bb80d537b1da3e3" });
  assert.ok(!JSON.stringify(d).includes("secret"), "never the value");
});

test("two buckets: every key of either side, differences sorted by key, counted by kind and winner", () => {
  const from = new Map<string, KvEntry>([
    ["b", entry(1, "v", { version: "5 a" })],
    ["a", entry(2, "v", { version: "6 a" })],
    ["same", entry(3, "v", { version: "1 a" })],
    ["gone", entry(4, "", { version: "7 a", op: "DEL" })],
  ]);
  const to = new Map<string, KvEntry>([
    ["b", entry(1, "v", { version: "9 b" })],
    ["same", entry(2, "v", { version: "1 a" })],
    ["c", entry(3, "v", { version: "2 b" })],
    ["gone", entry(4, "v", { version: "3 b" })],
  ]);
  const c = compareKvBuckets(from, to);
  assert.equal(c.keys, 5);
  assert.equal(c.same, 1);
  assert.deepEqual(c.differences.map((d) => `${d.key} ${d.kind} ${d.winner}`), ["a missing from", "b older to", "c missing to", "gone older from"]);
  assert.deepEqual(kvDifferenceCounts(c.differences), {
    count: 4,
    byKind: { missing: 2, older: 2, conflict: 0, unreadable: 0 },
    newerOn: { from: 2, to: 2 },
    tombstoneVsValue: 1,
  });
  assert.deepEqual(compareKvBuckets(new Map(), new Map()), { keys: 0, same: 0, differences: [] });
});

test("the KV report and repair as text: keys, versions, sides; the plan; exit codes", () => {
  const c = compareKvBuckets(
    new Map([["k1", entry(4, "v", { version: "9 a" })], ["k2", entry(5, "x", { version: "3 a" })]]),
    new Map([["k1", entry(2, "", { version: "5 b", op: "PURGE" })], ["k2", entry(6, "y", { version: "3 a" })]]),
  );
  const side = { stream: "KV_x", values: 1, tombstones: 0, streamLastSeq: 9 };
  const report: KvVerifyReport = {
    link: "kv",
    from: { ...side, region: "a", bucket: "x" },
    to: { ...side, region: "b", bucket: "y" },
    keys: c.keys,
    same: c.same,
    differences: { ...kvDifferenceCounts(c.differences), examples: c.differences },
    agree: false,
    elapsedMs: 1200,
  };
  const text = formatKvReport(report);
  assert.match(text, /^verify link kv \(KV\): a\/x <-> b\/y$/m);
  assert.match(text, /^ {2}k1: older \(newer on a\/x, tombstone vs value\)$/m);
  assert.match(text, /^ {4}b\/y: seq 2, tombstone PURGE, version 5 b$/m);
  assert.match(text, /^ {2}k2: conflict \(no winner\)$/m);
  assert.match(text, /^result: DIFFER \(1\.2 s\)$/m);

  const plan = planKvRepair(c.differences);
  assert.deepEqual(plan, [
    { key: "k1", kind: "older", winner: "from", target: "to", version: "9 a", op: "PUT" },
    { key: "k2", kind: "conflict" },
  ]);
  const result: KvRepairResult = {
    link: "kv",
    from: { region: "a", bucket: "x" },
    to: { region: "b", bucket: "y" },
    keys: 2,
    differences: 2,
    dryRun: true,
    items: plan,
    elapsedMs: 10,
  };
  assert.equal(kvRepairExitCode(result), 0);
  assert.match(formatKvRepair(result), /^ {2}k1: older: put the value of version 9 a from a\/x into b\/y$/m);
  assert.match(formatKvRepair(result), /^result: dry run, nothing written/m);

  const done: KvRepairResult = {
    ...result,
    dryRun: false,
    items: [
      { ...plan[0]!, outcome: "repaired", seq: 7 },
      { ...plan[1]!, outcome: "undecided", detail: "no winner by version" },
    ],
  };
  assert.equal(kvRepairExitCode(done), 1, "a key with no winner is left: exit 1");
  assert.match(formatKvRepair(done), /k1: .*: repaired \(seq 7\)/);
  assert.match(formatKvRepair(done), /^result: 1 repaired, 0 changed meanwhile, 1 undecided, 0 failed/m);
  assert.equal(kvRepairExitCode({ ...done, items: [done.items[0]!] }), 0);
});
