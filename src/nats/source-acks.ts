import type { NatsConnection } from "@nats-io/nats-core";

const ACK = new TextEncoder().encode("+ACK");
const NAK = new TextEncoder().encode("-NAK");
const WIP = new TextEncoder().encode("+WPI");

/**
 * Acks and naks source deliveries by their ack subject: the same one-line publishes the client's
 * JsMsg.ack()/nak() send, so that the pipeline need not hold the client's message objects.
 * A failure to send (the connection closed meanwhile) leaves the message unacked: the server
 * redelivers it after the ack wait, and the destination's dedup absorbs the second copy.
 */
export class SourceAcks {
  constructor(
    private readonly nc: NatsConnection,
    /** Told before every ack puts bytes in the connection (the write gate checks them again when they leave). */
    private readonly beforeWrite?: () => void,
  ) {}

  ack(reply: string): boolean {
    return this.send(reply, ACK);
  }

  /** In progress: the server restarts the delivery's ack wait instead of redelivering it. */
  working(reply: string): boolean {
    return this.send(reply, WIP);
  }

  /** Redeliver after `delayMs` (0: as soon as the server likes). */
  nak(reply: string, delayMs = 0): boolean {
    return this.send(reply, delayMs > 0 ? `-NAK {"delay":${Math.round(delayMs * 1_000_000)}}` : NAK);
  }

  private send(reply: string, payload: Uint8Array | string): boolean {
    if (reply === "") return false;
    try {
      this.beforeWrite?.();
      this.nc.publish(reply, payload);
      return true;
    } catch {
      return false;
    }
  }
}
