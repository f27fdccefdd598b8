/**
 * Every default of the config in one place: the values `compileConfig` fills in for what the file
 * leaves out, the default durable and dead-letter names, and the headers stripped from every message.
 * The validation's cross-checks read the same values (e.g. a link's default window).
 */
import { DEFAULT_STRIP_HEADERS } from "../protocol/headers.js";

/**
 * JetStream control headers removed from every relayed message before it is published: left in,
 * they would make the destination apply the source's expectations, rollups and TTLs. A link's
 * `stripHeaders` adds to this list; it cannot remove from it. The table lives with the data path
 * (src/protocol/headers.ts); it is re-exported here with the other defaults.
 */
export { DEFAULT_STRIP_HEADERS };

export const DEFAULTS = Object.freeze({
  batchSize: 500,
  /**
   * The cap of a link's self-sizing window (link-window.ts): it starts at two batches
   * within a region, at it across a WAN, and grows while the round trip limits the link. A message
   * holds its place in the window for a round trip and more (the delivery, the destination's PubAck,
   * the ack's way back): 8192 held a backlog across 300 ms to ~23,000 msgs/s in the profiler
   * (`PROFILE_WAN_ONE_WAY_MS=150 npm run bench:profile`), 16384 to ~40,000. inFlightBytes bounds the
   * memory whatever the message size.
   */
  inFlight: 16384,
  /**
   * The window of a link with a guard: each of its messages also waits for a claim and a commit
   * round trip, so the same window moves fewer messages a second (Little's law). Measured on the
   * bench (2 cores shared with Redis and both servers): 1024 → ~18k msgs/s, 2048 → ~22k; an
   * unguarded link is CPU-bound and gains nothing from a larger window, only memory.
   */
  guardedInFlight: 2048,
  /**
   * Bytes between receive and ack per link: the most native sourcing's flow control lets a source have
   * unacknowledged (32 MiB), and it fits the 512 MiB pod of deploy/kubernetes with the relay itself, a
   * few links and the clients' buffers beside it. 512-byte messages never reach it (16384 × 512 B is
   * 8 MiB); 4 KiB ones cap the window at 8192.
   */
  inFlightBytes: 32 * 1024 * 1024,
  ackWaitMs: 30_000,
  sourceAcks: "cumulative" as const,
  publishTimeoutMs: 5_000,
  /** A link whose source has messages for it but delivers none, for this long, is stalled. */
  stallAfterMs: 10_000,
  maxHops: 8,
  /** to.expectStream */
  expectStream: false,
  /** to.deleteMarkers: subject delete markers are relayed like any message (as server sourcing does). */
  deleteMarkers: "relay" as "relay" | "drop",
  /** to.order */
  order: "default" as const,
  onGap: "continue",
  idTtlMs: 3_600_000,
  /** guard.versions.expectedEntities: what a scope's version hashes are sized for (src/guard/layout.ts). */
  expectedEntities: 1_000_000,
  /** guard.redis.waitReplicas: replicas a commit waits for (0: none). */
  redisWaitReplicas: 0,
  /** guard.strict */
  guardStrict: false,
  /** guard.redis.waitTimeout: how long a commit waits for its replicas. */
  redisWaitTimeoutMs: 1_000,
  /** The guard's claim TTL is this many times the link's ack wait. */
  claimTtlAckWaitFactor: 2,
  httpHost: "127.0.0.1",
  httpPort: 9464,
  /** http.protectMetrics */
  protectMetrics: false,
  logLevel: "info",
  /** A catching-up or resyncing link logs its progress this often. */
  progressLogMs: 10_000,
  shutdownGraceMs: 30_000,
  leaseBucket: "relay_leases",
  leaseMs: 5_000,
  leaseRenewMs: 1_000,
  /** reload.watch */
  reloadWatch: false,
  /** Where a new link starts (only while the destination holds no record of it). */
  startAt: "earliest",
  /** links[].audit (link/audit): see docs/verify.md for why `report` is the default repair. */
  audit: { enabled: true, afterMs: 60_000, sweepEveryMs: 6 * 3_600_000, repair: "report", maxReadRate: 3_000 },
} as const);

/** `"relay-" + link name`. */
export function defaultDurableName(linkName: string): string {
  return `relay-${linkName}`;
}

/** `"relay.dlq." + link name`. */
export function defaultDeadLetterSubject(linkName: string): string {
  return `relay.dlq.${linkName}`;
}
