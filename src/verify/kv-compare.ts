/**
 * Comparing two key-value buckets key by key (`verify --kv`): what each side holds as its latest entry
 * per key, its version (protocol/kv-version.ts) and whether it is a value or a tombstone, and how the
 * two sides differ. Pure: reading the buckets is kv-verify.ts's; putting winners back is kv-repair.ts's.
 *
 * Values are never kept: an entry holds the value's size and SHA-256 (to tell corruption from
 * agreement), so neither the comparison nor its report can show one.
 */
import { createHash } from "node:crypto";
import type { KvVersion } from "../protocol/kv-version.js";
import { compareKvVersions, formatKvVersion, kvVersionOf } from "../protocol/kv-version.js";
import type { Headers } from "./types.js";

/** What a bucket's latest entry for a key is: a value (`PUT`) or a tombstone (`DEL`, `PURGE`). */
export type KvOp = "PUT" | "DEL" | "PURGE";

/** The KV client's operation header; `DEL` and `PURGE` mark tombstones (a `PURGE` also rolls up the key). */
export const KV_OPERATION_HEADER = "KV-Operation";
/** Set by nats-server 2.11+ on a delete marker it writes itself (`MaxAge`: the key's TTL ran out): a purge. */
const MARKER_REASON_HEADER = "Nats-Marker-Reason";

/** One side's latest entry for a key. */
export interface KvEntry {
  /** The stream sequence of the entry in its bucket's stream. */
  readonly seq: number;
  readonly op: KvOp;
  /** Undefined when the entry's version headers cannot be read (`versionProblem` says why). */
  readonly version?: KvVersion;
  readonly versionProblem?: string;
  /**
   * The value's size in bytes and the first 128 bits of its SHA-256 (32 hex digits: enough to tell a
   * corrupt copy, half the memory per key of the whole): never the value.
   */
  readonly size: number;
  readonly digest: string;
}

/** The operation of a KV write, by its headers. */
export function kvOpOf(headers: Headers): KvOp {
  const op = headers?.get(KV_OPERATION_HEADER) ?? "";
  if (op === "DEL" || op === "PURGE") return op;
  if ((headers?.get(MARKER_REASON_HEADER) ?? "") !== "") return "PURGE";
  return "PUT";
}

/**
 * The entry a stored message makes: `storedNs` is its store time and `region` the region of the bucket
 * it is stored in (a local write's version, kvVersionOf).
 */
export function kvEntryOf(headers: Headers, data: Uint8Array, seq: number, storedNs: bigint, region: string): KvEntry {
  const base = { seq, op: kvOpOf(headers), size: data.length, digest: createHash("sha256").update(data).digest("hex").slice(0, 32) };
  try {
    return { ...base, version: kvVersionOf(headers, storedNs, region) };
  } catch (err) {
    return { ...base, versionProblem: err instanceof Error ? err.message : String(err) };
  }
}

/** The two sides of a KV comparison: the link's `from` and `to` buckets. */
export type KvSideName = "from" | "to";

/**
 * - `missing`: one side holds no entry for the key (the other's entry is the winner, value or tombstone);
 * - `older`: the sides hold different versions (the newer one is the winner);
 * - `conflict`: the same version with a different value or operation: the same write cannot differ, so
 *   one copy is corrupt; no winner by version (repair leaves it: write the key anew);
 * - `unreadable`: a side's version headers are malformed; nothing to compare by (repair leaves it).
 */
export type KvDifferenceKind = "missing" | "older" | "conflict" | "unreadable";

export const KV_DIFFERENCE_KINDS: readonly KvDifferenceKind[] = ["missing", "older", "conflict", "unreadable"];

/** An entry as the report shows it: versions as their header text (`<ns> <region>`), never the value. */
export interface KvEntrySummary {
  readonly seq: number;
  readonly op: KvOp;
  /** `<ns> <region>`; absent when unreadable. */
  readonly version?: string;
  readonly versionProblem?: string;
  readonly size: number;
  /** The first 16 hex digits of the value's SHA-256. */
  readonly digest: string;
}

export interface KvDifference {
  readonly key: string;
  readonly kind: KvDifferenceKind;
  /** The side whose entry should be on both (`missing`, `older`); absent when there is none. */
  readonly winner?: KvSideName;
  /** The winner is a tombstone and the other side holds a value, or the other way round. */
  readonly tombstoneVsValue: boolean;
  readonly from?: KvEntrySummary;
  readonly to?: KvEntrySummary;
}

export interface KvComparison {
  /** Keys held by either side. */
  readonly keys: number;
  /** Keys on which both sides agree: the same version and value (or the same tombstone). */
  readonly same: number;
  /** Every difference, keys sorted. */
  readonly differences: readonly KvDifference[];
}

export function summarize(e: KvEntry): KvEntrySummary {
  return {
    seq: e.seq,
    op: e.op,
    ...(e.version ? { version: formatKvVersion(e.version) } : {}),
    ...(e.versionProblem !== undefined ? { versionProblem: e.versionProblem } : {}),
    size: e.size,
    digest: e.digest.slice(0, 16),
  };
}

const isTombstone = (e: KvEntry | undefined) => e !== undefined && e.op !== "PUT";

/** How two entries for one key differ; undefined when they agree. */
export function compareKvEntry(key: string, from: KvEntry | undefined, to: KvEntry | undefined): KvDifference | undefined {
  if (!from && !to) return undefined;
  const sides = { ...(from ? { from: summarize(from) } : {}), ...(to ? { to: summarize(to) } : {}) };
  if (!from || !to) {
    return { key, kind: "missing", winner: from ? "from" : "to", tombstoneVsValue: false, ...sides };
  }
  if (!from.version || !to.version) return { key, kind: "unreadable", tombstoneVsValue: false, ...sides };
  const tombstoneVsValue = isTombstone(from) !== isTombstone(to);
  const order = compareKvVersions(from.version, to.version);
  if (order !== 0) return { key, kind: "older", winner: order > 0 ? "from" : "to", tombstoneVsValue, ...sides };
  if (from.op === to.op && from.size === to.size && from.digest === to.digest) return undefined;
  return { key, kind: "conflict", tombstoneVsValue, ...sides };
}

/** Compares two buckets' latest entries per key (key → entry), key by key, keys sorted. */
export function compareKvBuckets(from: ReadonlyMap<string, KvEntry>, to: ReadonlyMap<string, KvEntry>): KvComparison {
  const keys = new Set([...from.keys(), ...to.keys()]);
  const differences: KvDifference[] = [];
  for (const key of [...keys].sort(sortedOrder)) {
    const d = compareKvEntry(key, from.get(key), to.get(key));
    if (d) differences.push(d);
  }
  return { keys: keys.size, same: keys.size - differences.length, differences };
}

function sortedOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
