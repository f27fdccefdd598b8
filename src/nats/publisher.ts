import { createInbox } from "@nats-io/nats-core";
import type { Msg, MsgHdrs, NatsConnection, Subscription } from "@nats-io/nats-core";
import { ErrorCodes, RelayError } from "../errors.js";
import { PendingPublishes } from "./pending-publishes.js";
import { lastTokenNumber } from "./wire-headers.js";

export interface PubAck {
  readonly stream: string;
  readonly seq: number;
  readonly duplicate: boolean;
}

export type PublishCallback = (err: RelayError | null, ack: PubAck | null) => void;

interface Pending {
  readonly cb: PublishCallback;
  readonly subject: string;
}

const decoder = new TextDecoder();

/**
 * JetStream publishing without a promise and a timer per message: every publish is a core publish with
 * a reply subject under one shared inbox subscription, and the PubAck JSON is parsed from the reply.
 * `js.publish()` costs enough per call to cap a node process near 16k msgs/s; this path is bounded by the
 * socket. Timeouts are enforced by one sweep over the pending publishes, which are in publish order.
 *
 * Callbacks run exactly once: with a PubAck, or with a RelayError whose code says what happened.
 */
export class JetStreamPublisher {
  private readonly pending = new PendingPublishes<Pending>();
  private readonly prefix: string;
  private readonly sub: Subscription;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;
  /** The stream the last PubAck named: the next one almost always names it too (its string is reused). */
  private lastStream: string | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs: number,
    /** Told before every publish puts bytes in the connection (the write gate checks them again when they leave). */
    private readonly beforeWrite?: () => void,
  ) {
    this.prefix = `${createInbox()}.`;
    this.sub = nc.subscribe(`${this.prefix}*`, { callback: (_err, msg) => this.onReply(msg) });
    this.sweeper = setInterval(() => this.sweep(), Math.max(50, Math.min(1_000, timeoutMs / 4)));
    this.sweeper.unref();
  }

  get inFlight(): number {
    return this.pending.size;
  }

  /** `now`: the wall clock (ms) at this publish, when the caller read it already (a pass of many publishes). */
  publish(subject: string, data: Uint8Array, headers: MsgHdrs, cb: PublishCallback, now = Date.now()): void {
    if (this.closed) {
      cb(new RelayError(ErrorCodes.PUBLISH_FAILED, "publisher closed"), null);
      return;
    }
    const id = this.pending.add({ cb, subject }, now + this.timeoutMs);
    try {
      this.beforeWrite?.();
      this.nc.publish(subject, data, { headers, reply: `${this.prefix}${id}` });
    } catch (err) {
      this.pending.take(id);
      // Never call back inside publish(): a caller that retries from its callback would spin without
      // ever yielding to the event loop (health checks, timers and signals would starve).
      const failure = new RelayError(ErrorCodes.PUBLISH_FAILED, `publish to ${subject} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      setImmediate(() => cb(failure, null));
    }
  }

  /** Fails every pending publish (they may or may not be stored: the caller re-publishes, dedup absorbs). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    this.sub.unsubscribe();
    this.failAll(new RelayError(ErrorCodes.PUBLISH_FAILED, "publisher closed"));
  }

  failAll(err: RelayError): void {
    for (const p of this.pending.drain()) p.cb(err, null);
  }

  private onReply(msg: Msg): void {
    const p = this.pending.take(lastTokenNumber(msg)); // the publish's number, after the inbox prefix
    if (!p) return; // timed out already; the re-publish will be deduplicated
    const [err, ack] = parsePubAck(msg, p.subject, this.lastStream);
    if (ack) this.lastStream = ack.stream;
    p.cb(err, ack);
  }

  private sweep(): void {
    for (const p of this.pending.expire(Date.now())) {
      p.cb(new RelayError(ErrorCodes.PUBLISH_TIMEOUT, `no PubAck for ${p.subject} within ${this.timeoutMs}ms`), null);
    }
  }
}

/** JetStream API error codes (`err_code`) the relay tells apart. */
const JsErrCode = {
  /** JSStreamMessageExceedsMaximumErr: larger than the stream's max_msg_size. */
  MessageTooLarge: 10054,
  /** JSStreamStoreFailedF: "maximum messages/bytes exceeded" on a discard-new stream, or a store failure. */
  StoreFailed: 10077,
  /** JSInsufficientResourcesErr. */
  InsufficientResources: 10023,
  /** JSStreamNotMatchErr: "expected stream does not match" (a `Nats-Expected-Stream` header; the reply names the stream that would have stored it). */
  StreamNotMatch: 10060,
  /**
   * JSStreamTooManyRequests, code 429, "too many requests" (nats-server 2.11+, server/errors.json): the
   * stream's ingest queue is full; the reply has the status line `NATS/1.0 429 Too Many Requests`.
   */
  TooManyRequests: 10167,
  /** JSStreamWrongLastSequenceErrF: "wrong last sequence: <seq>" (a `Nats-Expected-Last-Sequence` header, `to.order: strict`). */
  WrongLastSequence: 10071,
} as const;

/**
 * By the server's error code, never its text: a message too large is that message's problem (the
 * bad-message policy); a 429 is backpressure (retried, never a refusal); a full destination pauses the link; a stream that is not the link's (10060, for
 * `to.expectStream`) halts it; other 5xx (no leader, timeouts) heal by
 * themselves; any other 4xx concerns the link as a whole, which pauses rather than dead-lettering its
 * stream one message at a time.
 */
function classifyPubAckError(code: number, errCode: number) {
  if (errCode === JsErrCode.MessageTooLarge) return ErrorCodes.MESSAGE_TOO_LARGE;
  if (errCode === JsErrCode.TooManyRequests || code === 429) return ErrorCodes.DESTINATION_BUSY;
  if (errCode === JsErrCode.StoreFailed || errCode === JsErrCode.InsufficientResources) return ErrorCodes.DESTINATION_FULL;
  if (errCode === JsErrCode.StreamNotMatch) return ErrorCodes.DESTINATION_MISMATCH;
  if (errCode === JsErrCode.WrongLastSequence) return ErrorCodes.ORDER_REJECTED;
  return code >= 500 ? ErrorCodes.PUBLISH_FAILED : ErrorCodes.PUBLISH_REJECTED;
}

interface PubAckJson {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  error?: { code?: number; err_code?: number; description?: string };
}

/** Turns a reply into a PubAck or a classified error. Exported for unit tests. */
export function parsePubAck(msg: Pick<Msg, "data" | "headers">, subject: string, knownStream?: string): [RelayError | null, PubAck | null] {
  if (msg.data.length === 0 && msg.headers?.code === 503) {
    return [new RelayError(ErrorCodes.PUBLISH_FAILED, `no stream answered for ${subject} (no responders)`), null];
  }
  if (msg.data.length === 0 && msg.headers?.code === 429) {
    return [new RelayError(ErrorCodes.DESTINATION_BUSY, `destination busy for ${subject} (429 too many requests)`), null];
  }
  const fast = readPlainPubAck(msg.data, knownStream);
  if (fast) return [null, fast];
  let body: PubAckJson;
  try {
    body = JSON.parse(decoder.decode(msg.data)) as PubAckJson;
  } catch (err) {
    return [new RelayError(ErrorCodes.PUBLISH_FAILED, `unreadable PubAck for ${subject}`, { cause: err }), null];
  }
  if (body.error) {
    const { code = 0, err_code: errCode = 0, description = "unknown error" } = body.error;
    // nats-server 2.9 names the stream that would have stored it next to the error (10060).
    const boundTo = errCode === JsErrCode.StreamNotMatch && typeof body.stream === "string" ? `, bound to stream ${body.stream}` : "";
    const text = `destination rejected ${subject}: ${description} (code ${code}, err_code ${errCode}${boundTo})`;
    return [new RelayError(classifyPubAckError(code, errCode), text), null];
  }
  if (typeof body.seq !== "number" || typeof body.stream !== "string") {
    return [new RelayError(ErrorCodes.PUBLISH_FAILED, `malformed PubAck for ${subject}`), null];
  }
  const duplicate = body.duplicate === true;
  if (duplicate && body.seq === 0) {
    return [new RelayError(ErrorCodes.PUBLISH_NOT_STORED, `PubAck for ${subject} said duplicate with seq 0`), null];
  }
  return [null, { stream: body.stream, seq: body.seq, duplicate }];
}

const STREAM_FIELD = Buffer.from('{"stream":"');
const SEQ_FIELD = Buffer.from('"seq":');
const DUPLICATE_FIELD = Buffer.from(',"duplicate":');
const TRUE_TAIL = Buffer.from("true}");
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const SPACE = 0x20;
const ZERO = 0x30;
const CLOSE = 0x7d;

/**
 * The PubAck of a stored message as nats-server writes it, read without JSON.parse (one per message on
 * the hot path). nats-server 2.9.10 writes (bytes captured from a real server, test/fixtures/puback/):
 *
 *   {"stream":"<name>", "seq":<digits>}
 *   {"stream":"<name>", "seq":<digits>,"duplicate": true}
 *
 * Accepted: exactly these, each of the two spaces optional (the no-space forms). The result is what
 * JSON.parse would give (stream, seq, duplicate). Anything else returns undefined and goes through
 * JSON.parse: an error, a `domain` (a server in a JetStream domain writes one), a field a newer server
 * adds (`val`), an escape or a control character in the name, a seq with a leading zero or above
 * Number.MAX_SAFE_INTEGER, a duplicate with seq 0, other whitespace.
 */
export function readPlainPubAck(data: Uint8Array, knownStream?: string): PubAck | undefined {
  if (!startsWith(data, STREAM_FIELD, 0)) return undefined;
  let i = STREAM_FIELD.length;
  const nameStart = i;
  while (i < data.length && data[i] !== QUOTE) {
    // An escape, or a control character JSON.parse would refuse.
    if (data[i] === BACKSLASH || data[i]! < SPACE) return undefined;
    i++;
  }
  const nameEnd = i;
  if (nameEnd === nameStart || data[nameEnd + 1] !== COMMA) return undefined;
  i = nameEnd + 2;
  if (data[i] === SPACE) i++;
  if (!startsWith(data, SEQ_FIELD, i)) return undefined;
  i += SEQ_FIELD.length;
  const digitsStart = i;
  if (data[i] === ZERO) return undefined; // seq 0 (not stored) or a leading zero (not JSON)
  let seq = 0;
  for (; i < data.length; i++) {
    const c = data[i]! - 48;
    if (c < 0 || c > 9) break;
    seq = seq * 10 + c;
  }
  // Up to 16 digits: past Number.MAX_SAFE_INTEGER the sum may round (JSON.parse's number would too).
  if (i === digitsStart || i - digitsStart > 16 || seq > Number.MAX_SAFE_INTEGER) return undefined;
  let duplicate: boolean;
  if (i === data.length - 1 && data[i] === CLOSE) duplicate = false;
  else if (startsWith(data, DUPLICATE_FIELD, i)) {
    i += DUPLICATE_FIELD.length;
    if (data[i] === SPACE) i++;
    if (i + TRUE_TAIL.length !== data.length || !startsWith(data, TRUE_TAIL, i)) return undefined;
    duplicate = true;
  } else return undefined;
  const stream =
    knownStream !== undefined && sameAscii(data, nameStart, nameEnd, knownStream)
      ? knownStream
      : Buffer.from(data.buffer, data.byteOffset + nameStart, nameEnd - nameStart).toString("utf8");
  return { stream, seq, duplicate };
}

/** Whether `data[start, end)` holds `text`, compared as ASCII (a non-ASCII name is decoded instead). */
function sameAscii(data: Uint8Array, start: number, end: number, text: string): boolean {
  if (end - start !== text.length) return false;
  for (let j = 0; j < text.length; j++) if (data[start + j] !== text.charCodeAt(j)) return false;
  return true;
}

function startsWith(data: Uint8Array, prefix: Uint8Array, at: number): boolean {
  if (at + prefix.length > data.length) return false;
  for (let j = 0; j < prefix.length; j++) if (data[at + j] !== prefix[j]) return false;
  return true;
}
