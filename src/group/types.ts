import type { TickGrid } from "../lifecycle/tick-grid.js";
import type { LeaseKeyWatches } from "./lease-wakeup.js";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { ErrorCodes, RelayError } from "../errors.js";

/**
 * `idle`: not contending (before `start()`, or after `release()`); `contending`: watching the key and
 * taking it when absent or expired; `owner`: holds it (check `valid()` before acting); `lost`: ownership
 * just ended involuntarily (renewals failed past the deadline, or someone else wrote the key), on the way
 * back to `contending`; `stopped`: final.
 */
export const LEASE_STATES = ["idle", "contending", "owner", "lost", "stopped"] as const;
export type LeaseState = (typeof LEASE_STATES)[number];

export interface LeaseOptions {
  /** Connection to the cluster holding the bucket (the destination region's). Not closed by the lease. */
  readonly nc: NatsConnection;
  /** JetStream domain of that cluster, if any. */
  readonly domain?: string;
  /** KV bucket name; created when missing (history 1, no TTL). */
  readonly bucket: string;
  /** Key inside the bucket, e.g. the link name. KV-safe: letters, digits, `-_/=.`; no leading/trailing dot. */
  readonly key: string;
  /** Unique member id (e.g. `hostname-pid-random`); never reused by another process. */
  readonly owner: string;
  /** How long an unchanged lease stays valid, ms (default 5000). */
  readonly leaseMs?: number;
  /** Renewal interval, ms (default 1000); also how often a contender re-reads the key. At most leaseMs/2. */
  readonly renewMs?: number;
  /**
   * Replicas when the bucket has to be created. Default: 3, or 1 when the server says it is not clustered.
   * An existing bucket is used as it is.
   */
  readonly replicas?: number;
  readonly logger: Logger;
  /** Monotonic clock in ms (default `performance.now`); injectable for tests. Never a wall clock. */
  readonly now?: () => number;
  /** Called at every change of ownership (for `relay_lease_transitions_total`). */
  readonly onTransition?: (reason: LeaseTransition) => void;
  /** Called when the lease holds off taking a key in a bucket an old owner may still act on (for `relay_lease_holdoffs_total`). */
  readonly onHoldOff?: (reason: LeaseHoldOff) => void;
  /** The relay's shared tick grid: renewals wait on it, so the links' renewals leave in one write. */
  readonly ticks?: TickGrid;
  /** The relay's one watch over the group bucket (else this lease watches its own key). */
  readonly keyWatches?: LeaseKeyWatches;
  /**
   * This member's session and the judge of the others' (member-session.ts, session-judge.ts): with
   * them the lease is held in member mode whenever the session is valid (its key is not rewritten every
   * renewal; the member key's writes renew it). Without them, every renewal writes the key.
   */
  readonly sessions?: LeaseSessions;
}

/** What a lease needs of the member sessions (see LeaseOptions.sessions): MemberSession and SessionJudge. */
export interface LeaseSessions {
  readonly own: {
    current(): number | undefined;
    validFor(session: number): boolean;
    onChange(cb: () => void): () => void;
  };
  readonly judge: { ended(member: string, session: number, memberLeaseMs?: number): Promise<boolean> };
}

/** Why ownership changed (or a renewal came late): the `reason` label of relay_lease_transitions_total. */
export type LeaseTransition = "acquired" | "renewed-late" | "lost" | "released" | "handed-over";

/**
 * Why a lease takes no key for a while: `recreated_bucket` (this member saw the bucket deleted and
 * created again), `young_bucket` (it first saw the bucket younger than its group.lease: maybe just
 * re-created, with an owner of the old bucket still acting).
 */
export type LeaseHoldOff = "recreated_bucket" | "young_bucket";

