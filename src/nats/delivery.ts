import type { JsMsg, StoredMsg } from "@nats-io/jetstream";
import { parseNanos } from "../protocol/headers.js";
import type { MsgHdrs } from "@nats-io/nats-core";
import type { WireHeaders } from "./wire-headers.js";
import { copyPayload, rawParts, wireHeadersOf } from "./wire-headers.js";

/**
 * What the relay keeps of one JetStream delivery, read once from the client's message. The payload is
 * copied: the client hands out views into the socket buffer it read, and one 512-byte message held
 * until its PubAck would otherwise keep a whole 64 KiB read buffer alive (a thousand in flight cost
 * tens of megabytes of RSS). Only the ack subject is kept for the ack.
 */
export interface Delivery {
  readonly subject: string;
  /** The ack subject (`$JS.ACK....`): what an ack or nak is published to. */
  readonly reply: string;
  readonly streamSequence: number;
  readonly deliveryCount: number;
  /**
   * The consumer's delivery sequence: +1 for every delivery it sends, redeliveries included. A jump
   * means deliveries were lost on the way (a pull stopped with messages on the wire, a consumer leader
   * that died after sending them): the server holds them as ack-pending.
   */
  readonly consumerSequence: number;
  /** Messages left for the consumer after this one, as the server counted at delivery. */
  readonly pending: number;
  /** Publish time at the source: Unix nanoseconds, exactly as the server wrote them (digits). */
  readonly timestampNanos: string;
  readonly headers: WireHeaders | MsgHdrs | undefined;
  readonly data: Uint8Array;
}

/**
 * The JetStream ack subject, read once per delivery. (The client's `info` has the same fields but
 * holds the timestamp as a double, which cannot carry nanoseconds exactly, and its `timestampNanos`
 * splits the subject a second time.) Its two forms:
 *   $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>                  (9 tokens)
 *   $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]
 */
export function parseAckSubject(reply: string): Pick<Delivery, "streamSequence" | "consumerSequence" | "deliveryCount" | "pending" | "timestampNanos"> {
  const o = ackTokens(reply);
  return {
    deliveryCount: ackNumber(reply, o, DELIVERED),
    streamSequence: ackNumber(reply, o, STREAM_SEQ),
    consumerSequence: ackNumber(reply, o, CONSUMER_SEQ),
    timestampNanos: ackToken(reply, o, TIMESTAMP),
    pending: ackNumber(reply, o, PENDING),
  };
}

/** Where the fields are among an ack subject's tokens, from 0 (the domain form; ackTokens gives the offset). */
const DELIVERED = 6;
const STREAM_SEQ = 7;
const CONSUMER_SEQ = 8;
const TIMESTAMP = 9;
const PENDING = 10;

/** Token `n` (from 0, domain form) of the ack subject ackTokens read last, shifted by its offset `o`. */
const ackToken = (reply: string, o: number, n: number): string => reply.slice(ENDS[n - 1 + o]! + 1, ENDS[n + o]!);
const ackNumber = (reply: string, o: number, n: number): number => digitsIn(reply, ENDS[n - 1 + o]! + 1, ENDS[n + o]!);

/**
 * Reads the token bounds of an ack subject into ENDS (in place: splitting made a dozen strings and an
 * array per message) and checks its form; returns the offset of its tokens against the domain form
 * (-2 for the 9-token form, 0 otherwise).
 */
function ackTokens(reply: string): number {
  const count = tokenEnds(reply, ENDS);
  const o = count === 9 ? -2 : 0;
  if (!reply.startsWith("$JS.ACK.") || (count !== 9 && count < 11)) {
    throw new TypeError(`not a JetStream delivery (reply subject ${JSON.stringify(reply)})`);
  }
  if (Number.isNaN(ackNumber(reply, o, TIMESTAMP))) {
    throw new TypeError(`JetStream reply subject without a timestamp: ${JSON.stringify(reply)}`);
  }
  return o;
}

/**
 * Scratch for parseAckSubject's token bounds (the longest form has 12 tokens). Filled and read within
 * one synchronous call, so one array serves every call.
 */
const ENDS = new Int32Array(16);

/** Fills `ends` with where each token of `subject` ends (its dot, or the length); returns the token count. */
function tokenEnds(subject: string, ends: Int32Array): number {
  let count = 0;
  let from = 0;
  while (count < ends.length) {
    const dot = subject.indexOf(".", from);
    ends[count++] = dot < 0 ? subject.length : dot;
    if (dot < 0) break;
    from = dot + 1;
  }
  return count;
}

/** The decimal number in `s[start, end)`; NaN unless that is one or more digits only. */
function digitsIn(s: string, start: number, end: number): number {
  if (end <= start) return Number.NaN;
  let n = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return Number.NaN;
    n = n * 10 + c;
  }
  return n;
}

/** `msg`: the core message under a JsMsg (public on the implementation, not on the interface). */
export function toDelivery(m: JsMsg & { readonly msg?: { readonly reply?: string } }): Delivery {
  const reply = m.msg?.reply ?? "";
  const o = ackTokens(reply); // the fields are read straight into the delivery: no object in between
  const raw = rawParts(m); // read once for the headers and the payload
  return {
    subject: m.subject,
    reply,
    streamSequence: ackNumber(reply, o, STREAM_SEQ),
    deliveryCount: ackNumber(reply, o, DELIVERED),
    consumerSequence: ackNumber(reply, o, CONSUMER_SEQ),
    pending: ackNumber(reply, o, PENDING),
    timestampNanos: ackToken(reply, o, TIMESTAMP),
    headers: wireHeadersOf(m, raw),
    data: copyPayload(m, raw),
  };
}

/**
 * A message read from the stream by sequence (STREAM.MSG.GET), as a delivery with no ack subject: one
 * the consumer never delivered, so nothing at the source waits for its ack (a repair, a skip read back).
 */
export function storedDelivery(sm: StoredMsg): Delivery {
  return {
    subject: sm.subject,
    reply: "",
    streamSequence: sm.seq,
    deliveryCount: 1,
    consumerSequence: 0,
    pending: 0,
    timestampNanos: (parseNanos(sm.timestamp) ?? 0n).toString(),
    headers: sm.header,
    data: sm.data,
  };
}
