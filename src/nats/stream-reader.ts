import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerMessages, JetStreamManager, JsMsg, StreamInfo, StreamState } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { nanos } from "@nats-io/nats-core";
import { ErrorCodes, RelayError } from "../errors.js";
import { parseAckSubject } from "./delivery.js";
import { classifyJsError } from "./durable-consumer.js";
import { settleOnce } from "../lifecycle/settle-once.js";

export interface StreamSide {
  readonly nc: NatsConnection;
  /** JetStream domain of the region, if any. */
  readonly domain?: string;
  readonly region: string;
  readonly stream: string;
}

export interface ReadOptions {
  readonly filterSubject?: string;
  /** Start at the first message stored at or after this time (ms since the epoch). */
  readonly startMs?: number;
  /** Start at this sequence (from `startSeqOf`, already computed): `startMs` is then not looked up again. */
  readonly startSeq?: number;
  /** Messages per pull (default 4096: headers only, so a batch is small; 64 with `payloads`). */
  readonly batch?: number;
  /** Fail when no message arrives for this long while some are still pending (default 30 s). */
  readonly idleTimeoutMs?: number;
  /** The stream's info when the caller has read it already (readStreamInfo): its state is the snapshot the read stops at. */
  readonly info?: StreamInfo;
  /** Told once, before the first message, how many messages the read will deliver (the consumer's pending count). */
  readonly onTotal?: (total: number) => void;
  /** Stop after this sequence (default: the stream's last sequence when the read started). */
  readonly endSeq?: number;
  /** Stop after this many messages (a paced reader reads in chunks and goes on from `lastSeq` + 1). */
  readonly maxMessages?: number;
  /**
   * Only the last message of each subject (under `filterSubject`), in stream order: a KV bucket's
   * latest entry per key. `startMs`/`startSeq` do not apply. After a consumer reset the read goes on
   * from the next sequence with every message: the caller keeps the highest sequence per subject.
   */
  readonly lastPerSubject?: boolean;
  /** Deliver payloads too (default: headers only). */
  readonly payloads?: boolean;
}

export interface ReadResult {
  /** The stream's state when the read started (or when `info` was read): the read stops at `last_seq` of this snapshot. */
  readonly state: StreamState;
  /** The first sequence the read started from (after `startMs`). */
  readonly startSeq: number;
  readonly delivered: number;
  /** The last sequence delivered to `onMessage` (startSeq − 1 when none). */
  readonly lastSeq: number;
}

/** How long a read without a filter waits for more after the server said nothing is pending. */
const QUIET_END_MS = 1_000;

/**
 * Reads a stream once, in stream order, through an ordered consumer with `headers_only` (unless
 * `payloads`): the server never sends payloads, and `onMessage` runs synchronously for each message,
 * so nothing piles up here beyond one pull batch. Ends at the stream's last sequence as of the start (later messages are not
 * waited for) or, under a subject filter, when nothing matching it is pending. The ordered consumer survives
 * reconnects and leader changes by re-creating itself at the next sequence.
 */
