import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { BucketHistogram } from "./bucket-histogram.js";

/** Every state a link can be in (DESIGN §5). One gauge series per state, 1 for the current one. */
export const LINK_STATES = [
  "starting",
  "catching-up",
  "live",
  "recovering",
  "paused",
  "resyncing",
  "stopped",
  "failed",
  /** Another relay of the group owns the link (its lease): this one waits to take over. */
  "standby",
  /** The source has messages for the link and delivers none (a silent path, a stuck consumer): being healed. */
  "stalled",
] as const;
export type LinkState = (typeof LINK_STATES)[number];

export const MESSAGE_OUTCOMES = ["relayed", "duplicate", "stale", "loop", "dead_lettered"] as const;
export type MessageOutcome = (typeof MESSAGE_OUTCOMES)[number];

/**
 * `kv_conflict`: a KV link's remote write older than what the destination bucket holds for its key
 * (last writer wins): expected wherever two regions write one key, so the correction-rate alerts leave
 * it out (deploy/prometheus/alerts.yml); `relay_kv_conflicts_total` counts it by outcome.
 */
export const CORRECTION_KINDS = ["broker_duplicate", "guard_duplicate", "stale_version", "kv_conflict"] as const;
export type CorrectionKind = (typeof CORRECTION_KINDS)[number];

/** 1 ms … 1 day, roughly ×4 apart: replay age spans live traffic and day-long outages. */
export const REPLAY_AGE_BUCKETS = [
  0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400,
];
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * All relay metrics, registered on a Registry owned by one relay (no global registry: several relays
 * may run in one process). Labels are low-cardinality only: never subjects or message ids.
 */