/** LeaseOptions with every field filled (what the lease runs on). */
export interface CompiledLeaseOptions {
  readonly nc: NatsConnection;
  readonly domain: string | undefined;
  readonly bucket: string;
  readonly key: string;
  readonly owner: string;
  readonly leaseMs: number;
  readonly renewMs: number;
  /** Subtracted from the owner's deadline: covers clock-rate drift and the delay of the last renewal. */
  readonly marginMs: number;
  /** How often a contender re-reads the key (a release is also seen at once through a watch). */
  readonly pollMs: number;
  /** Timeout of one KV request (read, CAS write, delete). */
  readonly requestTimeoutMs: number;
  readonly replicas: number | undefined;
  readonly now: () => number;
  readonly onTransition: ((reason: LeaseTransition) => void) | undefined;
  readonly onHoldOff: ((reason: LeaseHoldOff) => void) | undefined;
  readonly keyWatches: LeaseKeyWatches | undefined;
  readonly sessions: LeaseSessions | undefined;
}

/**
 * The value stored under the lease key, as read (lease-value.ts encodes and decodes its JSON).
 * `renewedAt` is informational: no decision reads it.
 */
export interface LeaseValue {
  readonly owner: string;
  /**
   * The lease revision: the KV revision of the write that acquired the lease. Absent in the acquiring
   * write (its own revision becomes the lease revision), present in every renewal. Stored under the
   * JSON key `epoch` (its name before), which relays of every version read (lease-value.ts).
   */
  readonly leaseRevision?: number;
  /** Wall time of the write (ISO 8601), for operators reading the bucket. */
  readonly renewedAt: string;
  /**
   * The writer's lease duration (ms): how long this write keeps its writer the owner. A contender
   * judges expiry by it, not by its own `group.lease` (members that disagree, e.g. during the rolling
   * restart that changes it, must agree on each lease). Absent in values of relays before it: the
   * reader's own duration applies.
   */
  readonly leaseMs?: number;
  /** The writer's renewal interval (ms), informational. */
  readonly renewMs?: number;
  /**
   * Member mode: the writer's session (member-session.ts). Its validity is bounded by that session as
   * well as by this write (whose `leaseMs` is then the long one of `memberModeKeyLeaseMs`, for relays
   * that predate member mode); a contender takes the lease once the session is over (session-judge.ts).
   */
  readonly session?: number;
  /** Member mode: the writer's `group.lease` (what bounds it through its session). */
  readonly memberLeaseMs?: number;
}

const BUCKET_RE = /^[-\w]+$/;
const KEY_RE = /^[-/=.\w]+$/;

export function compileLeaseOptions(opts: LeaseOptions): CompiledLeaseOptions {
  const leaseMs = opts.leaseMs ?? 5_000;
  const renewMs = opts.renewMs ?? 1_000;
  const invalid = (what: string) => new RelayError(ErrorCodes.CONFIG_INVALID, `lease ${opts.bucket}/${opts.key}: ${what}`);
  if (!BUCKET_RE.test(opts.bucket)) throw invalid(`bucket name "${opts.bucket}" is not KV-safe`);
  if (!KEY_RE.test(opts.key) || opts.key.startsWith(".") || opts.key.endsWith(".")) {
    throw invalid(`key "${opts.key}" is not KV-safe`);
  }
  if (opts.owner.trim() === "") throw invalid("owner must not be empty");
  if (!Number.isFinite(leaseMs) || !Number.isFinite(renewMs) || renewMs <= 0) {
    throw invalid("leaseMs and renewMs must be positive numbers");
  }
  // At least one retry must fit between a renewal and the deadline (leaseMs - renewMs/2).
  if (renewMs * 2 > leaseMs) throw invalid(`renewMs (${renewMs}) must be at most half of leaseMs (${leaseMs})`);
  if (opts.replicas !== undefined && (!Number.isInteger(opts.replicas) || opts.replicas < 1 || opts.replicas > 5)) {
    throw invalid(`replicas must be an integer from 1 to 5 (got ${opts.replicas})`);
  }
  return Object.freeze({
    nc: opts.nc,
    domain: opts.domain,
    bucket: opts.bucket,
    key: opts.key,
    owner: opts.owner,
    leaseMs,
    renewMs,
    marginMs: renewMs / 2,
    pollMs: renewMs,
    requestTimeoutMs: Math.max(renewMs, 500),
    replicas: opts.replicas,
    now: opts.now ?? (() => performance.now()),
    onTransition: opts.onTransition,
    onHoldOff: opts.onHoldOff,
    keyWatches: opts.keyWatches,
    sessions: opts.sessions,
  });
}
