import { createHash, hash } from "node:crypto";
import { DEFAULTS } from "../config/defaults.js";

/**
 * The guard's compact Redis layout: which key an id or an entity lives in, and how many such keys
 * there are. lua.ts holds the scripts that read and write it; this file holds what the client
 * computes before it calls them (the scripts are given every key they touch, in KEYS).
 *
 * Digests. An id is stored as the first 16 bytes of SHA-256(id) (128 bits, compared as binary), an
 * entity as the first 16 bytes of SHA-256(entity). Bytes 0-3 pick the hash inside a bucket or the
 * version hash (an unsigned 32-bit number modulo the fan-out), byte 15 picks the slot group; a
 * committed id's field is the whole 16-byte digest, an entity's field bytes 4-11 (64 bits, on top of
 * the bits that chose its hash).
 *
 * Slot groups. A scope's keys are spread over G groups, each with its own hash tag: `{<scope>}` for
 * group 0 (the tag of the previous layout, so its keys stay readable in the same slot) and
 * `{<scope>/<g>}` for the others ("/" cannot occur in a stream name, so no other scope can produce
 * the same tag). G is 1 on a single Redis or Sentinel (one script call per batch) and 16 on Redis
 * Cluster (one call per group present in a batch, run concurrently). Per group:
 *
 *   relay:{T}:meta                 hash: the buckets' directory (below), no TTL
 *   relay:{T}:i:<bucket>:<h>       hash: committed ids of one bucket (its id in base 36 here):
 *                                  field = 16-byte digest, value "1", plus a marker field "" that
 *                                  tells a new hash (it gets its expiry then); expires as a whole at
 *                                  the bucket's expiry
 *   relay:{T}:id:<id>              "c:<token>" while claimed (TTL claimTtl); deleted by the commit.
 *                                  The previous layout's name: an id it left "d" (done) is honoured.
 *                                  Only keyed claims write it: a link that is its scope's only live
 *                                  writer claims by its lease alone (lua.ts WRITERS)
 *   relay:{T}:w                    hash: the scope's writers, field = a link's fence name, value =
 *                                  "<word>:<server ms>" of its last call (lua.ts WRITERS); no TTL,
 *                                  entries silent for ten claim TTLs are dropped
 *   relay:{T}:v:<h>                hash: versions, field = 8 bytes of the entity digest, value =
 *                                  the version; no TTL
 *   relay:{T}:epoch:<fence>        the newest lease revision seen for a link, per group, no TTL (a
 *                                  number, as relays before lease-bucket incarnations wrote it). The
 *                                  name keeps "epoch", the lease revision's name in older versions:
 *                                  relays of every version share the key (rolling upgrades)
 *   relay:{<scope>}:ver:<entity>   the previous layout's version key: read, and advanced when it
 *                                  exists, never created
 *
 * Buckets. Commits go to the group's current bucket. A bucket takes commits for idTtl (its span)
 * and expires idTtl after its span ends, so an id is remembered for idTtl to 2 × idTtl: two
 * generations, the current bucket and the one before it. A bucket has F hashes (its fan-out, fixed
 * for its life): an id lives in hash `u32(digest) mod F`. F adapts
 * to the rate, so that hashes stay small enough for Redis's compact listpack encoding (default
 * hash-max-listpack-entries 128) without becoming many near-empty keys:
 *  - the first bucket of a group has minFanout(G) hashes (MIN_FANOUT per scope, split over its
 *    groups);
 *  - a bucket whose span ended is followed by one sized for as many ids as it took, at
 *    BUCKET_TARGET ids per hash;
 *  - a bucket that reaches BUCKET_FILL ids per hash on average before its span ends (the rate grew)
 *    is closed early and followed by one with 4 × its fan-out. Its end and expiry in the directory
 *    are brought forward to the close (it is remembered idTtl after its last commit, as a bucket
 *    that ran its span is), so that claims stop reading it an idTtl after the close instead of an
 *    idTtl after its span would have ended; its hashes keep the expiry they were given.
 * A claim checks every bucket that has not expired: two hash reads per new id at a steady rate (more
 * for a while after the rate grew and buckets were closed early). Each read is a Redis command run
 * from the script, at 1.0-1.5 µs of Redis CPU apiece in bench:guard's steady phase whatever the
 * hash's size (8 or 16 ids per hash cost the same): reads per id are what a claim costs. Spans of
 * idTtl/2 kept ids 1.25 × idTtl on average for three reads (8.3 µs of Redis CPU per id, 115,000
 * ids/s in that phase); spans of idTtl keep them 1.5 × idTtl for two (6.5 µs, 145,000 ids/s), a
 * fifth of the memory more for a fifth of the CPU less. Hashes are kept at a few dozen ids
 * (BUCKET_FILL, BUCKET_TARGET): smaller ones cost the same per read and more bytes per id.
 *
 * The directory `relay:{T}:meta` holds, per live bucket, `b<bucket id>` = "<F>,<start>,<end>,
 * <expires at>" (Redis server time, ms; the bucket id is its start), `c` = the current bucket, `n` =
 * ids committed to it, `v` = a counter bumped on every change, `vf` = the version fan-out
 * (written once per group; the scope keeps it), `incs:<fence key>` = the incarnations (creation
 * times, ms) of the lease buckets the fence has seen, in the order first seen, the last being the one
 * its lease revision is a revision of, and `inc:<fence key>` = that incarnation as relays before the
 * list read it (lua-fence.ts FENCE; neither is a directory change: `v` stays; their names, with the fence
 * key's "epoch:" in them, are shared by relays of every version). The client caches the directory and passes `v`; a script that sees another `v`
 * changes nothing and answers "M", and the client reloads and retries.
 */

