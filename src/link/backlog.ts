import type { JetStreamManager } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";

export interface BacklogReading {
  /** Source messages not yet delivered to the relay (consumer num_pending). */
  readonly pending: number;
  /** Delivered but not acked yet (consumer num_ack_pending). */
  readonly ackPending: number;
  /** pending + ackPending: what the link still owes the destination. */
  readonly messages: number;
  /** Age of the oldest message not yet relayed; 0 when caught up. */
  readonly ageSeconds: number;
  /** The consumer's ack floor: every source sequence at or below it is in the destination. */
  readonly ackFloor: number;
  /** The source stream's first and last sequence, and how many messages it holds. */
  readonly streamFirstSeq: number;
  readonly streamMessages: number;
  readonly streamLastSeq: number;
  readonly at: string;
}

/**
 * Reads lag and backlog age from the source (DESIGN §4): one consumer-info and, when the pipeline is
 * empty but the source holds undelivered messages, one message-get for the oldest one's timestamp.
 */
export class BacklogProbe {
  constructor(
    private readonly link: LinkConfig,
    private readonly jsm: () => JetStreamManager | undefined,
    private readonly oldestInPipeline: () => number | undefined,
  ) {}

  async read(): Promise<BacklogReading> {
    const jsm = this.jsm();
    if (!jsm) throw new Error("source not connected yet");
    const { stream } = this.link.from;
    const info = await jsm.consumers.info(stream, this.link.durableName);
    const streamInfo = await jsm.streams.info(stream);
    const pending = info.num_pending;
    const ackPending = info.num_ack_pending;
    const messages = pending + ackPending;
    let ageSeconds = 0;
    if (messages > 0) {
      let oldest = this.oldestInPipeline();
      if (oldest === undefined) {
        // Nothing in flight: the next undelivered message is the oldest. Under a subject filter the
        // message after the ack floor may be older than the first matching one: an upper bound.
        const next = await jsm.streams
          .getMessage(stream, { seq: Math.max(info.ack_floor.stream_seq + 1, streamInfo.state.first_seq) })
          .catch(() => null);
        if (next) oldest = next.time.getTime();
      }
      if (oldest !== undefined) ageSeconds = Math.max(0, (Date.now() - oldest) / 1000);
    }
    return {
      pending,
      ackPending,
      messages,
      ageSeconds,
      ackFloor: info.ack_floor.stream_seq,
      streamFirstSeq: streamInfo.state.first_seq,
      streamMessages: streamInfo.state.messages,
      streamLastSeq: streamInfo.state.last_seq,
      at: new Date().toISOString(),
    };
  }
}
