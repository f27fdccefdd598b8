import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerMessages, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { ErrorCodes, RelayError } from "../errors.js";
import { parseNanos, RelayHeaders } from "../protocol/headers.js";
import { classifyJsError } from "./durable-consumer.js";
import { patternMatches } from "../protocol/subjects.js";
import { settleOnce } from "../lifecycle/settle-once.js";

/** A link's source, as its Relay-Source markers in a destination stream name it. */
export interface SourceRef {
  readonly region: string;
  readonly stream: string;
  /**
   * Creation time of the current source stream incarnation, ms since epoch; markers whose Relay-Source-Time
   * is earlier belong to a deleted-and-recreated older incarnation and are ignored.
   */
  readonly createdMs?: number;
  /**
   * Destination subject patterns of the link's messages, when the link reads only part of the source
   * stream (a filter, a partition): a marker on another subject belongs to another link or partition
   * reading the same source stream, whose progress says nothing about this one's.
   */
  readonly subjects?: readonly string[];
  /**
   * The link (or partition) whose markers these are: a marker whose Relay-Link names another link is
   * never this one's, whatever its subject (two links from one source may write overlapping subjects).
   * A marker without Relay-Link (stored by a relay from before the header) counts by source and
   * subjects as above; within one chunk, markers naming the link win over such unnamed ones.
   */
  readonly link?: string;
}

/** Where to look: the destination stream, in `domain` when the region has one. */
export interface DestinationOptions {
  readonly stream: string;
  readonly domain?: string;
  readonly source: SourceRef;
  /** Rejects the call with the signal's reason as soon as it aborts. */
  readonly signal?: AbortSignal;
}

/** What lastStoredSourceSeq found. */
export interface LastStored {
  /** Highest source seq of the link in the newest chunk holding any of its markers. */
  readonly sourceSeq: number | undefined;
  /** The destination seq holding that marker. */
  readonly destSeq: number | undefined;
  /** Destination messages read. */
  readonly scanned: number;
  /**
   * True when the answer is certain: a marker was found, or the read covered the stream (down to its
   * first sequence, or to `downTo`). False when `maxScan` ran out first: "none found" is then not "none".
   */
  readonly complete: boolean;
}

const FIRST_CHUNK = 256;
const MAX_CHUNK = 4_096;
/** Without a message for this long, ask the stream whether anything is left in the range. */
const QUIET_MS = 500;
/** Without a message for this long while the stream says more is stored in the range, give up. */
const READ_TIMEOUT_MS = 10_000;

/**
 * `<region> <stream> <seq>` as the relay writes Relay-Source: three non-empty tokens, single spaces, and a
 * stream sequence (a safe integer ≥ 1, no sign or leading zero). Undefined for anything else.
 */
export function parseSourceMarker(
  value: string,
): { region: string; stream: string; seq: number } | undefined {
  const m = /^(\S+) (\S+) ([1-9]\d{0,15})$/.exec(value);
  if (!m?.[1] || !m[2] || !m[3]) return undefined;
  const seq = Number(m[3]);
  return Number.isSafeInteger(seq) ? { region: m[1], stream: m[2], seq } : undefined;
}

/**
 * The newest marker of `source` in the destination: reads backwards from its last sequence in chunks of
 * 256 doubling to 4,096 sequences (each read forward, headers only) and answers from the first chunk that
 * holds any marker of the source. `maxScan`: destination messages read at most (default 100,000).
 * `downTo`: the lowest destination seq to read (a checkpoint's: nothing of the link's newer than it lies
 * below); reaching it, the answer is complete.
 * Rejects with a RelayError (STREAM_NOT_FOUND; JETSTREAM_API when a read makes no progress for 10 s) or
 * with the signal's reason.
 */
export async function lastStoredSourceSeq(
  nc: NatsConnection,
  opts: DestinationOptions & { readonly maxScan?: number; readonly downTo?: number },
): Promise<LastStored> {
  const r = await openReader(nc, opts);
  const { last_seq: last, messages } = r.state;
  const first = Math.max(r.state.first_seq, opts.downTo ?? 0);
  const maxScan = opts.maxScan ?? 100_000;
  let scanned = 0;
  let size = FIRST_CHUNK;
  for (let end = last; messages > 0 && end >= first; size = Math.min(size * 2, MAX_CHUNK)) {
    if (scanned >= maxScan) return { sourceSeq: undefined, destSeq: undefined, scanned, complete: false };
    const start = Math.max(first, end - Math.min(size, maxScan - scanned) + 1);
    // The highest, not the last read: a rare reorder within the link must not hide its newest marker.
    // Markers naming the link and unnamed ones apart: an unnamed one may be another link's (older relays).
    const best: { sourceSeq: number; destSeq: number }[] = [];
    scanned += await readRange(r, start, end, (m) => {
      const found = marker(m, opts.source);
      const kind = found?.named ? 0 : 1;
      if (found && (!best[kind] || found.seq > best[kind].sourceSeq)) best[kind] = { sourceSeq: found.seq, destSeq: m.seq };
      return false;
    });
    const answer = best[0] ?? best[1];
    if (answer) return { ...answer, scanned, complete: true };
    end = start - 1;
  }
  return { sourceSeq: undefined, destSeq: undefined, scanned, complete: true };
}

