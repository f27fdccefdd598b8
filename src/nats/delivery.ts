import type { JsMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/nats-core";
import type { WireHeaders } from "./wire-headers.js";
import { wireHeadersOf } from "./wire-headers.js";

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
  const t = reply.split(".");
  const o = t.length === 9 ? -2 : 0;
  if (t[0] !== "$JS" || t[1] !== "ACK" || (t.length !== 9 && t.length < 11)) {
    throw new TypeError(`not a JetStream delivery (reply subject ${JSON.stringify(reply)})`);
  }
  const timestampNanos = t[9 + o] ?? "";
  if (!/^\d+$/.test(timestampNanos)) throw new TypeError(`JetStream reply subject without a timestamp: ${JSON.stringify(reply)}`);
  return {
    deliveryCount: Number(t[6 + o]),
    streamSequence: Number(t[7 + o]),
    consumerSequence: Number(t[8 + o]),
    timestampNanos,
    pending: Number(t[10 + o]),
  };
}

/** `msg`: the core message under a JsMsg (public on the implementation, not on the interface). */
export function toDelivery(m: JsMsg & { readonly msg?: { readonly reply?: string } }): Delivery {
  const reply = m.msg?.reply ?? "";
  const info = parseAckSubject(reply);
  return {
    subject: m.subject,
    reply,
    streamSequence: info.streamSequence,
    deliveryCount: info.deliveryCount,
    consumerSequence: info.consumerSequence,
    pending: info.pending,
    timestampNanos: info.timestampNanos,
    headers: wireHeadersOf(m),
    data: copy(m.data),
  };
}

/**
 * A copy (see Delivery). Buffer.allocUnsafe takes payloads under 4 KiB from Node's shared pool, so a
 * small message costs no ArrayBuffer of its own (each one is extra work for the garbage collector).
 */
function copy(data: Uint8Array): Uint8Array {
  const out = Buffer.allocUnsafe(data.length);
  out.set(data);
  return out;
}
