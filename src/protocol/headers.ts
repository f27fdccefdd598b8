/**
 * Every header the relay reads or writes. The README's header table is this table.
 */
export const RelayHeaders = {
  /** Message identity, kept across hops; the destination's broker dedup key. */
  MsgId: "Nats-Msg-Id",
  /** Region where the message was first published; set on the first hop, kept after. */
  Origin: "Relay-Origin",
  /** Regions the message was stored in before this one, comma-separated. */
  Path: "Relay-Path",
  /** `<region> <stream> <seq>` of the immediate source message: the progress marker downstream. */
  Source: "Relay-Source",
  /** Publish time of the immediate source message, RFC 3339 with nanoseconds. */
  SourceTime: "Relay-Source-Time",
  /**
   * The link (or partition, `<link>/p<i>`) that relayed the message: whose progress its Relay-Source
   * marker is, when two links from one source write overlapping subjects into one destination.
   */
  Link: "Relay-Link",
  /** Set on messages sent by a full resync: the resync's id. */
  Snapshot: "Relay-Snapshot",
  /**
   * `true` on messages `jetstream-relay repair` put back into the destination: appended after later
   * messages (out of source order), a late correction.
   */
  Repair: "Relay-Repair",
  /** On dead-lettered messages: why, and which link. */
  DeadLetterReason: "Relay-Dead-Letter-Reason",
  DeadLetterLink: "Relay-Dead-Letter-Link",
  /** On a dead-letter record of a message too large to park whole: its size and SHA-256. */
  DeadLetterSize: "Relay-Dead-Letter-Size",
  DeadLetterDigest: "Relay-Dead-Letter-Digest",
} as const;

/** Set by the relay itself only with `to.expectStream` (then stored with every message). */
export const EXPECTED_STREAM = "Nats-Expected-Stream";

/**
 * Headers JetStream would act on in the destination: stripped by default (config adds more). The
 * headers of newer servers (`Nats-TTL`, `Nats-Batch-*`, counters, schedules, delete markers) follow the
 * header policy (header-policy.ts); a link that lists `Nats-TTL` in `stripHeaders` strips it always.
 */
export const DEFAULT_STRIP_HEADERS: readonly string[] = [
  "Nats-Expected-Stream",
  "Nats-Expected-Last-Msg-Id",
  "Nats-Expected-Last-Sequence",
  "Nats-Expected-Last-Subject-Sequence",
  "Nats-Rollup",
  "Nats-Stream-Source",
];

/**
 * Never copied from the source, whatever the link's strip list says: JetStream keeps these headers
 * with the message, and a mirror or source of the destination stream under another name would later
 * act on them (nats-server issues 5240, 5865). The relay checks stream binding itself (link start, the
 * destination's advisories and every PubAck's `stream`); it sets `Nats-Expected-Stream` only when the
 * link asks for it (`to.expectStream`).
 */
export const ALWAYS_STRIPPED: readonly string[] = [
  "Nats-Expected-Stream",
  "Nats-Expected-Last-Msg-Id",
  "Nats-Expected-Last-Sequence",
  "Nats-Expected-Last-Subject-Sequence",
  "Nats-Expected-Last-Subject-Sequence-Subject",
];

/** Lower-cased: every `Nats-Expected-*` header, including ones newer servers add, is never copied. */
export const ALWAYS_STRIPPED_PREFIX = "nats-expected-";

/** Relay headers that are rewritten on every hop rather than copied. */
export const REWRITTEN_HEADERS: readonly string[] = [
  RelayHeaders.MsgId,
  RelayHeaders.Origin,
  RelayHeaders.Path,
  RelayHeaders.Source,
  RelayHeaders.SourceTime,
  RelayHeaders.Link,
];

/**
 * RFC 3339 with nanosecond precision from a Unix time in nanoseconds. One instance per link: it is
 * called for every relayed message, so the date part is cached per second.
 */
export class NanosFormatter {
  private second = -1;
  private prefix = "";

  format(nanos: bigint): string {
    return this.formatDigits(nanos.toString());
  }

  /** The same from the decimal digits of the nanoseconds, as a JetStream ack subject carries them. */
  formatDigits(nanos: string): string {
    const digits = nanos.padStart(10, "0");
    return `${this.secondOf(digits)}.${digits.slice(-9)}Z`;
  }

  /**
   * The date and time to the second (`2026-11-30T00:00:00`) of the nanoseconds in `digits` (at least
   * ten digits), cached while the second is the same: read without slicing the digits.
   */
  secondOf(digits: string): string {
    let second = 0;
    for (let i = 0; i < digits.length - 9; i++) second = second * 10 + digits.charCodeAt(i) - 48;
    if (second !== this.second) {
      this.prefix = new Date(second * 1000).toISOString().slice(0, 19);
      this.second = second;
    }
    return this.prefix;
  }
}

export function formatNanos(nanos: bigint): string {
  return new NanosFormatter().format(nanos);
}

/** Inverse of formatNanos; returns undefined for anything unparseable. */
export function parseNanos(text: string): bigint | undefined {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/.exec(text);
  if (!m || !m[1]) return undefined;
  const seconds = Date.parse(`${m[1]}Z`);
  if (Number.isNaN(seconds)) return undefined;
  return BigInt(seconds) * 1_000_000n + BigInt((m[2] ?? "").padEnd(9, "0"));
}