export async function readStream(
  side: StreamSide,
  opts: ReadOptions,
  onMessage: (m: JsMsg, seq: number) => void,
): Promise<ReadResult> {
  const where = `${side.region}/${side.stream}`;
  const jsm = await managerOf(side);
  const state = (opts.info ?? (await infoOf(jsm, side))).state;
  const startSeq = Math.max(
    state.first_seq,
    opts.startSeq ?? (opts.startMs === undefined ? 1 : await seqAtTime(jsm, side.stream, opts.startMs)),
  );
  let endSeq = Math.min(state.last_seq, opts.endSeq ?? Infinity);
  const maxMessages = opts.maxMessages ?? Infinity;
  if (state.messages === 0 || startSeq > endSeq) {
    opts.onTotal?.(0);
    return { state, startSeq, delivered: 0, lastSeq: startSeq - 1 };
  }

  const js = jetstream(side.nc, side.domain ? { domain: side.domain } : {});
  let consumer;
  try {
    // opt_start_seq rather than opt_start_time: the ordered consumer re-creates itself from a sequence
    // after a reset, and the server refuses a start time next to a start sequence.
    consumer = await js.consumers.get(side.stream, {
      headers_only: opts.payloads !== true,
      ...(opts.lastPerSubject ? { deliver_policy: DeliverPolicy.LastPerSubject } : { opt_start_seq: startSeq }),
      ...(opts.filterSubject ? { filter_subjects: opts.filterSubject } : {}),
    });
  } catch (err) {
    throw classifyJsError(err, `stream ${where}`);
  }
  if (opts.lastPerSubject) {
    // A subject written to after `state` was read has its last message past that end, and its earlier
    // ones are not delivered: the end is the stream's last sequence once the consumer exists.
    const now = await infoOf(jsm, side).catch(async (err: unknown) => {
      await consumer.delete().catch(() => undefined);
      throw err;
    });
    endSeq = Math.min(now.state.last_seq, opts.endSeq ?? Infinity);
  }
  const pending = (await consumer.info(true)).num_pending;
  opts.onTotal?.(pending);
  if (pending === 0) {
    await consumer.delete().catch(() => undefined);
    return { state, startSeq, delivered: 0, lastSeq: startSeq - 1 };
  }

  let delivered = 0;
  let lastSeq = startSeq - 1;
  let quiet: NodeJS.Timeout | undefined;
  let lastProgress = Date.now();
  let messages: ConsumerMessages | undefined;
  const once = settleOnce(() => messages?.stop());
  const { settle, finished } = once;
  const idleMs = opts.idleTimeoutMs ?? 30_000;
  const idle = setInterval(
    () => {
      if (Date.now() - lastProgress > idleMs) {
        settle(
          new RelayError(
            ErrorCodes.JETSTREAM_API,
            `stream ${where}: no message for ${idleMs} ms after ${delivered} read`,
          ),
        );
      }
    },
    Math.min(1_000, idleMs),
  );
  try {
    messages = await consumer.consume({
      // With payloads a batch is small: a value may be as large as the server's max_payload.
      // And never more than the read still wants: the rest would come only to be dropped.
      max_messages: Math.min(opts.batch ?? (opts.payloads ? 64 : 4_096), maxMessages),
      callback: (m: JsMsg) => {
        if (once.done) return;
        // The ack subject read once, cheaply (the client's m.seq / m.info build an object per message).
        const { streamSequence: seq, pending } = parseAckSubject((m as JsMsg & { readonly msg?: { readonly reply?: string } }).msg?.reply ?? "");
        // Under a filter the next match may lie past the end: the read ends without it.
        if (seq > endSeq) {
          settle();
          return;
        }
        lastProgress = Date.now();
        delivered++;
        lastSeq = seq;
        try {
          onMessage(m, seq);
        } catch (err) {
          settle(err);
          return;
        }
        // Without a filter the end is exact: the last sequence. A pending count of 0 can be read too
        // early right after a leader change, so there it ends the read only after a quiet second
        // (the last message may have been deleted meanwhile); under a filter, where the last matching
        // sequence is not known in advance, it ends the read at once.
        if (quiet) clearTimeout(quiet);
        quiet = undefined;
        if (seq >= endSeq || delivered >= maxMessages || (opts.filterSubject !== undefined && pending === 0)) settle();
        else if (pending === 0) quiet = setTimeout(() => settle(), QUIET_END_MS);
      },
    });
    if (once.done) messages.stop();
    void watch(messages, where, settle);
    await finished;
  } finally {
    clearInterval(idle);
    if (quiet) clearTimeout(quiet);
    settle();
    await consumer.delete().catch(() => undefined);
  }
  return { state, startSeq, delivered, lastSeq };
}

/**
 * The sequence a read from `startMs` starts at (the stream's first sequence without it), as readStream
 * computes it: known before the read, e.g. to tell copies of older source messages from the rest.
 */
export async function startSeqOf(
  side: StreamSide,
  info: StreamInfo,
  startMs: number | undefined,
): Promise<number> {
  if (startMs === undefined) return info.state.first_seq;
  return Math.max(info.state.first_seq, await seqAtTime(await managerOf(side), side.stream, startMs));
}

/**
 * The names of the streams of the side's region whose subjects overlap `subject` (at most one, unless
 * the server allows overlapping streams).
 */
export async function streamsCapturing(side: Omit<StreamSide, "stream">, subject: string): Promise<string[]> {
  const jsm = await managerOf(side);
  const names: string[] = [];
  try {
    for await (const n of jsm.streams.names(subject)) names.push(n);
  } catch (err) {
    throw classifyJsError(err, `streams of ${side.region} capturing ${subject}`);
  }
  return names;
}

/** The stream's info (one request); rejects as readStream does when the stream is not there. */
export async function readStreamInfo(side: StreamSide): Promise<StreamInfo> {
  return infoOf(await managerOf(side), side);
}

function managerOf(side: Pick<StreamSide, "nc" | "domain">): Promise<JetStreamManager> {
  return jetstreamManager(
    side.nc,
    side.domain ? { domain: side.domain, checkAPI: false } : { checkAPI: false },
  );
}

async function infoOf(jsm: JetStreamManager, side: StreamSide): Promise<StreamInfo> {
  try {
    return await jsm.streams.info(side.stream);
  } catch (err) {
    throw classifyJsError(err, `stream ${side.region}/${side.stream}`);
  }
}

async function watch(
  messages: ConsumerMessages,
  where: string,
  settle: (err?: unknown) => void,
): Promise<void> {
  try {
    for await (const s of messages.status()) {
      if (s.type === "stream_not_found")
        settle(new RelayError(ErrorCodes.STREAM_NOT_FOUND, `stream ${where}: deleted while being read`));
    }
  } catch (err) {
    settle(err);
  }
}

/**
 * The first sequence stored at or after `ms`: a throwaway consumer with a start time reports it (its
 * `delivered.stream_seq` is the sequence before its start). last_seq + 1 when nothing is that new.
 */
async function seqAtTime(jsm: JetStreamManager, stream: string, ms: number): Promise<number> {
  try {
    const ci = await jsm.consumers.add(stream, {
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: new Date(ms).toISOString(),
      inactive_threshold: nanos(60_000),
      mem_storage: true,
      num_replicas: 1,
    });
    await jsm.consumers.delete(stream, ci.name).catch(() => undefined);
    return ci.delivered.stream_seq + 1;
  } catch (err) {
    throw classifyJsError(err, `stream ${stream}: start sequence at ${new Date(ms).toISOString()}`);
  }
}
