/**
 * What a live check decides from and what it returns: the facts preflight.ts gathers (regions,
 * consumers, the guard's Redis and marker, the streams that capture a subject, a partitioned
 * source's subjects) and one row of a link's table (CheckResult). Stream facts are in
 * nats/stream-facts.ts. The facts hold names, subjects and numbers only, never a secret.
 */
import type { EvictionReport, ReplicationReport } from "../guard/safety.js";
import type { GuardMarkerEntry } from "../guard/types.js";

export type Level = "ok" | "warning" | "error" | "skipped";

export interface CheckResult {
  readonly name: string;
  readonly level: Level;
  /** What was found and why it matters. */
  readonly detail: string;
  /** What to do about it (warnings and errors). */
  readonly fix?: string;
}

// ---------------------------------------------------------------------------------------------
// Facts, as preflight.ts gathers them

export type RegionFact =
  | {
      readonly ok: true;
      readonly server: string;
      /** The server's version, as it said in its INFO. */
      readonly version?: string;
      /** The round trip to the region's server from where the check runs (ms), when it answered in time. */
      readonly rttMs?: number;
      /** The server's `max_payload`. */
      readonly maxPayload?: number;
    }
  | { readonly ok: false; readonly reason: string };

export interface ConsumerFacts {
  readonly filterSubjects: readonly string[];
  readonly numPending: number;
  readonly numAckPending: number;
  readonly ackFloorStreamSeq: number;
  readonly ackFloorConsumerSeq: number;
}

export type ConsumerFact =
  | { readonly kind: "found"; readonly consumer: ConsumerFacts }
  | { readonly kind: "missing" }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

export type RedisFact =
  | {
      readonly ok: true;
      readonly target: string;
      readonly persistence: "aof" | "none" | "unknown";
      readonly appendfsync?: string;
      readonly reason?: string;
      /** `redis_version`, when INFO answered. */
      readonly version?: string;
      /** `maxmemory` and `maxmemory-policy` (or why they could not be read). */
      readonly eviction?: EvictionReport;
      /** INFO replication, read when the connection sets `waitReplicas`. */
      readonly replication?: ReplicationReport;
    }
  | { readonly ok: false; readonly target: string; readonly reason: string; readonly unsupported?: true };

/** A link's entry in its guard scope's marker (loss detection), read when the guard Redis answered. */
export type MarkerFact =
  | { readonly kind: "found"; readonly entry: GuardMarkerEntry }
  | { readonly kind: "missing" }
  /** No entry, but the state a relay from before scope markers left (an upgrade): the relay writes the entry at start. */
  | { readonly kind: "earlier-relay" }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

/** Streams in the destination region whose subjects overlap the dead-letter subject. */
export type DeadLetterFact =
  | { readonly kind: "found"; readonly streams: readonly string[] }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

/** Subjects of the source stream matching a partitioned link's filter, with their message counts. */
export type PartitionFact =
  | { readonly kind: "found"; readonly subjects: Readonly<Record<string, number>> }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

/** Other streams in the destination region that overlap a transformed subject (by that subject). */
export type OtherStreams = ReadonlyMap<string, readonly string[]>;

/**
 * Where a link without a source consumer starts, as read (only when its durable does not exist): the
 * destination's record of it (its newest Relay-Source marker), or, without one, where its `startAt`
 * places the new consumer and how many messages wait from there.
 */
export type StartFact =
  | { readonly kind: "record"; readonly afterSeq: number; readonly streamLastSeq: number }
  | { readonly kind: "start-at"; readonly startSeq: number; readonly messages: number; readonly complete: boolean; readonly scanned: number }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };
