import type { Delivery } from "../../src/nats/delivery.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";

/**
 * A delivery of source stream S to the durable `relay-a-to-b`, as the consume loop hands it to the
 * pipeline (unit tests of the pipeline and its stages): source seq `seq`, id `m<seq>`, and any `headers`
 * beside it (written as `Name: value` lines).
 */
export function testDelivery(seq: number, opts: { headers?: Record<string, string>; data?: Uint8Array } = {}): Delivery {
  const extra = Object.entries(opts.headers ?? {})
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  return {
    subject: "S.x",
    reply: `$JS.ACK.S.relay-a-to-b.1.${seq}.${seq}.1764460800000000000.0`,
    streamSequence: seq,
    consumerSequence: seq,
    deliveryCount: 1,
    pending: 0,
    timestampNanos: "1764460800000000000",
    headers: new WireHeaders(`NATS/1.0\r\nNats-Msg-Id: m${seq}\r\n${extra}\r\n`),
    data: opts.data ?? new Uint8Array([1]),
  };
}
