import type { RelayError } from "../errors.js";
import { HeaderBlock } from "../nats/header-block.js";
import { HeaderNames } from "../nats/header-names.js";
import type { Delivery } from "../nats/delivery.js";
import { WireHeaders } from "../nats/wire-headers.js";
import type { LinkConfig } from "../config/types.js";
import { createHash } from "node:crypto";
import { ALWAYS_STRIPPED, ALWAYS_STRIPPED_PREFIX, EXPECTED_STREAM, NanosFormatter, RelayHeaders, REWRITTEN_HEADERS } from "../protocol/headers.js";
import { policyStrippedNames, policyStrippedPrefixes, TTL_HEADER } from "../protocol/header-policy.js";
import { HeaderBytes } from "./header-bytes.js";
import type { MessageIdentity } from "./identity.js";
import type { KvVersion } from "../protocol/kv-version.js";
import { transformSubject } from "./identity.js";

/**
 * Where an entry is on the data path. `claim` → `ready` → `publishing` → `published` → `committing`
 * → `done`; a guard verdict of duplicate/stale/in-flight jumps straight to `done`.
 */
export type EntryState = "claim" | "ready" | "publishing" | "published" | "committing" | "done";

/** One source message (by stream sequence) travelling through a link's pipeline. */
export interface Entry {
  readonly seq: number;
  /**
   * The ack subject of the latest delivery of this sequence. The server acks by stream sequence, so the
   * latest delivery's subject acks every earlier one: a message redelivered many times costs nothing more.
   */
  reply: string;
  /** The consumer (delivery) sequence of that latest delivery. */
  dseq: number;
  /** When an in-progress ack (`+WPI`) was last sent for it (monotonic ms; 0: never). */
  workingSentAt: number;
  readonly identity: MessageIdentity;
  /** Destination subject (after transform), or the dead-letter subject. */
  subject: string;
  /** Replaced only by an oversized message's dead-letter record. */
  data: Uint8Array;
  headers: HeaderBlock;
  /** Source publish time, ms since the epoch (replay age). */
  readonly sourceMs: number;
  state: EntryState;
  token?: string;
  /** The guard's key for the id, from its claim (GuardItem.key): handed back with the commit. */
  guardKey?: string;
  /** Bumped on every publish attempt: a callback for an older attempt is ignored. */
  attempt: number;
  /** Publish attempts of it not answered yet (a PubAck, an error or a timeout each): see SentVersions. */
  unanswered: number;
  /**
   * The `attempt` a retry was last judged again at against the guard's committed versions (0: never):
   * a versioned message retried at another attempt is judged again before it is published.
   */
  judgedAttempt: number;
  publishStartedAt: number;
  /** The PubAck said duplicate: the destination already had it (a broker-side correction). */
  brokerDuplicate?: boolean;
  /** Set when the entry goes to the dead-letter subject instead of the destination stream. */
  deadLetterReason?: string;
  /**
   * The link halts with this error when the publish cursor reaches the entry (`onBadMessage: halt`):
   * everything before it is still relayed and acked; nothing after it is published.
   */
  haltWith?: RelayError;
  /**
   * Wall time (ms) of the first publish attempt, 0 before it. A retry later than the destination's
   * duplicate window after it must first look for the message in the destination (broker dedup
   * forgot it by then).
   */
  firstAttemptMs: number;
  /** The highest destination sequence the link knew of at the first attempt: a copy can only be above it. */
  destFloor: number;
  /** Where the destination holds it once stored (0 until then, and for what is never stored). */
  destSeq: number;
  /** When the pipeline took it (monotonic ms): in-progress acks for messages held long. */
  receivedAt: number;
  /** Bytes it holds (payload and headers, as received): the in-flight byte bound. */
  readonly heldBytes: number;
  /**
   * It carries a `Nats-TTL` header copied from the source: kept only if the stream it is published to
   * allows per-message TTLs (the header policy, protocol/header-policy.ts), else removed before the publish.
   */
  ttl: boolean;
  /** A KV link's write: its version (docs/kv.md), read at intake; undefined on other links. */
  kvVersion: KvVersion | undefined;
}

/**
 * What building a link's entries needs, made once per link (`entryContext`): the headers not copied,
 * the time formatter, and the constant parts of the headers every entry gets.
 */
