import { AckPolicy, DeliverPolicy } from "@nats-io/jetstream";
import type { ConsumerInfo, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { nanos } from "@nats-io/nats-core";
import type { LinkConfig } from "../config/types.js";

export interface BacklogReading {
  /** Source messages not yet delivered to the relay (consumer num_pending). */
  readonly pending: number;
  /** Delivered but not acked yet (consumer num_ack_pending). */
  readonly ackPending: number;
  /** pending + ackPending: what the link still owes the destination. */
  readonly messages: number;
  /** Age of the oldest message not yet relayed, on the source's clock; 0 when caught up. */
  readonly ageSeconds: number;
  /**
   * The relay's clock minus the source region's, as last measured (ms; undefined: not measured yet):
   * from the server's `ts` on every reading (2.10+), else from a probe consumer's creation time while a
   * backlog exists. Ages never depend on it being 0.
   */
  readonly clockOffsetMs?: number;
  /** The last source sequence the consumer delivered. */
  readonly deliveredSeq: number;
  /** The consumer's ack floor: every source sequence at or below it is in the destination. */
  readonly ackFloor: number;
  /** The source stream's first and last sequence, and how many messages it holds. */
  readonly streamFirstSeq: number;
  readonly streamMessages: number;
  readonly streamLastSeq: number;
  /** The source stream's consumers (undefined: not read). */
  readonly streamConsumers?: number;
  readonly at: string;
}

/** How long a measured clock offset is used before it is measured again. */
const OFFSET_TTL_MS = 5 * 60_000;

/**
 * Reads lag and backlog age from the source (DESIGN §4): one consumer-info and, when the pipeline is
 * empty but the source holds undelivered messages, one message-get for the oldest one's timestamp.
 *
 * Ages are measured on the source's clock, never the relay's: the message timestamps are the source
 * server's, and `maxReplayAge` skips messages when a backlog is too old, so a relay clock running
 * ahead would resync (and skip) what it should replay, and one running behind would replay for ever.
 * The source's time now is what its server says (`ts`, 2.10+; the clock offset is then measured from it
 * with every reading, no probe consumer is created); on 2.9 the relay's clock corrected by
 * an offset measured from a consumer the relay creates (its `created` is the server's time; every 5
 * minutes while a backlog exists); when that cannot be measured, the latest time the server itself
 * reported (its last message, last delivery or ack): an age never larger than the true one.
 */
export class BacklogProbe {
  private offset: { readonly ms: number; readonly at: number } | undefined;

  constructor(
    private readonly link: LinkConfig,
    private readonly jsm: () => JetStreamManager | undefined,
    private readonly oldestInPipeline: () => number | undefined,
    /** The relay's clock (ms since the epoch). */
    private readonly now: () => number = Date.now,
  ) {}

  async read(): Promise<BacklogReading> {
    const jsm = this.jsm();
    if (!jsm) throw new Error("source not connected yet");
    const { stream } = this.link.from;
    const asked = this.now();
    const info = await jsm.consumers.info(stream, this.link.durableName);
    const answered = this.now();
    const streamInfo = await jsm.streams.info(stream);
    // A server that says its time (`ts`, 2.10+) gives the offset with every reading, for free: the
    // relay's time is the middle of the request (off by at most half a round trip).
    const serverTime = parseMs(info.ts);
    if (serverTime !== undefined) this.offset = { ms: (asked + answered) / 2 - serverTime, at: answered };
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
      if (oldest !== undefined) ageSeconds = Math.max(0, ((await this.sourceNow(jsm, info, streamInfo)) - oldest) / 1000);
    }
    return {
      pending,
      ackPending,
      messages,
      ageSeconds,
      ...(this.offset ? { clockOffsetMs: Math.round(this.offset.ms) } : {}),
      deliveredSeq: info.delivered.stream_seq,
      ackFloor: info.ack_floor.stream_seq,
      streamFirstSeq: streamInfo.state.first_seq,
      streamMessages: streamInfo.state.messages,
      streamLastSeq: streamInfo.state.last_seq,
      streamConsumers: streamInfo.state.consumer_count,
      at: new Date().toISOString(),
    };
  }

  /** The source's time now (ms since the epoch), by its own clock. */
  private async sourceNow(jsm: JetStreamManager, info: ConsumerInfo, streamInfo: StreamInfo): Promise<number> {
    const said = parseMs(info.ts) ?? parseMs(streamInfo.ts);
    if (said !== undefined) return said;
    const local = this.now();
    if (this.offset === undefined || local - this.offset.at > OFFSET_TTL_MS) {
      this.offset = (await this.measureOffset(jsm).catch(() => undefined)) ?? this.offset;
    }
    if (this.offset !== undefined) return this.now() - this.offset.ms;
    // Not measurable: the latest moment the server itself reported (a lower bound of its now).
    // (`last_active` is typed as nanoseconds by the client; servers send an ISO time.)
    const seen = [streamInfo.state.last_ts, info.delivered.last_active, info.ack_floor.last_active].map((v: unknown) => parseMs(typeof v === "string" ? v : undefined));
    return Math.max(...seen.map((ms) => ms ?? 0));
  }

  /**
   * The relay's clock minus the source server's: a consumer created now carries the server's time of
   * its creation; the relay's is taken as the middle of the request (off by at most half a round trip).
   * The consumer is deleted at once (and expires by itself if that fails).
   */
  private async measureOffset(jsm: JetStreamManager): Promise<{ ms: number; at: number }> {
    const { stream, filterSubject } = this.link.from;
    const before = this.now();
    const probe = await jsm.consumers.add(stream, {
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.New,
      inactive_threshold: nanos(10_000),
      mem_storage: true,
      num_replicas: 1,
      ...(filterSubject !== undefined ? { filter_subject: filterSubject } : {}),
    });
    const after = this.now();
    jsm.consumers.delete(stream, probe.name).catch(() => undefined);
    const created = parseMs(probe.created);
    if (created === undefined) throw new Error(`consumer ${probe.name} has no creation time`);
    return { ms: (before + after) / 2 - created, at: after };
  }
}

function parseMs(iso: string | undefined): number | undefined {
  if (iso === undefined) return undefined;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? undefined : ms;
}
