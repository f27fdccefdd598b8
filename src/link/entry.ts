import { HeaderBlock } from "../nats/header-block.js";
import type { Delivery } from "../nats/delivery.js";
import { WireHeaders } from "../nats/wire-headers.js";
import type { LinkConfig } from "../config/types.js";
import { RelayHeaders, REWRITTEN_HEADERS } from "./headers.js";
import type { NanosFormatter } from "./headers.js";
import type { MessageIdentity } from "./identity.js";
import { transformSubject } from "./identity.js";

/**
 * Where an entry is on the data path. `claim` → `ready` → `publishing` → `published` → `committing`
 * → `done`; a guard verdict of duplicate/stale/in-flight jumps straight to `done`.
 */
export type EntryState = "claim" | "ready" | "publishing" | "published" | "committing" | "done";

/** One source message (by stream sequence) travelling through a link's pipeline. */
export interface Entry {
  readonly seq: number;
  /** The ack subject of every delivery of this sequence seen while it was in the pipeline: all are acked at the end. */
  readonly replies: string[];
  readonly identity: MessageIdentity;
  /** Destination subject (after transform), or the dead-letter subject. */
  subject: string;
  readonly data: Uint8Array;
  readonly headers: HeaderBlock;
  /** Source publish time, ms since the epoch (replay age). */
  readonly sourceMs: number;
  state: EntryState;
  token?: string;
  /** Bumped on every publish attempt: a callback for an older attempt is ignored. */
  attempt: number;
  publishStartedAt: number;
  /** The PubAck said duplicate: the destination already had it (a broker-side correction). */
  brokerDuplicate?: boolean;
  /** Set when the entry goes to the dead-letter subject instead of the destination stream. */
  deadLetterReason?: string;
}

/**
 * Builds the outgoing headers: copy everything but the stripped and the rewritten headers, then stamp
 * identity, origin, path and source position (README "Headers on relayed messages").
 */
export interface EntryContext {
  readonly link: LinkConfig;
  /** Lower-cased header names not copied (see `stripSet`). */
  readonly strip: ReadonlySet<string>;
  readonly time: NanosFormatter;
}

export function buildHeaders(msg: Delivery, identity: MessageIdentity, ctx: EntryContext): HeaderBlock {
  const { link, strip } = ctx;
  const out = new HeaderBlock();
  const src = msg.headers;
  if (src instanceof WireHeaders) {
    out.appendLines(src.linesExcept(strip));
  } else if (src) {
    for (const [key, values] of src) {
      const lower = key.toLowerCase();
      if (strip.has(lower)) continue;
      for (const v of values) out.append(key, v);
    }
  }
  // The rewritten headers were skipped above (they are in `strip`), so append is a set here.
  out.append(RelayHeaders.MsgId, identity.id);
  out.append(RelayHeaders.Origin, identity.origin);
  out.append(RelayHeaders.Path, identity.path.join(","));
  out.append(RelayHeaders.Source, `${link.from.region} ${link.from.stream} ${msg.streamSequence}`);
  out.append(RelayHeaders.SourceTime, ctx.time.formatDigits(msg.timestampNanos));
  out.append(RelayHeaders.ExpectedStream, link.to.stream);
  return out;
}

/** Lower-cased names never copied from the source: the link's strip list plus the rewritten headers. */
export function stripSet(link: LinkConfig): ReadonlySet<string> {
  return new Set([...link.stripHeaders, ...REWRITTEN_HEADERS].map((h) => h.toLowerCase()));
}

export function newEntry(msg: Delivery, identity: MessageIdentity, ctx: EntryContext): Entry {
  return {
    seq: msg.streamSequence,
    replies: [msg.reply],
    identity,
    subject: transformSubject(msg.subject, ctx.link),
    data: msg.data,
    headers: buildHeaders(msg, identity, ctx),
    sourceMs: Number(msg.timestampNanos.slice(0, -6) || "0"),
    state: "claim",
    attempt: 0,
    publishStartedAt: 0,
  };
}

/** Re-targets an entry at the dead-letter subject, keeping its id so a re-park is deduplicated. */
export function toDeadLetter(entry: Entry, subject: string, linkName: string, reason: string): void {
  entry.subject = subject;
  entry.deadLetterReason = reason;
  entry.headers.set(RelayHeaders.DeadLetterReason, reason);
  entry.headers.set(RelayHeaders.DeadLetterLink, linkName);
  entry.headers.delete(RelayHeaders.ExpectedStream);
  entry.state = "ready";
}