export interface EntryContext {
  readonly link: LinkConfig;
  /** Header names not copied (see `strippedNames`). */
  readonly strip: HeaderNames;
  readonly time: NanosFormatter;
  /** `Relay-Source: <region> <stream> `: the sequence follows. */
  readonly sourcePrefix: string;
  /** `Relay-Link: <link>`: whose marker it is. */
  readonly linkLine: string;
  /** The origin and path lines of a message first published in the source region (the common case). */
  readonly firstHopLines: string;
  /** `Nats-Expected-Stream: <stream>` with `to.expectStream`, else empty. */
  readonly expectLine: string;
  /** The same parts encoded once: most blocks are written straight into bytes (header-bytes.ts). */
  readonly bytes: HeaderBytes;
}

/**
 * `keepTtl: false`: `Nats-TTL` is never copied (for a writer that does not know the destination's
 * settings); by default it is copied and the publish decides (Entry.ttl).
 */
export function entryContext(link: LinkConfig, opts: { readonly keepTtl?: boolean } = {}): EntryContext {
  const region = link.from.region;
  const parts = {
    sourcePrefix: `${RelayHeaders.Source}: ${region} ${link.from.stream} `,
    linkLine: `${RelayHeaders.Link}: ${link.name}\r\n`,
    firstHopLines: `${RelayHeaders.Origin}: ${region}\r\n${RelayHeaders.Path}: ${region}\r\n`,
    expectLine: link.to.expectStream ? `${EXPECTED_STREAM}: ${link.to.stream}\r\n` : "",
  };
  const strip = strippedNames(opts.keepTtl === false ? { stripHeaders: [...link.stripHeaders, TTL_HEADER] } : link);
  return { link, strip, time: new NanosFormatter(), ...parts, bytes: new HeaderBytes(parts) };
}

/**
 * Builds the outgoing headers: copy everything but the stripped and the rewritten headers, then stamp
 * identity, origin, path, source position and link (README "Headers on relayed messages"). Every value
 * is either the link's own (validated config, digits) or was a header value at the source, which the
 * server parsed line by line, so none can hold a CR or LF. Written straight into bytes when every part
 * is ASCII (header-bytes.ts), else built as text and encoded: the same bytes either way.
 */
export function buildHeaders(msg: Delivery, identity: MessageIdentity, ctx: EntryContext): HeaderBlock {
  return headersWith(copiedLines(msg, ctx.strip), msg, identity, ctx);
}

function headersWith(copied: string, msg: Delivery, identity: MessageIdentity, ctx: EntryContext): HeaderBlock {
  // The rewritten headers were skipped above (they are in `strip`), so these are sets.
  const hop = isFirstHop(identity, ctx.link.from.region) ? undefined : `${RelayHeaders.Origin}: ${identity.origin}\r\n${RelayHeaders.Path}: ${identity.path.join(",")}\r\n`;
  const bytes = ctx.bytes.write(copied, identity.id, hop, msg.streamSequence, msg.timestampNanos, ctx.time);
  return bytes ? HeaderBlock.fromWire(bytes) : new HeaderBlock(headerLines(copied, identity.id, hop, msg, ctx));
}

/** The header lines `buildHeaders` writes, as text (`Key: value\r\n` each). Exported for tests. */
export function headerLines(copied: string, id: string, hop: string | undefined, msg: Pick<Delivery, "streamSequence" | "timestampNanos">, ctx: EntryContext): string {
  return `${copied}${RelayHeaders.MsgId}: ${id}\r\n${hop ?? ctx.firstHopLines}${ctx.sourcePrefix}${msg.streamSequence}\r\n${RelayHeaders.SourceTime}: ${ctx.time.formatDigits(msg.timestampNanos)}\r\n${ctx.linkLine}${ctx.expectLine}`;
}

/** The source's header lines that are copied (not stripped, not rewritten), in wire form. */
function copiedLines(msg: Pick<Delivery, "headers">, strip: HeaderNames): string {
  const src = msg.headers;
  if (src instanceof WireHeaders) return src.linesExcept(strip);
  if (!src) return "";
  const out = new HeaderBlock();
  for (const [key, values] of src) {
    if (strip.has(key)) continue;
    for (const v of values) out.append(key, v);
  }
  return out.lines;
}

const isFirstHop = (identity: MessageIdentity, region: string): boolean =>
  identity.origin === region && identity.path.length === 1 && identity.path[0] === region;

