/**
 * The data of `jetstream-relay streams plan|apply`: what a region needs (needs.ts), what it has
 * (inspect.ts), and the plan between them (diff.ts), which apply.ts carries out.
 */

/** The name of the per-region stream that captures dead-letter subjects no other stream captures. */
export const DEAD_LETTER_STREAM = "RELAY_DLQ";

/** The stream behind a KV bucket. */
export function bucketStreamName(bucket: string): string {
  return `KV_${bucket}`;
}

// ---------------------------------------------------------------------------------------------
// What a region needs (pure, from the config and the source streams' subjects)

export interface DestinationNeed {
  readonly stream: string;
  /** The links writing into it, in config order. */
  readonly links: readonly string[];
  /** Where each of those links starts while the destination holds no record of it (`startAt`). */
  readonly starts: readonly { readonly link: string; readonly startAt: string }[];
  /** Every pattern the links publish to, without a pattern that another one contains. */
  readonly subjects: readonly string[];
  /** The largest replay horizon of its links. */
  readonly duplicateWindowMs: number;
  /** The link whose replay horizon that is. */
  readonly windowLink: string;
  /** Why some link's subjects could not be worked out (they are then missing from `subjects`). */
  readonly problems: readonly string[];
  /** Links that read this very stream (it is also their source): its subjects are never narrowed. */
  readonly readBy: readonly string[];
}

export interface DeadLetterNeed {
  readonly link: string;
  readonly subject: string;
}

export interface RegionNeeds {
  readonly region: string;
  readonly destinations: readonly DestinationNeed[];
  readonly deadLetters: readonly DeadLetterNeed[];
  /** The group bucket (leases and members) the region's relays use; undefined when no link ends here. */
  readonly bucket: string | undefined;
}

// ---------------------------------------------------------------------------------------------
// What a region has

export interface ExistingStream {
  readonly name: string;
  readonly subjects: readonly string[];
  readonly retention: string;
  readonly storage: string;
  /** 0 when the server reports none. */
  readonly duplicateWindowMs: number;
  /** 0 = unlimited. */
  readonly maxAgeMs: number;
  readonly replicas: number;
  readonly messages: number;
  /** A mirror holds no subjects of its own: nothing can publish into it. */
  readonly mirror: boolean;
}

export type ExistingFact =
  | { readonly kind: "found"; readonly stream: ExistingStream }
  | { readonly kind: "missing" }
  | { readonly kind: "failed"; readonly reason: string };

/** A link's source stream, as reported (never changed). */
export interface SourceNote {
  readonly region: string;
  readonly stream: string;
  readonly links: readonly string[];
  readonly state:
    | { readonly kind: "found"; readonly subjects: readonly string[]; readonly messages: number }
    | { readonly kind: "missing" }
    | { readonly kind: "failed"; readonly reason: string };
}

export interface ServerFacts {
  /** `2.9.10`, when the server said. */
  readonly version?: string;
  /** The server is part of a cluster (a single server takes replicas 1 only). */
  readonly clustered: boolean;
}

export interface RegionFacts {
  readonly needs: RegionNeeds;
  /** By stream name: every destination stream, RELAY_DLQ and the bucket's stream. */
  readonly existing: ReadonlyMap<string, ExistingFact>;
  /** By subject: the streams of the region whose subjects overlap it (the server's own test). */
  readonly owners: ReadonlyMap<string, readonly string[]>;
  readonly server: ServerFacts;
  readonly sources: readonly SourceNote[];
}

// ---------------------------------------------------------------------------------------------
// The plan

export type ItemKind = "destination" | "dead-letter" | "lease bucket" | "source";

/**
 * - `create`, `update`: apply does it.
 * - `ok`: nothing to do.
 * - `refused`: a change the relay needs would narrow or rewrite the stream: only with `--force`.
 * - `blocked`: a change the relay needs cannot be made by this tool (the server refuses it, or what
 *   is needed cannot be worked out); the reason says what to do instead.
 * - `failed`: the stream could not be read.
 * - `note`: a source stream, reported only.
 */
export type ItemStatus = "create" | "update" | "ok" | "refused" | "blocked" | "failed" | "note";

/**
 * - `safe`: apply makes it (creating, adding subjects, raising the duplicate window).
 * - `force`: narrows or rewrites the stream: only with `--force`.
 * - `impossible`: the server refuses it or it cannot be worked out; never attempted.
 */
export type ChangeRule = "safe" | "force" | "impossible";

export type ChangeField = "stream" | "subjects" | "retention" | "duplicate window" | "max age";

export interface Change {
  readonly field: ChangeField;
  /** What it is now (absent for a new stream or an impossible change). */
  readonly from?: string;
  readonly to: string;
  readonly rule: ChangeRule;
  /** The relay (and `check --live`) needs it; an optional change failing does not fail `apply`. */
  readonly required: boolean;
  /** For force and impossible changes: why, and what to do. */
  readonly reason?: string;
}

/** The stream configuration fields apply sends, all of which nats-server 2.9 knows. */
export interface StreamTarget {
  readonly subjects: readonly string[];
  readonly retention: "limits";
  readonly storage: "file";
  /** Absent: the server's default (2 min). */
  readonly duplicateWindowMs?: number;
}

/** An update: only the fields that change, each given when at least one change to it may be made. */
export interface StreamUpdate {
  /** The subject list when the safe changes are made (adds only). */
  readonly subjects?: readonly string[];
  /** The subject list when `--force` changes are made too (adds, and removes what no link needs). */
  readonly forcedSubjects?: readonly string[];
  readonly duplicateWindowMs?: number;
  /** Only with --force. */
  readonly maxAgeMs?: number;
  /** Only with --force. */
  readonly retention?: "limits";
}

export interface PlanItem {
  readonly region: string;
  readonly kind: ItemKind;
  /** The stream (or bucket) name; `region/stream` for a source. */
  readonly name: string;
  readonly links: readonly string[];
  readonly status: ItemStatus;
  readonly detail: string;
  readonly changes: readonly Change[];
  /** A stream to create. */
  readonly create?: StreamTarget;
  /** Lines said of the stream beside its changes (for a destination to create: where its links start). */
  readonly notes?: readonly string[];
  /** A stream to update. */
  readonly update?: StreamUpdate;
}

export interface RegionPlan {
  readonly region: string;
  /** The server connected to, without credentials. */
  readonly server?: string;
  readonly serverVersion?: string;
  readonly clustered?: boolean;
  /** The region could not be reached or read: no item could be planned. */
  readonly error?: string;
  readonly items: readonly PlanItem[];
}

export interface StreamsPlan {
  readonly force: boolean;
  readonly regions: readonly RegionPlan[];
}

// ---------------------------------------------------------------------------------------------
// What apply did

export type Outcome = "created" | "updated" | "ok" | "refused" | "blocked" | "failed" | "note";

export interface ItemResult {
  readonly item: PlanItem;
  readonly outcome: Outcome;
  /** The changes made. */
  readonly applied: readonly Change[];
  /** The changes not made (refused without --force, impossible, or failed). */
  readonly skipped: readonly Change[];
  /** The server's answer when a create or update failed. */
  readonly error?: string;
  /** The replicas a created stream got. */
  readonly replicas?: number;
}

export interface RegionResult {
  readonly region: RegionPlan;
  readonly results: readonly ItemResult[];
}
