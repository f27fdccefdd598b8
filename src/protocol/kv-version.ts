/**
 * The version of a key-value write, comparable across regions: what makes active-active buckets
 * converge by last writer wins.
 *
 * A write's version is a point on one scale, nanoseconds since the Unix epoch, with the region where
 * it was first written as the tie-break:
 * - a writer may supply its own (`KV-Version`, a decimal integer on that scale, e.g. a hybrid logical
 *   clock whose physical part is in nanoseconds): it takes precedence;
 * - otherwise the time the write was first stored in its origin region (the origin stream's timestamp).
 * The first hop writes the version it judged by into `Relay-KV-Version` (`<ns> <region>`) and every
 * later hop reads it from there, so a write keeps one version wherever it is stored. A local write in a
 * bucket (no `Relay-KV-Version`) has the version of its own header or its own store time in that
 * bucket's region.
 *
 * Two writes compare by `ns`, then by region name (byte order). Equal versions are the same write.
 */

/** Set by the relay on a KV write's first hop: `<ns> <origin region>`, kept after. */
export const KV_VERSION_HEADER = "Relay-KV-Version";
/** A writer-supplied version: a decimal integer, nanoseconds since the epoch or on the same scale. */
export const KV_WRITER_VERSION_HEADER = "KV-Version";

export interface KvVersion {
  /** Nanoseconds since the epoch (or the writer's own value on that scale). */
  readonly ns: bigint;
  /** The region where the write was first stored: the tie-break. */
  readonly region: string;
}

interface HeaderReader {
  get(name: string): string;
}

/** A region name as the header carries it: no whitespace. */
const REGION = /^[^\s]+$/;
const DECIMAL = /^(0|[1-9][0-9]{0,29})$/;

/** Parses `<ns> <region>` (a `Relay-KV-Version` value); undefined when it is not one. */
export function parseKvVersion(text: string): KvVersion | undefined {
  const parts = text.trim().split(/\s+/);
  if (parts.length !== 2) return undefined;
  const [ns, region] = parts as [string, string];
  if (!DECIMAL.test(ns) || !REGION.test(region)) return undefined;
  return { ns: BigInt(ns), region };
}

/** The `Relay-KV-Version` value of a version. */
export function formatKvVersion(v: KvVersion): string {
  return `${v.ns} ${v.region}`;
}

/** Why a write's version headers cannot be read (what and which header), or undefined when they can. */
export function kvVersionProblem(headers: HeaderReader | undefined): string | undefined {
  const carried = headers?.get(KV_VERSION_HEADER) ?? "";
  if (carried !== "" && parseKvVersion(carried) === undefined) return `${KV_VERSION_HEADER} "${carried.slice(0, 64)}" is not "<nanoseconds> <region>"`;
  const writer = headers?.get(KV_WRITER_VERSION_HEADER) ?? "";
  if (carried === "" && writer !== "" && !DECIMAL.test(writer.trim())) return `${KV_WRITER_VERSION_HEADER} "${writer.slice(0, 64)}" is not a decimal integer`;
  return undefined;
}

/**
 * The version of a write: the one it carries from its first hop, else its writer's, else its store
 * time (`storedNs`) in `region` (where this copy was first stored). Throws when a header is malformed
 * (kvVersionProblem says why): a write whose version cannot be read is never compared.
 */
export function kvVersionOf(headers: HeaderReader | undefined, storedNs: bigint, region: string): KvVersion {
  const problem = kvVersionProblem(headers);
  if (problem !== undefined) throw new Error(problem);
  const carried = headers?.get(KV_VERSION_HEADER) ?? "";
  if (carried !== "") return parseKvVersion(carried) as KvVersion;
  const writer = (headers?.get(KV_WRITER_VERSION_HEADER) ?? "").trim();
  return { ns: writer !== "" ? BigInt(writer) : storedNs, region };
}

/** −1, 0 or 1 as `a` is older than, the same as, or newer than `b`. */
export function compareKvVersions(a: KvVersion, b: KvVersion): -1 | 0 | 1 {
  if (a.ns !== b.ns) return a.ns < b.ns ? -1 : 1;
  if (a.region !== b.region) return a.region < b.region ? -1 : 1;
  return 0;
}