/**
 * Names never copied from the source: the link's strip list, the rewritten headers, every
 * `Nats-Expected-*`, and what the header policy strips always (`Nats-Batch-*`, counters, schedules).
 */
export function strippedNames(link: Pick<LinkConfig, "stripHeaders">): HeaderNames {
  return new HeaderNames([...link.stripHeaders, ...ALWAYS_STRIPPED, ...policyStrippedNames(), ...REWRITTEN_HEADERS], [ALWAYS_STRIPPED_PREFIX, ...policyStrippedPrefixes()]);
}

/**
 * Whether copied header lines hold `Nats-TTL`, as the server reads it: the exact name at the start of
 * a line, followed by the colon (nats-server's getHeader is case-sensitive).
 */
export function carriesTtl(copied: string): boolean {
  return copied !== "" && (copied.startsWith(TTL_LINE) || copied.includes(`\r\n${TTL_LINE}`));
}
const TTL_LINE = `${TTL_HEADER}:`;

export function newEntry(msg: Delivery, identity: MessageIdentity, ctx: EntryContext): Entry {
  const copied = copiedLines(msg, ctx.strip);
  const headers = headersWith(copied, msg, identity, ctx);
  return {
    seq: msg.streamSequence,
    reply: msg.reply,
    dseq: msg.consumerSequence,
    workingSentAt: 0,
    identity,
    subject: transformSubject(msg.subject, ctx.link),
    data: msg.data,
    headers,
    sourceMs: millisOf(msg.timestampNanos),
    state: "claim",
    // Every field set from the start (also those set later, or never): one object shape for all entries.
    token: undefined,
    guardKey: undefined,
    brokerDuplicate: false,
    deadLetterReason: undefined,
    haltWith: undefined,
    attempt: 0,
    unanswered: 0,
    judgedAttempt: 0,
    publishStartedAt: 0,
    firstAttemptMs: 0,
    destFloor: 0,
    destSeq: 0,
    receivedAt: performance.now(),
    heldBytes: msg.data.length + headers.encode().length, // encoded once: the publish reuses it
    ttl: carriesTtl(copied),
    kvVersion: undefined,
  };
}

/** Milliseconds since the epoch from the decimal digits of nanoseconds (0 for fewer than seven), without slicing them. */
function millisOf(nanos: string): number {
  let ms = 0;
  for (let i = 0; i < nanos.length - 6; i++) ms = ms * 10 + nanos.charCodeAt(i) - 48;
  return ms;
}

/** Bytes the destination counts against `max_payload` and `max_msg_size`: headers and payload. */
export function wireSize(entry: Entry): number {
  return entry.headers.encode().length + entry.data.length;
}

/** Re-targets an entry at the dead-letter subject, keeping its id so a re-park is deduplicated. */
export function toDeadLetter(entry: Entry, subject: string, linkName: string, reason: string): void {
  entry.subject = subject;
  entry.deadLetterReason = reason;
  entry.headers.delete(EXPECTED_STREAM); // `to.expectStream` names the destination, not the dead-letter stream
  entry.headers.set(RelayHeaders.DeadLetterReason, reason);
  entry.headers.set(RelayHeaders.DeadLetterLink, linkName);
  entry.state = "ready";
}

/**
 * A dead-letter record for a message too large for the destination: it must fit itself, so it keeps
 * the relay's identity and source headers, the reason, the size and a SHA-256 of the payload, and no
 * payload (the message stays readable at the source by its `Relay-Source` position until retention).
 */
export function toOversizedDeadLetter(entry: Entry, subject: string, linkName: string, reason: string): void {
  const digest = createHash("sha256").update(entry.data).digest("hex");
  const size = entry.data.length;
  const keep = [RelayHeaders.MsgId, RelayHeaders.Origin, RelayHeaders.Path, RelayHeaders.Source, RelayHeaders.SourceTime, RelayHeaders.Link];
  const record = new HeaderBlock();
  for (const key of keep) {
    const value = entry.headers.get(key);
    if (value !== undefined) record.append(key, value);
  }
  record.append(RelayHeaders.DeadLetterSize, String(size));
  record.append(RelayHeaders.DeadLetterDigest, `sha-256=${digest}`);
  entry.headers = record;
  entry.ttl = false;
  entry.data = new Uint8Array(0);
  toDeadLetter(entry, subject, linkName, reason);
}
