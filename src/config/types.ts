import type { SubjectTransform } from "../protocol/subjects.js";

/**
 * The compiled, frozen, fully-defaulted configuration. YAML → schema.ts (zod, unknown keys rejected)
 * → compile.ts → this. Durations are milliseconds here; every optional field the code reads has a
 * value. Secrets stay in these objects only: nothing here is ever logged whole (see `redactConfig`).
 */
export type RegionAuth =
  | { readonly kind: "token"; readonly token: string }
  | { readonly kind: "user"; readonly user: string; readonly password: string }
  | { readonly kind: "creds"; readonly credsFile: string }
  | { readonly kind: "nkey"; readonly seedFile: string };

export interface TlsConfig {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
}

export interface RegionConfig {
  readonly name: string;
  readonly servers: readonly string[];
  readonly auth?: RegionAuth;
  readonly tls?: TlsConfig;
  /** JetStream domain of the region, when it has one (API prefix `$JS.<domain>.API`). */
  readonly domain?: string;
}

/** Where an entity key or a version number is read from. */
export type FieldSource =
  | { readonly kind: "header"; readonly name: string }
  | { readonly kind: "subject-token"; readonly index: number };

export interface RedisGuardConnection {
  readonly kind: "redis";
  /** One of url / sentinel / cluster is set. */
  readonly url?: string;
  readonly sentinel?: {
    readonly name: string;
    readonly nodes: readonly string[];
    /** The sentinels' own credentials (a secret), apart from the data nodes'. */
    readonly username?: string;
    readonly password?: string;
  };
  readonly cluster?: { readonly nodes: readonly string[] };
  /** ACL user of the data nodes (Redis 6+). */
  readonly username?: string;
  readonly password?: string;
  readonly tls?: TlsConfig;
  /** A commit counts only once WAIT reports this many replicas (0 or absent: commits are not waited for). */
  readonly waitReplicas?: number;
  /** How long one WAIT may take before the commit counts as failed (ms; compiled configs always set it). */
  readonly waitTimeoutMs?: number;
}

export interface GuardConfig {
  /** `memory` is for tests and the demo only: it forgets everything on restart. */
  readonly store: RedisGuardConnection | { readonly kind: "memory" };
  /** How long a committed id is remembered (ms). */
  readonly idTtlMs: number;
  /** How long an uncommitted claim lives (ms); defaults to 2 × the link's ack wait. */
  readonly claimTtlMs: number;
  readonly versions?: {
    readonly entity: FieldSource;
    readonly version: FieldSource;
    /** Sizes the Redis guard's version hashes (default 1,000,000); a scope keeps the size it was created with. */
    readonly expectedEntities?: number;
  };
  /** Refuse to start when Redis does not persist versions (no AOF). */
  readonly strict: boolean;
}

/** How a link rewrites subjects (defined with the subject rules it feeds). */
export type { SubjectTransform } from "../protocol/subjects.js";

export type BadMessagePolicy =
  { readonly action: "dead-letter"; readonly subject: string } | { readonly action: "halt" };

