import { createInbox } from "@nats-io/nats-core";
import type { Msg, MsgHdrs, NatsConnection, Subscription } from "@nats-io/nats-core";
import { ErrorCodes, RelayError } from "../errors.js";

export interface PubAck {
  readonly stream: string;
  readonly seq: number;
  readonly duplicate: boolean;
}

export type PublishCallback = (err: RelayError | null, ack: PubAck | null) => void;

interface Pending {
  readonly cb: PublishCallback;
  readonly deadline: number;
  readonly subject: string;
}

const decoder = new TextDecoder();

/**
 * JetStream publishing without a promise and a timer per message: every publish is a core publish with
 * a reply subject under one shared inbox subscription, and the PubAck JSON is parsed from the reply.
 * `js.publish()` costs enough per call to cap a node process near 16k msgs/s; this path is bounded by the
 * socket. Timeouts are enforced by one sweep over the pending map, which is in publish order.
 *
 * Callbacks run exactly once: with a PubAck, or with a RelayError whose code says what happened.
 */
export class JetStreamPublisher {
  private readonly pending = new Map<number, Pending>();
  private readonly prefix: string;
  private readonly sub: Subscription;
  private readonly sweeper: NodeJS.Timeout;
  private nextId = 0;
  private closed = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs: number,
  ) {
    this.prefix = `${createInbox()}.`;
    this.sub = nc.subscribe(`${this.prefix}*`, { callback: (_err, msg) => this.onReply(msg) });
    this.sweeper = setInterval(() => this.sweep(), Math.max(50, Math.min(1_000, timeoutMs / 4)));
    this.sweeper.unref();
  }

  get inFlight(): number {
    return this.pending.size;
  }

  publish(subject: string, data: Uint8Array, headers: MsgHdrs, cb: PublishCallback): void {
    if (this.closed) {
      cb(new RelayError(ErrorCodes.PUBLISH_FAILED, "publisher closed"), null);
      return;
    }
    const id = this.nextId++;
    this.pending.set(id, { cb, deadline: Date.now() + this.timeoutMs, subject });
    try {
      this.nc.publish(subject, data, { headers, reply: `${this.prefix}${id}` });
    } catch (err) {
      this.pending.delete(id);
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
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.cb(err, null);
  }

  private onReply(msg: Msg): void {
    const dot = msg.subject.lastIndexOf(".");
    const id = Number(msg.subject.slice(dot + 1));
    const p = this.pending.get(id);
    if (!p) return; // timed out already; the re-publish will be deduplicated
    this.pending.delete(id);
    const [err, ack] = parsePubAck(msg, p.subject);
    p.cb(err, ack);
  }

  private sweep(): void {
    const now = Date.now();
    for (const [id, p] of this.pending) {
      if (p.deadline > now) break; // insertion order = deadline order
      this.pending.delete(id);
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
} as const;

/**
 * By the server's error code, never its text: a message too large is that message's problem (the
 * bad-message policy); a full destination pauses the link; other 5xx (no leader, timeouts) heal by
 * themselves; any other 4xx concerns the link as a whole, which pauses rather than dead-lettering its
 * stream one message at a time.
 */
function classifyPubAckError(code: number, errCode: number) {
  if (errCode === JsErrCode.MessageTooLarge) return ErrorCodes.MESSAGE_TOO_LARGE;
  if (errCode === JsErrCode.StoreFailed || errCode === JsErrCode.InsufficientResources) return ErrorCodes.DESTINATION_FULL;
  return code >= 500 ? ErrorCodes.PUBLISH_FAILED : ErrorCodes.PUBLISH_REJECTED;
}

interface PubAckJson {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  error?: { code?: number; err_code?: number; description?: string };
}

/** Turns a reply into a PubAck or a classified error. Exported for unit tests. */
export function parsePubAck(msg: Pick<Msg, "data" | "headers">, subject: string): [RelayError | null, PubAck | null] {
  if (msg.data.length === 0 && msg.headers?.code === 503) {
    return [new RelayError(ErrorCodes.PUBLISH_FAILED, `no stream answered for ${subject} (no responders)`), null];
  }
  let body: PubAckJson;
  try {
    body = JSON.parse(decoder.decode(msg.data)) as PubAckJson;
  } catch (err) {
    return [new RelayError(ErrorCodes.PUBLISH_FAILED, `unreadable PubAck for ${subject}`, { cause: err }), null];
  }
  if (body.error) {
    const { code = 0, err_code: errCode = 0, description = "unknown error" } = body.error;
    const text = `destination rejected ${subject}: ${description} (code ${code}, err_code ${errCode})`;
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