export function createMetrics(registry: Registry = new Registry(), opts: { defaultMetrics?: boolean } = {}) {
  if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: "relay_process_" });
  const registers = [registry];
  return {
    registry,
    /** Messages every link of the relay has finished (any outcome), for in-process readers (lifecycle/heap-growth.ts): not exported. */
    load: { finished: 0 },
    messages: new Counter({
      name: "relay_messages_total",
      help: "Messages that left the link's pipeline, by outcome (relayed|duplicate|stale|loop|dead_lettered)",
      labelNames: ["link", "outcome"] as const,
      registers,
    }),
    corrections: new Counter({
      name: "relay_corrections_total",
      help: "Duplicates and stale versions suppressed, by kind (broker_duplicate|guard_duplicate|stale_version|kv_conflict: a KV link's remote write older than the key's latest in the destination bucket, left out of the correction-rate alerts)",
      labelNames: ["link", "kind"] as const,
      registers,
    }),
    replayAge: new BucketHistogram({
      name: "relay_replay_age_seconds",
      help: "now - source publish time of every relayed message",
      labelNames: ["link"] as const,
      buckets: REPLAY_AGE_BUCKETS,
      registers,
    }),
    sourceClockOffset: new Gauge({
      name: "relay_source_clock_offset_seconds",
      help: "This relay's clock minus the source region's, as measured for backlog ages (positive: the relay runs ahead); set once measured, on servers older than 2.10",
      labelNames: ["link"] as const,
      registers,
    }),
    backlogAge: new Gauge({
      name: "relay_backlog_age_seconds",
      help: "Age of the oldest source message not yet relayed (0 when caught up)",
      labelNames: ["link"] as const,
      registers,
    }),
    backlogMessages: new Gauge({
      name: "relay_backlog_messages",
      help: "Source messages not yet relayed: consumer pending + ack pending",
      labelNames: ["link"] as const,
      registers,
    }),
    publishDuration: new BucketHistogram({
      name: "relay_publish_duration_seconds",
      help: "Destination publish to PubAck",
      labelNames: ["link"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    guardDuration: new Histogram({
      name: "relay_guard_duration_seconds",
      help: "One guard round trip (a claim or a commit batch)",
      labelNames: ["link", "op"] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    pullWindow: new Gauge({
      name: "relay_pull_window_messages",
      help: "The link's pull window: its source consumer's MaxAckPending, sized to the round trip and the rate (at most this many delivered and not acked)",
      labelNames: ["link"] as const,
      registers,
    }),
    pullWindowUpdateFailures: new Counter({
      name: "relay_pull_window_update_failures_total",
      help: "MaxAckPending updates of the link's source consumer the server refused or did not answer (each is retried with backoff until the server has the window)",
      labelNames: ["link"] as const,
      registers,
    }),
    pullWindowProbes: new Counter({
      name: "relay_pull_window_probes_total",
      help: "Larger windows tried while the relay held most of its window with a backlog waiting (outcome: started; kept, it moved more; undone, it did not)",
      labelNames: ["link", "outcome"] as const,
      registers,
    }),
    windowLimit: new Gauge({
      name: "relay_window_limit",
      help: "1 for what holds the link's pull window where it is now (rtt, bytes cap, messages cap, destination, relay, idle, rate cap), 0 for the others",
      labelNames: ["link", "limit"] as const,
      registers,
    }),
    sourceRtt: new Gauge({
      name: "relay_source_rtt_seconds",
      help: "The round trip to the source server the link reads from, measured every 5 s",
      labelNames: ["link"] as const,
      registers,
    }),
    inFlightBytes: new Gauge({
      name: "relay_inflight_bytes",
      help: "Payload and header bytes the link holds between receive and ack",
      labelNames: ["link"] as const,
      registers,
    }),
    reordered: new Counter({
      name: "relay_reordered_total",
      help: "Messages the destination stored after a message that comes later in source order (a publish failed while later ones in flight were stored)",
      labelNames: ["link"] as const,
      registers,
    }),
    headersStripped: new Counter({
      name: "relay_headers_stripped_total",
      help: "Source headers the header policy removed because the destination would refuse them (Nats-TTL for a stream without allow_msg_ttl, and from every dead-letter record)",
      labelNames: ["link", "header"] as const,
      registers,
    }),
    deleteMarkersDropped: new Counter({
      name: "relay_delete_markers_dropped_total",
      help: "Subject delete markers (Nats-Marker-Reason) acked at the source and not published, by the link's to.deleteMarkers: drop",
      labelNames: ["link"] as const,
      registers,
    }),
    publishBackpressure: new Counter({
      name: "relay_publish_backpressure_total",
      help: "Publishes the destination answered with 429 (JSStreamTooManyRequests, err_code 10167: its ingest queue is full): retried after a backoff, the pull window shrinks; never dropped",
      labelNames: ["link"] as const,
      registers,
    }),
    orderRejections: new Counter({
      name: "relay_order_rejections_total",
      help: "Publishes the destination refused for their Nats-Expected-Last-Sequence (to.order: strict): an earlier publish was not stored, or another writer moved the stream on; the link rolled back and resumed from the destination's last sequence",
      labelNames: ["link"] as const,
      registers,
    }),
    kvConflicts: new Counter({
      name: "relay_kv_conflicts_total",
      help: "KV link writes that met a newer write of their key in the destination bucket, by outcome: remote_older (the remote write was older than what the bucket holds: not applied, acked as a kv_conflict correction), local_write_between (a write landed on the key between the relay's read and its publish: the publish was refused by its expected last subject sequence and decided again)",
      labelNames: ["link", "outcome"] as const,
      registers,
    }),
    kvSuperseded: new Counter({
      name: "relay_kv_superseded_total",
      help: "KV link writes the source bucket removed before the link relayed them (superseded by a newer write of the key past the bucket's history, a purge's rollup, or expired): a bucket's state is each key's latest write, which is relayed, so these are not gaps",
      labelNames: ["link"] as const,
      registers,
    }),
    staleRetries: new Counter({
      name: "relay_stale_retries_total",
      help: "Retried publishes dropped as stale versions when judged again (a newer version of the entity was sent to the destination or committed in the guard after the first attempt failed); also counted as stale_version corrections",
      labelNames: ["link"] as const,
      registers,
    }),
    destinationChanges: new Counter({
      name: "relay_destination_changes_total",
      help: "Changes to the link's destination stream seen while it runs, by kind (created|updated|deleted|other_created|reconnected|restarted): each holds publishing until the stream is read again",
      labelNames: ["link", "kind"] as const,
      registers,
    }),
    idCollisions: new Counter({
      name: "relay_id_collisions_total",
      help: "Messages not stored because the destination holds a different message under the same Nats-Msg-Id",
      labelNames: ["link"] as const,
      registers,
    }),
    held: new Counter({
      name: "relay_claims_held_total",
      help: "Messages whose guard claim another owner still held: the pipeline waited for it rather than letting newer messages pass",
      labelNames: ["link"] as const,
      registers,
    }),
    sourceAcks: new Counter({
      name: "relay_source_acks_total",
      help: "Acks sent to the source consumer: one per message (sourceAcks: each), or one per flushed run of finished messages (cumulative)",
      labelNames: ["link"] as const,
      registers,
    }),
    skipsReadBack: new Counter({
      name: "relay_source_skips_read_back_total",
      help: "Source messages the link's consumer jumped over while the stream still held them (a subject purge or rollup on a nats-server before 2.10.11 moves consumers past other subjects' messages): read back from the source and relayed, in source order",
      labelNames: ["link"] as const,
      registers,
    }),
    gapMessages: new Counter({
      name: "relay_gap_messages_total",
      help: "Source messages deleted (by retention, a delete or a purge) before the link relayed them",
      labelNames: ["link"] as const,
      registers,
    }),
    linkStalls: new Counter({
      name: "relay_link_stalls_total",
      help: "Healing steps taken for a stalled link (the source has messages for it and delivers none): pull (a new pull), consumer (re-created from the destination's record), reconnect (a new connection to the source region)",
      labelNames: ["link", "step"] as const,
      registers,
    }),
    checkpoints: new Counter({
      name: "relay_link_checkpoints_total",
      help: "Checkpoints of a link's position (source ack floor, destination seq) its owner wrote to the group bucket",
      labelNames: ["link"] as const,
      registers,
    }),
    auditChecked: new Counter({
      name: "relay_audit_checked_total",
      help: "Source sequences a link's audit judged (each once after it settled, again in each sweep)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditMissing: new Counter({
      name: "relay_audit_missing_total",
      help: "Source messages the link should have delivered that the audit found in neither the destination nor the dead-letter records (a loss; logged with source seq and id)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditExtra: new Counter({
      name: "relay_audit_extra_total",
      help: "Copies of a source message the audit found in the destination beyond the first (duplicates)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditReordered: new Counter({
      name: "relay_audit_reordered_total",
      help: "Copies the audit found stored after a copy of a later source message of the link (or partition)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditBackwards: new Counter({
      name: "relay_audit_backwards_total",
      help: "Copies the audit found carrying an older entity version than the copy of the same entity before them (guard.versions)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditExpected: new Counter({
      name: "relay_audit_expected_total",
      help: "Source messages with no copy that the audit found expected, by kind: not_forwarded (loop, max hops, direct route), dead_lettered, superseded (a newer version was applied), duplicate_id (another copy holds its id), bad (not relayable, no dead-letter record), not_in_source (gone from the source or not the link's subject)",
      labelNames: ["link", "kind"] as const,
      registers,
    }),
    auditRepaired: new Counter({
      name: "relay_audit_repaired_total",
      help: "Missing messages the audit put back (audit.repair: auto), through the guard, with Relay-Repair: true",
      labelNames: ["link"] as const,
      registers,
    }),
    auditPasses: new Counter({
      name: "relay_audit_passes_total",
      help: "Audit passes, by kind (range: a settled range once; sweep: the retained window again) and outcome (clean, findings, failed)",
      labelNames: ["link", "kind", "outcome"] as const,
      registers,
    }),
    auditLag: new Gauge({
      name: "relay_audit_lag_seconds",
      help: "How far the audit is behind the newest settled range of the link (0: caught up)",
      labelNames: ["link"] as const,
      registers,
    }),
    auditCoverage: new Gauge({
      name: "relay_audit_coverage_ratio",
      help: "Share of the last audited range the audit checked (1: all; less when it skipped ahead to keep within audit.maxReadRate)",
      labelNames: ["link"] as const,
      registers,
    }),
    cursorPlacements: new Counter({
      name: "relay_cursor_placements_total",
      help: "New source consumers of a link whose consumer was gone, by what placed them: marker (the destination's record), checkpoint, heal (the deleted consumer's ack floor), start_at (no record), explicit (an operator's link start-at), unknown (halted: POSITION_UNKNOWN)",
      labelNames: ["link", "from"] as const,
      registers,
    }),
    resyncs: new Counter({
      name: "relay_resyncs_total",
      help: "Full resyncs started, by reason",
      labelNames: ["link", "reason"] as const,
      registers,
    }),
    writesDiscarded: new Counter({
      name: "relay_lapsed_writes_discarded_total",
      help: "Times a connection's unsent bytes were discarded (and it reconnected) because this link's lease lapsed between issuing a publish or ack and writing it",
      labelNames: ["link"] as const,
      registers,
    }),
    resyncsAbandoned: new Counter({
      name: "relay_resyncs_abandoned_total",
      help: "Resyncs cut short because the link lease was lost: nothing of them was published late, and the cursor was not moved",
      labelNames: ["link", "reason"] as const,
      registers,
    }),
    errors: new Counter({
      name: "relay_errors_total",
      help: "Errors by stable code (see docs/operations.md: Error codes)",
      labelNames: ["link", "code"] as const,
      registers,
    }),
    recoveries: new Counter({
      name: "relay_recoveries_total",
      help: "Recovery episodes (a side disconnected or the link paused, until caught up again)",
      labelNames: ["link"] as const,
      registers,
    }),
    recoveryDuration: new Histogram({
      name: "relay_recovery_seconds",
      help: "Duration of a recovery episode, from disconnect to caught up",
      labelNames: ["link"] as const,
      buckets: REPLAY_AGE_BUCKETS,
      registers,
    }),
    linkState: new Gauge({
      name: "relay_link_state",
      help: "1 for the link's current state, 0 for the others",
      labelNames: ["link", "state"] as const,
      registers,
    }),
    linkUp: new Gauge({
      name: "relay_link_up",
      help: "1 when both sides of the link are connected and the link moves messages",
      labelNames: ["link"] as const,
      registers,
    }),
    linkOwner: new Gauge({
      name: "relay_link_owner",
      help: "1 while this relay holds the link's lease (it consumes, publishes and acks for it), else 0",
      labelNames: ["link"] as const,
      registers,
    }),
    linkPaused: new Gauge({
      name: "relay_link_paused",
      help: "1 while an operator has paused the link (jetstream-relay link pause; the group bucket's control key, honoured by every relay of the group), else 0",
      labelNames: ["link"] as const,
      registers,
    }),
    leaseTransitions: new Counter({
      name: "relay_lease_transitions_total",
      help: "Changes of a link's ownership on this relay, by reason (acquired|renewed-late|lost|released|handed-over)",
      labelNames: ["link", "reason"] as const,
      registers,
    }),
    leaseHoldOffs: new Counter({
      name: "relay_lease_holdoffs_total",
      help: "Times a link's lease took no key for a while because an owner of a deleted group bucket may still act, by reason: recreated_bucket (this relay saw the bucket re-created) or young_bucket (first seen younger than group.lease)",
      labelNames: ["link", "reason"] as const,
      registers,
    }),
    guardUnsafe: new Gauge({
      name: "relay_guard_unsafe",
      help: "1 per reason the link's guard Redis is unsafe to rely on (no_aof, eviction, replication), 0 otherwise; checked at start, after reconnects and every minute",
      labelNames: ["link", "reason"] as const,
      registers,
    }),
    guardStateLost: new Gauge({
      name: "relay_guard_state_lost",
      help: "1 while the link is paused because its guard lost its memory (GUARD_STATE_LOST: the scope marker is gone), until an operator resumes or resyncs it",
      labelNames: ["link"] as const,
      registers,
    }),
    groupMembers: new Gauge({
      name: "relay_group_members",
      help: "Live relays in this relay's region group, as this relay sees them (0: it cannot reach the group bucket)",
      registers,
    }),
    groupEvictions: new Counter({
      name: "relay_group_evictions_total",
      help: "Sessions of other members this relay ended (their member key unchanged for their lease, deleted by CAS) to take the leases they held in member mode",
      registers,
    }),
    groupSessionEnds: new Counter({
      name: "relay_group_session_ends_total",
      help: "This relay's own session ended by another write of its member key (another member evicted it, or the key or bucket is gone): the leases it held in member mode were lost",
      registers,
    }),
    groupSessionsOver: new Counter({
      name: "relay_group_sessions_over_total",
      help: "Sessions of other members this relay judged over without evicting them, by proof (new_session: the member began another; ended_marker: its delete marker names the session ended, by another member's eviction or its own stop; key_deleted|key_written|key_absent: its member key deleted, written by another or gone, and seen so for the member's whole lease)",
      labelNames: ["proof"] as const,
      registers,
    }),
    groupBucketFailures: new Counter({
      name: "relay_group_bucket_failures_total",
      help: "Failed requests of this relay's group membership to the group bucket, by kind (transient: an election of its stream or a timeout, retried while the session keeps its deadline; gone: stream not found, the bucket is opened again)",
      labelNames: ["kind"] as const,
      registers,
    }),
    groupSettingsMismatch: new Gauge({
      name: "relay_group_settings_mismatch",
      help: "Live members of this relay's group whose group.lease or group.renew differ from this relay's (each lease is judged by the duration its owner stored; 0 once a rolling restart is done)",
      registers,
    }),
    guardBuckets: new Gauge({
      name: "relay_guard_buckets",
      help: "Buckets of the guard's seen-set a claim reads per new id (its scope's live generations): 2 at a steady rate, 3 or more for an idTtl after the rate grew; Redis's CPU per id follows it",
      labelNames: ["link"] as const,
      registers,
    }),
    guardFenced: new Gauge({
      name: "relay_guard_fenced",
      help: "1 while the guard refuses the lease revision this relay holds the link under (LEASE_FENCED although the lease is valid): the link commits nothing, is paused and not ready",
      labelNames: ["link"] as const,
      registers,
    }),
    connectionUp: new Gauge({
      name: "relay_connection_up",
      help: "1 while the relay's connection is connected, 0 while it connects or reconnects; role local (its own region: publishes), remote (a source region), ownership (its own region: leases and membership only)",
      labelNames: ["region", "role"] as const,
      registers,
    }),
    configReloads: zeroed(
      new Counter({
        name: "relay_config_reloads_total",
        help: "Config reloads (SIGHUP or file watch), by result: success, partial (applied, but some settings need a restart), failure (nothing changed)",
        labelNames: ["result"] as const,
        registers,
      }),
      RELOAD_RESULTS,
    ),
    configInfo: new Gauge({
      name: "relay_config_info",
      help: "1, labelled with the hash of the config the relay last loaded (as /status shows it)",
      labelNames: ["hash"] as const,
      registers,
    }),
    configLoaded: new Gauge({
      name: "relay_config_loaded_timestamp_seconds",
      help: "When the relay last loaded its config (at start, or a successful reload), in seconds since the epoch",
      registers,
    }),
    rateCappedSeconds: new Counter({
      name: "relay_link_rate_capped_seconds_total",
      help: "Time the link spent held by its rate cap (maxRate): deliveries waiting for the cap's tokens",
      labelNames: ["link"] as const,
      registers,
    }),
    maxRate: new Gauge({
      name: "relay_link_max_rate",
      help: "The link's rate cap (maxRate) per second, by unit (messages|bytes); no series for a unit without a cap",
      labelNames: ["link", "unit"] as const,
      registers,
    }),
  };
}

export const RELOAD_RESULTS = ["success", "partial", "failure"] as const;
export type ReloadResult = (typeof RELOAD_RESULTS)[number];

/** Every result's series from the start (at 0), so an alert on failures has a series to compare with. */
function zeroed<T extends Counter<"result">>(counter: T, results: readonly string[]): T {
  for (const result of results) counter.inc({ result }, 0);
  return counter;
}

export type RelayMetrics = ReturnType<typeof createMetrics>;