export const BUCKETS_PER_TTL = 1;
/** Average ids per hash at which a bucket closes before its span ends (listpack holds up to 128). */
export const BUCKET_FILL = 24;
/** Average ids per hash a bucket opened after a full span is sized for. */
export const BUCKET_TARGET = 16;
export const MIN_FANOUT = 4096;
export const MAX_FANOUT = 1 << 22;
/** Entities per version hash at `guard.versions.expectedEntities`. */
export const VERSION_FILL = 64;
/** The default of `guard.versions.expectedEntities`: the config's defaults hold it. */
export const DEFAULT_EXPECTED_ENTITIES = DEFAULTS.expectedEntities;
/** Slot groups on Redis Cluster. Part of the layout: every relay of a scope must use the same. */
export const CLUSTER_GROUPS = 16;
/** Smallest bucket span (ms), for very short idTtl values in tests. */
const MIN_SPAN_MS = 1_000;

export const ID_DIGEST_BYTES = 16;
export const ENTITY_FIELD_BYTES = 8;

/** The first bucket's fan-out in each of `groups` slot groups (the scope's MIN_FANOUT split over them). */
export function minFanout(groups: number): number {
  return Math.max(256, Math.ceil(MIN_FANOUT / groups));
}

/** A bucket's span for an idTtl: the time it takes commits. */
export function bucketSpanMs(idTtlMs: number, bucketsPerTtl = BUCKETS_PER_TTL): number {
  return Math.max(MIN_SPAN_MS, Math.floor(idTtlMs / bucketsPerTtl));
}

/** The version fan-out a group is created with, for an expected number of entities. */
export function versionFanout(expectedEntities: number, groups: number): number {
  return Math.max(1, Math.ceil(expectedEntities / (VERSION_FILL * groups)));
}

const sha256: (text: string) => string =
  typeof hash === "function"
    ? (text) => hash("sha256", text, "binary")
    : (text) => createHash("sha256").update(text).digest("binary");

/** The 16-byte digest of an id or entity, as a "binary" (latin1) string: one char per byte. */
export function digest(text: string): string {
  return sha256(text).slice(0, ID_DIGEST_BYTES);
}

/** Bytes 0-3 of a digest as an unsigned number: picks the hash of a bucket or of the versions. */
export function hashIndex(d: string, fanout: number): number {
  const u32 =
    ((d.charCodeAt(0) << 24) | (d.charCodeAt(1) << 16) | (d.charCodeAt(2) << 8) | d.charCodeAt(3)) >>> 0;
  return u32 % fanout;
}

/** Byte 15 of a digest picks the slot group. */
export function groupOf(d: string, groups: number): number {
  return groups === 1 ? 0 : d.charCodeAt(15) % groups;
}

/** An entity's field in its version hash: bytes 4-11 of its digest. */
export function entityField(d: string): string {
  return d.slice(4, 4 + ENTITY_FIELD_BYTES);
}

/** The hash tag of a group (group 0 keeps the previous layout's tag). */
export function groupTag(scope: string, group: number): string {
  // An empty tag "{}" would make Redis hash the whole key, scattering a group over slots.
  if (scope.length === 0) throw new Error("guard scope must not be empty");
  return group === 0 ? `{${scope}}` : `{${scope}/${group}}`;
}

/** Key names of one group. */
export class GroupKeys {
  readonly base: string;
  readonly meta: string;
  /** `relay:{T}:w`: the scope's live writers (lua.ts WRITERS). */
  readonly writers: string;
  /** `relay:{T}:id:`, as bytes: the claim key is this plus the id. */
  readonly claimPrefix: Buffer;
  /** `relay:{T}:v:`, as bytes: a version hash is this plus its index. */
  readonly versionPrefix: Buffer;
  /** The previous layout's version key prefix `relay:{<scope>}:ver:` (group 0's slot). */
  readonly legacyVersionPrefix: Buffer;

  constructor(
    readonly scope: string,
    readonly group: number,
  ) {
    this.base = `relay:${groupTag(scope, group)}:`;
    this.meta = `${this.base}meta`;
    this.writers = `${this.base}w`;
    this.claimPrefix = Buffer.from(`${this.base}id:`);
    this.versionPrefix = Buffer.from(`${this.base}v:`);
    this.legacyVersionPrefix = Buffer.from(`relay:{${scope}}:ver:`);
  }

