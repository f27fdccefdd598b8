import type { RelayError } from "../errors.js";

/**
 * The consumer-side guard (DESIGN §3): an id seen-set with claim → commit/release, and a per-entity
 * monotonic version. The link calls it once per batch for claims and once per batch for commits.
 */
export type GuardDecision =
  /** Not seen and not stale: publish it, then commit. A claim token was taken. */
  | "relay"
  /** Already committed by someone: ack, do not publish. */
  | "duplicate"
  /** Its version is <= the entity's applied version: ack, do not publish. */
  | "stale"
  /** Claimed by another relay and not yet committed: neither publish nor ack (redelivered later). */
  | "in-flight";

export interface GuardItem {
  /** The message identity (Nats-Msg-Id or `<region>:<stream>:<seq>`). */
  readonly id: string;
  readonly entity?: string;
  readonly version?: number;
  /**
   * The guard's own key for this id, as its claim answered it (ClaimResult.key), handed back with
   * the commit or release so that the guard need not compute it again. Optional: a guard computes
   * it from the id when it is absent.
   */
  readonly key?: string;
}

export interface ClaimResult {
  readonly decision: GuardDecision;
  /** Set when decision is "relay": pass it back to commit/release. */
  readonly token?: string;
  /** Set by a guard that keys ids by a digest (the Redis guard), when decision is "relay": see GuardItem.key. */
  readonly key?: string;
  /** The stored version the item was compared against, when versions are on (for logs). */
  readonly storedVersion?: number;
}

export interface ClaimOptions {
  /**
   * Take over claims another token holds (never a committed id): for messages a previous owner of the
   * link held when it died or stopped, which this relay now owns (ordered recovery). Without it they
   * would wait for the dead owner's claims to expire, and newer messages could not pass them.
   */
  readonly takeover?: boolean;
  /**
   * `jetstream-relay repair`: the caller read the destination and found these ids missing, so an id the
   * guard remembers as committed is claimed again (the destination lost it), and a version equal to the
   * entity's stored one is not stale (it is the message that set it). A stored version newer than the
   * item's is still stale: putting it back would move the entity backwards.
   */
  readonly repair?: boolean;
  /**
   * The caller's lease revision (the KV revision of the write that acquired its lease): refused
   * (LEASE_FENCED) when the guard has seen a newer one for the link. With `incarnation`, the fencing
   * token.
   */
  readonly leaseRevision?: number;
  /**
   * The incarnation (creation time, ms) of the lease bucket `leaseRevision` is a revision of. Compared
   * before the lease revision: a newer incarnation (the bucket was re-created, its revisions start
   * over) resets the fence to this lease revision, an older one is refused. Without it only lease
   * revisions are compared.
   */
  readonly incarnation?: number;
}

export interface CommitOptions {
  /**
   * As in ClaimOptions: a commit under an older lease revision than the guard has seen is refused,
   * nothing written.
   */
  readonly leaseRevision?: number;
  readonly incarnation?: number;
}

/** The guard's refusals of a lease token (LEASE_FENCED) since the last call that passed its fence. */
export interface GuardFence {
  /** The lease revision refused (with `incarnation`, the refused fencing token). */
  readonly leaseRevision: number;
  readonly incarnation: number | undefined;
  /** Refused calls in a row (claims and commits). */
  readonly refusals: number;
  /** Wall time (ms) of the first refusal of the streak. */
  readonly since: number;
  readonly error: RelayError;
}

export interface ClaimedItem extends GuardItem {
  readonly token: string;
}

/**
 * Why a guard store is not safe to rely on, as `relay_guard_unsafe{reason}` names it:
 * `no_aof` (appendonly no: a restart forgets versions and ids), `eviction` (a maxmemory-policy that
 * can evict the guard's keys under a memory limit), `replication` (fewer online replicas than
 * `guard.redis.waitReplicas`, or connected to a replica).
 */
export const GUARD_UNSAFE_REASONS = ["no_aof", "eviction", "replication"] as const;
export type GuardUnsafeReason = (typeof GUARD_UNSAFE_REASONS)[number];