export interface LinkConfig {
  readonly name: string;
  /** `bucket`: a KV link (`KV_<bucket>` is `stream`; docs/kv.md). */
  readonly from: { readonly region: string; readonly stream: string; readonly filterSubject?: string; readonly bucket?: string };
  readonly to: {
    readonly region: string;
    readonly stream: string;
    /** A KV link's destination bucket (`KV_<bucket>` is `stream`, `$KV.<from bucket>.>` maps to `$KV.<bucket>.>`). */
    readonly bucket?: string;
    readonly transform: SubjectTransform;
    /**
     * Every publish carries `Nats-Expected-Stream: <stream>`, so the server refuses to store into any
     * other stream (err_code 10060). Off by default: the header is stored with every message.
     */
    readonly expectStream?: true;
    /** Subject delete markers (`Nats-Marker-Reason`) are acked at the source and counted, never published (default: relayed). */
    readonly deleteMarkers?: "drop";
    /**
     * Publishes chained by `Nats-Expected-Last-Sequence`: the destination never stores one after a
     * later one. Only for the destination stream's only writer. Off by default: the header is stored
     * with every message.
     */
    readonly order?: "strict";
  };
  /** Messages per pull request. */
  readonly batchSize: number;
  /** Max messages between receive and ack (also the consumer's MaxAckPending). */
  readonly inFlight: number;
  /**
   * Max payload and header bytes between receive and ack: past it the link lowers its consumer's
   * MaxAckPending to what it holds (the server stops delivering; a few pull batches on their way still
   * arrive) until half of it is acked.
   */
  readonly inFlightBytes: number;
  readonly ackWaitMs: number;
  /**
   * How the source cursor is acknowledged: `each` message (AckExplicit), or `cumulative` (AckAll: one
   * ack per batch covers every message up to it, sent only once all of them are finished).
   */
  readonly sourceAcks: "each" | "cumulative";
  readonly publishTimeoutMs: number;
  /** Header names removed before publishing (the JetStream control headers by default). */
  readonly stripHeaders: readonly string[];
  /** A message whose Relay-Path already has this many regions is not forwarded further. */
  readonly maxHops: number;
  /** Durable consumer name on the source stream. */
  readonly durableName: string;
  readonly guard?: GuardConfig;
  readonly badMessage: BadMessagePolicy;
  readonly onGap: "continue" | "resync" | "halt";
  readonly maxReplayAgeMs?: number;
  /** Messages waiting at the source and none delivered for this long, every connection healthy: the link is stalled and healed in steps. */
  readonly stallAfterMs: number;
  /** The link is split into `count` partitions by the number at subject token `token` (1-based). */
  readonly partitions?: { readonly count: number; readonly token: number };
  /** Set on one partition of a partitioned link (see config/partitions.ts). */
  readonly partition?: { readonly index: number; readonly count: number; readonly link: string };
  /** Where a new link starts, only while the destination holds no record of it (link/start-at.ts). */
  readonly startAt: StartAt;
  /** A cap on what the link pulls (link/rate-cap.ts): messages and/or bytes a second. Changes in place on a reload. */
  readonly maxRate?: MaxRate;
  /** The owner's continuous audit of what the link delivered (src/audit). */
  readonly audit: AuditConfig;
}

export interface AuditConfig {
  readonly enabled: boolean;
  /** A range is checked once all its source messages were acknowledged this long ago. */
  readonly afterMs: number;
  /** The whole retained source window is checked again this often (0: never). */
  readonly sweepEveryMs: number;
  readonly repair: "report" | "auto";
  /** Messages a second the audit reads at most. */
  readonly maxReadRate: number;
}

/** A link's rate cap: either or both, each > 0 (per second). A partitioned link's is split among its partitions. */
export interface MaxRate {
  readonly messages?: number;
  readonly bytes?: number;
}

/**
 * Where a link without a record starts: `earliest` (the first message the stream holds), `new` (the
 * next message stored), the first message stored at or after `time` (RFC 3339, compiled to an ISO
 * time in UTC), or source sequence `seq`.
 */
export type StartAt = "earliest" | "new" | { readonly time: string } | { readonly seq: number };

export interface RelayConfig {
  readonly regions: ReadonlyMap<string, RegionConfig>;
  readonly links: readonly LinkConfig[];
  readonly http: {
    readonly host: string;
    readonly port: number;
    /** Bearer token `/status` requires (and `/metrics` with `protectMetrics`); a secret. */
    readonly token?: string;
    readonly protectMetrics: boolean;
  };
  readonly log: {
    readonly level: "trace" | "debug" | "info" | "warn" | "error" | "fatal" | "silent";
    /** A catching-up or resyncing link logs its backlog and rate this often (0: never). */
    readonly progressIntervalMs: number;
  };
  readonly shutdownGraceMs: number;
  /**
   * The relays of a region form a group: each link has one owner at a time, held as a lease in a KV
   * bucket of the destination region (DESIGN §9).
   */
  readonly group: { readonly bucket: string; readonly leaseMs: number; readonly renewMs: number };
  /** Reloading the file while running (`SIGHUP` always reloads it): `watch` also reloads when it changes. */
  readonly reload: { readonly watch: boolean };
  /** The file's meshes (config/mesh.ts) and the names of the links each generated (they are in `links`). */
  readonly meshes?: readonly { readonly name: string; readonly links: readonly string[] }[];
}
