/**
 * What `verify --kv` found on one KV link; `--json` prints this object as it is. Keys, sequences,
 * versions, operations, sizes and digests only: never a value.
 */
import type { KvDifference, KvDifferenceKind, KvSideName } from "./kv-compare.js";
import { KV_DIFFERENCE_KINDS } from "./kv-compare.js";

export interface KvBucketSide {
  readonly region: string;
  readonly bucket: string;
  readonly stream: string;
  /** Keys whose latest entry is a value. */
  readonly values: number;
  /** Keys whose latest entry is a tombstone (`DEL` or `PURGE`). */
  readonly tombstones: number;
  /** The stream's last sequence when the read started. */
  readonly streamLastSeq: number;
}

export interface KvVerifyReport {
  readonly link: string;
  readonly from: KvBucketSide;
  readonly to: KvBucketSide;
  /** Keys held by either side. */
  readonly keys: number;
  /** Keys both sides hold alike: the same version and value, or the same tombstone. */
  readonly same: number;
  readonly differences: {
    readonly count: number;
    readonly byKind: Readonly<Record<KvDifferenceKind, number>>;
    /** Of `missing` and `older`: on which side the winner (the newer write, or the only one) is. */
    readonly newerOn: Readonly<Record<KvSideName, number>>;
    /** Differences where one side holds a tombstone and the other a value. */
    readonly tombstoneVsValue: number;
    /** The first differences, keys sorted (at most KvVerifyOptions.examples, default 20). */
    readonly examples: readonly KvDifference[];
  };
  /** True when the buckets hold the same latest entry for every key (exit code 0). */
  readonly agree: boolean;
  readonly elapsedMs: number;
}

export function kvDifferenceCounts(differences: readonly KvDifference[]): Omit<KvVerifyReport["differences"], "examples"> {
  const byKind = Object.fromEntries(KV_DIFFERENCE_KINDS.map((k) => [k, 0])) as Record<KvDifferenceKind, number>;
  const newerOn: Record<KvSideName, number> = { from: 0, to: 0 };
  let tombstoneVsValue = 0;
  for (const d of differences) {
    byKind[d.kind]++;
    if (d.winner) newerOn[d.winner]++;
    if (d.tombstoneVsValue) tombstoneVsValue++;
  }
  return { count: differences.length, byKind, newerOn, tombstoneVsValue };
}

const n = (x: number) => x.toLocaleString("en-US");

/** One side of a difference, as a line shows it: `seq 12, PUT 5 B sha256 1a2b…, version 17… east`. */
export function entryText(e: KvDifference["from"]): string {
  if (!e) return "no entry";
  const what = e.op === "PUT" ? `value ${n(e.size)} B sha256 ${e.digest}` : `tombstone ${e.op}`;
  const version = e.version !== undefined ? `version ${e.version}` : `unreadable version (${e.versionProblem ?? "?"})`;
  return `seq ${e.seq}, ${what}, ${version}`;
}

const KIND_TEXT: Record<KvDifferenceKind, string> = {
  missing: "missing on one side",
  older: "one side holds an older version",
  conflict: "same version, different content: corrupt, no winner",
  unreadable: "a version header is malformed: not compared",
};

export function differenceLines(d: KvDifference, from: string, to: string): string[] {
  const winner = d.winner === undefined ? "no winner" : `newer on ${d.winner === "from" ? from : to}`;
  return [
    `  ${d.key}: ${d.kind} (${winner}${d.tombstoneVsValue ? ", tombstone vs value" : ""})`,
    `    ${from}: ${entryText(d.from)}`,
    `    ${to}: ${entryText(d.to)}`,
  ];
}

export function formatKvReport(r: KvVerifyReport): string {
  const side = (s: KvBucketSide) => `${s.region}/${s.bucket}`;
  const from = side(r.from);
  const to = side(r.to);
  const d = r.differences;
  const lines = [
    `verify link ${r.link} (KV): ${from} <-> ${to}`,
    "",
    ...[r.from, r.to].map(
      (s) => `bucket ${side(s)} (stream ${s.stream}, last seq ${s.streamLastSeq}): ${n(s.values + s.tombstones)} keys, ${n(s.values)} values, ${n(s.tombstones)} tombstones`,
    ),
    `keys: ${n(r.keys)} in all, ${n(r.same)} the same on both sides`,
    "",
    `differences: ${n(d.count)}`,
    ...KV_DIFFERENCE_KINDS.map((k) => `  ${k}: ${n(d.byKind[k])} (${KIND_TEXT[k]})`),
    `  newer on ${from}: ${n(d.newerOn.from)}, newer on ${to}: ${n(d.newerOn.to)}; tombstone vs value: ${n(d.tombstoneVsValue)}`,
  ];
  if (d.examples.length > 0) {
    lines.push("", `first ${n(d.examples.length)} of ${n(d.count)}:`, ...d.examples.flatMap((x) => differenceLines(x, from, to)));
  }
  lines.push("", `result: ${r.agree ? "AGREE" : "DIFFER"} (${(r.elapsedMs / 1000).toFixed(1)} s)`);
  return lines.join("\n");
}