  claim(id: string): string {
    return `${this.base}id:${id}`;
  }
  /** Bytes of the name of a bucket's hashes without the hash index: `relay:{T}:i:<bucket, base 36>:`. */
  bucketPrefix(bucketId: string): Buffer {
    return Buffer.from(`${this.base}i:${Number(bucketId).toString(36)}:`);
  }
  bucket(bucketId: string, index: number): string {
    return `${this.base}i:${Number(bucketId).toString(36)}:${index}`;
  }
  version(index: number): string {
    return `${this.base}v:${index}`;
  }
  /** The fence key. Wire name: "epoch:" stays, relays of every version read and write it (above). */
  fence(name: string): string {
    return `${this.base}epoch:${name}`;
  }
}

export interface Bucket {
  /** Its start (Redis server time, ms), as stored. */
  readonly id: string;
  readonly fanout: number;
  readonly start: number;
  /** End of its span: the scripts stop writing to it then. */
  readonly end: number;
  readonly expiresAt: number;
}

/** A client's copy of a group's directory `relay:{T}:meta`. */
export interface Directory {
  /** The change counter the scripts compare ("0" before the first bucket). */
  readonly version: string;
  /** Live buckets, newest first. */
  readonly buckets: readonly Bucket[];
  /** The bucket commits go to, when there is one. */
  readonly current?: Bucket;
  /** Ids in the current bucket. */
  readonly count: number;
  /** The version fan-out, once set. */
  readonly versionFanout?: number;
}

export const EMPTY_DIRECTORY: Directory = { version: "0", buckets: [], count: 0 };

/** Parses HGETALL of a directory (as an object); buckets that expired before `now` are left out. */
export function parseDirectory(fields: Record<string, string>, now: number): Directory {
  const buckets: Bucket[] = [];
  let current: Bucket | undefined;
  for (const [name, value] of Object.entries(fields)) {
    if (!name.startsWith("b")) continue;
    const [fanout, start, end, expiresAt] = value.split(",").map(Number);
    if (!fanout || start === undefined || end === undefined || expiresAt === undefined) continue;
    const bucket: Bucket = { id: name.slice(1), fanout, start, end, expiresAt };
    if (bucket.id === fields.c) current = bucket;
    // A minute's grace: the client's clock may run ahead of the server's.
    if (expiresAt + 60_000 > now || bucket === current) buckets.push(bucket);
  }
  buckets.sort((a, b) => b.start - a.start);
  const vf = Number(fields.vf);
  return {
    version: fields.v ?? "0",
    buckets,
    ...(current ? { current } : {}),
    count: Number(fields.n ?? 0),
    ...(vf > 0 ? { versionFanout: vf } : {}),
  };
}

/** The few reads `inspectId` and `inspectVersion` need (an ioredis Redis or Cluster client has them). */
export interface LayoutReader {
  hgetall(key: string): Promise<Record<string, string>>;
  hexists(key: string, field: Buffer): Promise<number>;
  hget(key: string, field: Buffer): Promise<string | null>;
  get(key: string): Promise<string | null>;
  pttl(key: string): Promise<number>;
}

/**
 * Where an id is, for operators and tests: claimed ("c:<token>" in its claim key), committed ("d":
 * its digest in a live bucket, or the previous layout's "d"), or absent (null); with the key holding
 * it and that key's remaining TTL (ms).
 */
export async function inspectId(
  r: LayoutReader,
  scope: string,
  id: string,
  groups = 1,
): Promise<{ state: string | null; key?: string; pttl?: number }> {
  const d = digest(id);
  const keys = new GroupKeys(scope, groupOf(d, groups));
  const claim = await r.get(keys.claim(id));
  if (claim !== null) return { state: claim, key: keys.claim(id), pttl: await r.pttl(keys.claim(id)) };
  const dir = parseDirectory(await r.hgetall(keys.meta), Date.now());
  for (const b of dir.buckets) {
    const key = keys.bucket(b.id, hashIndex(d, b.fanout));
    if ((await r.hexists(key, Buffer.from(d, "latin1"))) === 1)
      return { state: "d", key, pttl: await r.pttl(key) };
  }
  return { state: null };
}

/** An entity's stored version (the higher of the version hash and the previous layout's key), or null. */
export async function inspectVersion(
  r: LayoutReader,
  scope: string,
  entity: string,
  groups = 1,
): Promise<{ version: string | null; key?: string; pttl?: number }> {
  const d = digest(entity);
  const keys = new GroupKeys(scope, groupOf(d, groups));
  const vf = parseDirectory(await r.hgetall(keys.meta), Date.now()).versionFanout;
  const key = vf === undefined ? undefined : keys.version(hashIndex(d, vf));
  const stored = key === undefined ? null : await r.hget(key, Buffer.from(entityField(d), "latin1"));
  const legacyKey = `relay:{${scope}}:ver:${entity}`;
  const legacy = await r.get(legacyKey);
  if (legacy !== null && (stored === null || Number(legacy) > Number(stored)))
    return { version: legacy, key: legacyKey, pttl: await r.pttl(legacyKey) };
  if (stored === null || key === undefined) return { version: null };
  return { version: stored, key, pttl: await r.pttl(key) };
}