/**
 * sourceSeq → destSeq of every marker of `source` from dest seq `fromDestSeq` (inclusive; raised to the
 * first sequence) to the stream's last sequence as of the call; with `wanted`, only those source seqs, and
 * the read stops once all are found. A source seq stored twice keeps its first (lowest) dest seq.
 * Rejects as lastStoredSourceSeq does.
 */
export async function findStoredSourceSeqs(
  nc: NatsConnection,
  opts: DestinationOptions & { readonly fromDestSeq: number; readonly wanted?: ReadonlySet<number> },
): Promise<Map<number, number>> {
  const found = new Map<number, number>();
  const { wanted } = opts;
  const r = await openReader(nc, opts);
  const from = Math.max(opts.fromDestSeq, r.state.first_seq);
  if (r.state.messages === 0 || from > r.state.last_seq || wanted?.size === 0) return found;
  await readRange(r, from, r.state.last_seq, (m) => {
    const seq = markerSeq(m, opts.source);
    if (seq !== undefined && !found.has(seq) && (!wanted || wanted.has(seq))) found.set(seq, m.seq);
    return wanted !== undefined && found.size >= wanted.size;
  });
  return found;
}

/**
 * Whether the destination holds any message on one of `patterns` (the subjects a link writes): one
 * STREAM.MSG.GET `next_by_subj` per pattern from the stream's first sequence, no scan. False is certain:
 * none of the link's messages can be there, however many messages of other subjects it holds.
 * Rejects as lastStoredSourceSeq does.
 */
export async function holdsAnyOn(nc: NatsConnection, opts: Omit<DestinationOptions, "source">, patterns: readonly string[]): Promise<boolean> {
  const jsOpts = opts.domain ? { domain: opts.domain } : {};
  const jsm = await unlessAborted(jetstreamManager(nc, { ...jsOpts, checkAPI: false }), opts.signal, `destination stream ${opts.stream}`);
  for (const subject of patterns) {
    const query = { seq: 1, next_by_subj: subject }; // 2.9 has it; the client's MsgRequest type does not list it
    const found = await unlessAborted(jsm.streams.getMessage(opts.stream, query), opts.signal, `destination stream ${opts.stream}, looking for a message on ${subject}`);
    if (found !== null) return true;
  }
  return false;
}

type Reader = Awaited<ReturnType<typeof openReader>>;

async function openReader(nc: NatsConnection, opts: DestinationOptions) {
  const jsOpts = opts.domain ? { domain: opts.domain } : {};
  const open = async () => {
    const jsm = await jetstreamManager(nc, jsOpts);
    return { jsm, state: (await jsm.streams.info(opts.stream)).state };
  };
  const { jsm, state } = await unlessAborted(open(), opts.signal, `destination stream ${opts.stream}`);
  return { js: jetstream(nc, jsOpts), jsm, stream: opts.stream, state, signal: opts.signal };
}

/**
 * `p` with its JetStream errors classified, or the signal's reason as soon as it aborts (the request
 * itself then ends on its own timeout, unawaited).
 */
function unlessAborted<T>(p: Promise<T>, signal: AbortSignal | undefined, where: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) onAbort();
    const off = () => signal?.removeEventListener("abort", onAbort);
    p.then(
      (v) => (off(), resolve(v)),
      (err: unknown) => (off(), reject(classifyJsError(err, where))),
    );
  });
}

/** The source seq of `m`'s marker when it names `source` (and its current incarnation). */
function markerSeq(m: JsMsg, source: SourceRef): number | undefined {
  return marker(m, source)?.seq;
}

/**
 * `m`'s marker when it is `source`'s: its seq, and whether its Relay-Link names `source.link` (false:
 * it names no link, and counts by source and subjects alone).
 */
