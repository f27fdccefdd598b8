/**
 * What the relay does with the JetStream headers of a source message that a destination on nats-server
 * 2.9–2.14 would act on or refuse: one table, and docs/data-path.md "Header policy" is this table (a unit
 * test compares them). Header names and error codes are nats-server's (server/stream.go, errors.json of
 * v2.11.0, v2.12.0 and v2.14.x). What server sourcing does with the same header is the yardstick: the
 * server strips `Nats-Expected-*` and `Nats-Batch-*` when it sources or mirrors a stream
 * (server/stream.go, processInboundSourceMsg), and lets a sourced `Nats-TTL`, `Nats-Incr` or
 * `Nats-Schedule` through unchecked; a relay's publish is a client publish, which is checked.
 */

/**
 * - `strip`: never copied, whatever the destination.
 * - `ttl`: copied when the destination stream allows per-message TTLs (`allow_msg_ttl`, 2.11+), else
 *   stripped and counted (`relay_headers_stripped_total{header="Nats-TTL"}`).
 * - `marker`: the message is a subject delete marker; relayed or dropped by the link's
 *   `to.deleteMarkers` (a dropped one is acked at the source and counted, `relay_delete_markers_dropped_total`).
 */
export type HeaderAction = "strip" | "ttl" | "marker";

export interface HeaderRule {
  /** The header's name, or a prefix ending in `*` (every header starting with it). */
  readonly header: string;
  /** The first nats-server release that acts on it. */
  readonly since: string;
  readonly action: HeaderAction;
  /** Why, for the docs. */
  readonly why: string;
}

export const HEADER_POLICY: readonly HeaderRule[] = [
  {
    header: "Nats-Expected-*",
    since: "2.2",
    action: "strip",
    why: "the destination would check the source publisher's expectations against itself and refuse; server sourcing strips them too",
  },
  {
    header: "Nats-Batch-*",
    since: "2.12",
    action: "strip",
    why: "`Nats-Batch-Id`, `-Sequence`, `-Commit` would join or break an atomic batch in the destination (a relayed message arrives alone); server sourcing and mirroring strip them",
  },
  {
    header: "Nats-TTL",
    since: "2.11",
    action: "ttl",
    why: "a destination without `allow_msg_ttl` refuses the message (err_code 10166); one with it expires the copy as the source expires the original",
  },
  {
    header: "Nats-Marker-Reason",
    since: "2.11",
    action: "marker",
    why: "the server writes a subject delete marker (`MaxAge`, with `Nats-TTL` and `Nats-Rollup: sub`) when a subject's last message ages out; in the destination it is an ordinary empty message",
  },
  {
    header: "Nats-Incr",
    since: "2.12",
    action: "strip",
    why: "a counter increment: a destination without `allow_msg_counter` refuses it (err_code 10168); the payload (`{\"val\":\"…\"}`) already holds the counter's total. Counter streams are refused as destinations",
  },
  {
    header: "Nats-Counter-Sources",
    since: "2.12",
    action: "strip",
    why: "the sources a counter stream summed: only a counter stream reads it",
  },
  {
    header: "Nats-Schedule",
    since: "2.12",
    action: "strip",
    why: "a message schedule: a destination without `allow_msg_schedules` refuses it (err_code 10188), one with it would fire the schedule a second time (the source's fired messages are relayed)",
  },
  {
    header: "Nats-Schedule-*",
    since: "2.12",
    action: "strip",
    why: "the schedule's TTL, time zone, target, source and rollup: read only with `Nats-Schedule`",
  },
];

/** `Nats-TTL`: kept only for a destination that allows per-message TTLs. */
export const TTL_HEADER = "Nats-TTL";
/** `Nats-Marker-Reason`: present on a subject delete marker the server wrote (2.11+). */
export const MARKER_HEADER = "Nats-Marker-Reason";

/** Exact names the policy always strips. */
export function policyStrippedNames(): string[] {
  return HEADER_POLICY.filter((r) => r.action === "strip" && !r.header.endsWith("*")).map((r) => r.header);
}

/** Prefixes (lower-cased, without the `*`) the policy always strips. */
export function policyStrippedPrefixes(): string[] {
  return HEADER_POLICY.filter((r) => r.action === "strip" && r.header.endsWith("*")).map((r) => r.header.slice(0, -1).toLowerCase());
}