/** One settings check of the guard's store (persistence, eviction, replication). */
export interface GuardFinding {
  readonly check: "persistence" | "eviction" | "replication";
  /** `unsafe` sets `reason`; `unknown`: the store would not say (CONFIG or INFO refused); `warning`: worth a look, not unsafe. */
  readonly level: "ok" | "warning" | "unknown" | "unsafe";
  readonly reason?: GuardUnsafeReason;
  readonly detail: string;
}

export interface GuardSafety {
  readonly findings: readonly GuardFinding[];
  /** The reasons of the `unsafe` findings (empty: nothing unsafe found). */
  readonly unsafe: readonly GuardUnsafeReason[];
}

/**
 * A link's entry in its guard scope's marker (loss detection): `joined` (written when the link first
 * used the scope with no history), `resumed` (an operator accepted a loss), `resync` (an operator asked
 * for a full resync after a loss; pending until the link has done it), `resynced` (done).
 */
export type GuardMarkerMark = "joined" | "resumed" | "resync" | "resynced";

export interface GuardMarkerEntry {
  readonly mark: GuardMarkerMark;
  /** When it was written (ISO 8601). */
  readonly at: string;
}

export interface Guard {
  readonly kind: "none" | "memory" | "redis";
  /**
   * Set while the guard refuses the caller's lease token (every claim and commit answered LEASE_FENCED
   * since the first refusal); cleared by the next call that passes the fence. A link that holds a valid
   * lease and is refused cannot commit anything: it is paused and not ready (GuardWatch).
   */
  readonly fenced?: GuardFence | undefined;
  /** Connects and checks persistence. Rejects with GUARD_NOT_DURABLE under `strict`. */
  start(): Promise<void>;
  /**
   * One round trip for the whole batch. Results are in input order. Rejects with GUARD_UNAVAILABLE
   * when the store cannot be reached; then nothing was claimed that the caller must release
   * (a claim that did land expires with the claim TTL, and is recognised as ours by its token).
   * `token`: the caller's token for this call (else the guard mints one). A caller retrying a call
   * that failed passes the same token again, so claims that landed although their reply was lost
   * are recognised as its own.
   */
  claim(items: readonly GuardItem[], token?: string, opts?: ClaimOptions): Promise<ClaimResult[]>;
  /** Marks ids done (long TTL) and advances versions by compare-and-set. One round trip. */
  commit(items: readonly ClaimedItem[], opts?: CommitOptions): Promise<void>;
  /** Deletes claims still holding our token. One round trip. Never throws for a claim that expired. */
  release(items: readonly ClaimedItem[]): Promise<void>;
  /**
   * The committed version of each entity (absent: none stored), as a claim compares with: for a
   * retried publish judged again before it goes (a newer version committed since its claim makes it
   * stale). One round trip per slot group holding the entities. Rejects with GUARD_UNAVAILABLE.
   * Absent on a guard without versions (the none guard).
   */
  readVersions?(entities: readonly string[]): Promise<ReadonlyMap<string, number>>;
  /** Idempotent. */
  stop(): Promise<void>;

  // ---- Optional: a store that can be checked and can lose its memory (the Redis guard) ------------
  /**
   * Buckets of the seen-set a claim reads per new id (its scope's live generations, the most of any
   * slot group, as the last directory read showed them): 2 at a steady rate, more for an idTtl after
   * the rate grew and a bucket was closed early. Undefined before the first claim or commit.
   */
  readonly liveBuckets?: number | undefined;
  /** The findings of the last settings check (start(), checkSafety()); undefined before. */
  readonly safety?: GuardSafety | undefined;
  /** Checks the store's settings again (eviction policy, persistence, replication); never throws for an unsafe setting. */
  checkSafety?(): Promise<GuardSafety>;
  /** The link's entry in its scope's marker; undefined when it has none (never written, or the store lost it). */
  readMarker?(): Promise<GuardMarkerEntry | undefined>;
  /** Writes the link's marker entry; `ifAbsent`: only when it has none (returns whether it wrote). */
  writeMarker?(mark: GuardMarkerMark, opts?: { ifAbsent?: boolean }): Promise<boolean>;
  /** `listener` runs synchronously whenever the connection to the store is back after an outage. */
  onRestored?(listener: () => void): void;
}