function marker(m: JsMsg, source: SourceRef): { seq: number; named: boolean } | undefined {
  const h = m.headers;
  const marker = h ? parseSourceMarker(h.get(RelayHeaders.Source)) : undefined;
  if (!h || !marker || marker.region !== source.region || marker.stream !== source.stream) return undefined;
  const link = source.link === undefined ? "" : h.get(RelayHeaders.Link);
  if (link !== "" && link !== source.link) return undefined; // another link's progress
  if (source.subjects && !source.subjects.some((p) => patternMatches(m.subject, p))) return undefined;
  const found = { seq: marker.seq, named: link !== "" };
  if (source.createdMs === undefined) return found;
  // Without a readable time the incarnation cannot be told: ignoring a marker costs a resend (absorbed by
  // dedup), trusting a stale one would skip messages.
  const nanos = parseNanos(h.get(RelayHeaders.SourceTime));
  return nanos !== undefined && Number(nanos / 1_000n) / 1_000 >= source.createdMs ? found : undefined;
}

/**
 * Reads seqs from..to once, in order, headers only, through an ordered consumer (it re-creates itself
 * after a reset). `visit` returns true to stop early. Resolves with the number of messages read in range.
 *
 * The end: the message at `to`, or the first one past it. But 2.9 keeps `last_seq` on a deleted last
 * message, and a pending count can read 0 early around a leader change; so when pending reads 0, or
 * nothing arrives for QUIET_MS, STREAM.MSG.GET with `next_by_subj` (first message at or after a seq, any
 * subject; 2.9 has it, the client's MsgRequest type does not list it) says whether anything is left.
 */
async function readRange(r: Reader, from: number, to: number, visit: (m: JsMsg) => boolean): Promise<number> {
  const where = `stream ${r.stream} seqs ${from}..${to}`;
  const consumer = await unlessAborted(
    r.js.consumers.get(r.stream, { opt_start_seq: from, headers_only: true }),
    r.signal,
    where,
  );
  let read = 0;
  let lastSeq = from - 1;
  let progressAt = Date.now();
  let probing = false;
  let messages: ConsumerMessages | undefined;
  const once = settleOnce(() => messages?.stop());
  const { settle, finished } = once;
  const probe = () => {
    if (probing || once.done) return;
    probing = true;
    const query = { seq: lastSeq + 1, next_by_subj: ">" };
    r.jsm.streams.getMessage(r.stream, query).then(
      (next) => {
        probing = false;
        if (next === null || next.seq > to) settle(); // new messages only ever get seqs past last_seq
      },
      (err: unknown) =>
        settle(classifyJsError(err, `${where}, asking what is left after seq ${query.seq - 1}`)),
    );
  };
  const onAbort = () => settle(r.signal?.reason);
  r.signal?.addEventListener("abort", onAbort, { once: true });
  const tick = setInterval(() => {
    const idle = Date.now() - progressAt;
    if (idle >= READ_TIMEOUT_MS) {
      settle(
        new RelayError(ErrorCodes.JETSTREAM_API, `${where}: no message for ${idle} ms after seq ${lastSeq}`),
      );
    } else if (idle >= QUIET_MS) probe();
  }, QUIET_MS / 2);
  try {
    if (r.signal?.aborted) onAbort();
    // Not awaited by itself: an ordered consumer keeps re-trying its creation while the stream has no
    // leader, and the read must still end on its timeout (the timer settles `finished`).
    consumer
      .consume({
        max_messages: Math.min(to - from + 1, MAX_CHUNK),
        callback: (m: JsMsg) => {
          if (once.done) return;
          progressAt = Date.now();
          if (m.seq > to) return settle(); // the range's tail was deleted
          read++;
          lastSeq = m.seq;
          if (visit(m) || m.seq === to) settle();
          else if (m.info.pending === 0) probe();
        },
      })
      .then(
        (started) => {
          messages = started;
          if (once.done) return started.stop();
          const closed = (err?: unknown) =>
            settle(err ?? new RelayError(ErrorCodes.JETSTREAM_API, `${where}: consumer closed`));
          started.closed().then(closed, closed);
        },
        (err: unknown) => settle(classifyJsError(err, where)),
      );
    await finished;
  } finally {
    clearInterval(tick);
    r.signal?.removeEventListener("abort", onAbort);
    settle();
    // Ordered consumers linger 5 min otherwise; an aborted caller is not kept waiting for the delete.
    const deleted = consumer.delete().catch(() => undefined);
    if (!r.signal?.aborted) await deleted;
  }
  return read;
}
