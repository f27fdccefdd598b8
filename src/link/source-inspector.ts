/**
 * The link's watch over what the source lost before it was relayed (DESIGN §4): retention gaps found by
 * a reading or in the deliveries, reported (never in silence) with the link's `onGap` policy applied; a
 * backlog older than `maxReplayAge`; and the relay's clock against the source region's.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { BacklogReading } from "./backlog.js";
import { skipsOnSubjectPurge } from "../nats/purge-skips.js";
import { GapDetector } from "./gap.js";
import type { Gap } from "./gap.js";
import type { LinkResyncReason } from "./link-status.js";

export interface SourceInspectorDeps {
  readonly config: LinkConfig;
  readonly metrics: Pick<RelayMetrics, "gapMessages" | "sourceClockOffset" | "kvSuperseded">;
  readonly logger: Logger;
  /** The link halts (a gap under `onGap: halt`). */
  fail(err: RelayError): void;
  requestResync(reason: LinkResyncReason): void;
  /** The source server's version: one that may jump a consumer over messages it still holds has its jumps read back. */
  sourceVersion(): string | undefined;
}

/** What the link does with a delivery: take it, halt before it, or first read back the range it jumped over. */
export type DeliveryVerdict = "take" | "halt" | Gap;

export class SourceInspector {
  private gapDetector: GapDetector;
  private readonly found: Gap[] = [];
  private highest = 0;
  /**
   * The highest source sequence delivered to this relay while no other relay owned the link (undefined:
   * none yet, or another relay owned it since): an ack floor above it is one the server moved itself.
   */
  private seen: number | undefined;
  /** The source server's version, as last known. */
  private version: string | undefined;
  /** The clock offset last warned about (ms), while it is 2 s or more. */
  private clockOffsetLogged: number | undefined;

  constructor(private readonly deps: SourceInspectorDeps) {
    this.gapDetector = this.newDetector();
  }

  /** The highest source sequence the link has seen in this process (0 if none). */
  get highestSeen(): number {
    return this.highest;
  }

  /** Whether the next placement has nothing of this relay's own to judge the ack floor by (a KV link's checkpoint then serves). */
  get needsReference(): boolean {
    return this.seen === undefined && this.deps.config.to.bucket !== undefined && this.readsBackSkips();
  }

  /** Lost source ranges reported so far (the last 10). */
  get gaps(): readonly Gap[] {
    return this.found;
  }

  /**
   * The cursor was placed: a new or moved one starts at `startSeq`; otherwise the consumer's next first
   * delivery follows what it delivered (`deliveredStreamSeq`), unknown for a consumer just created from
   * the start of the stream or at `skippedTo` (startAt new or a time).
   */
  placed(position: {
    readonly startSeq?: number;
    readonly created: boolean;
    readonly deliveredStreamSeq: number;
    readonly skippedTo?: number | undefined;
    /** The consumer's ack floor as placed (for a created or moved consumer, its start − 1): it will not deliver anything at or below it again. */
    readonly ackFloor: number;
    /** The ack floor of a KV link's last checkpoint (its owner's acks), where this relay was delivered nothing yet (undefined: none). */
    readonly checkpointSeq?: number | undefined;
  }): Gap | undefined {
    // Created at startAt new or a time: what lies before it was never the link's to relay (not a gap),
    // and the first delivery sets where holes count from.
    if (position.skippedTo !== undefined) {
      this.highest = Math.max(this.highest, position.skippedTo);
      if (this.seen !== undefined) this.seen = Math.max(this.seen, position.skippedTo);
    }
    // An ack floor above everything this relay was delivered: the server moved it over messages no one
    // acked (a subject purge before 2.10.11). (Deliveries it forgot above its floor, which 2.9 also
    // drops on such a purge, made the cursor move back to the floor: cursor.ts.)
    // A KV link's relay that was delivered nothing yet (just started, or took the link over) and finds
    // the consumer another relay consumed goes by the last checkpoint (with none yet, the stream's
    // start): its owner's acks moved the floor past it by at most a checkpoint interval, and what lies
    // between is read back and found applied (each write's version absorbs it). Not a stream link's:
    // what the last owner relayed may be older than the destination's duplicate window.
    const reference = this.deps.config.to.bucket !== undefined && !position.created ? (position.checkpointSeq ?? 0) : undefined;
    const seen = this.seen ?? reference;
    const skipped = this.readsBackSkips() && seen !== undefined && position.ackFloor > seen ? this.range(seen + 1, position.ackFloor) : undefined;
    if (skipped) this.seen = position.ackFloor;
    if (position.startSeq !== undefined) this.highest = Math.max(this.highest, position.startSeq - 1);
    // Where the next first delivery follows: holes the consumer jumps over from there are gaps.
    this.gapDetector.placed(position.startSeq !== undefined ? position.startSeq - 1 : position.created ? undefined : position.deliveredStreamSeq);
    return skipped;
  }

  /**
   * A delivery the link is about to take: a hole the consumer jumped over is a gap — or, where the
   * server may have skipped stored messages, a range to read back first. `halt` when the link halts on
   * the gap: then neither this delivery nor anything after the gap is taken.
   */
  delivered(streamSequence: number, firstDelivery: boolean): DeliveryVerdict {
    const gap = this.gapDetector.delivered(streamSequence, firstDelivery);
    if (gap && !this.readsBackSkips() && !this.gapFound(gap)) return "halt";
    if (streamSequence > this.highest) this.highest = streamSequence;
    if (streamSequence > (this.seen ?? 0)) this.seen = streamSequence;
    return gap && this.readsBackSkips() ? gap : "take";
  }

  /** A read-back found `fromSeq`..`toSeq` deleted (skip-recovery.ts): a gap. False when the link halts on it. */
  gone(fromSeq: number, toSeq: number): boolean {
    return this.gapFound(this.range(fromSeq, toSeq));
  }

  /** The link was another relay's meanwhile (its lease taken over from it): what that relay acked says nothing of the server. */
  tenureEnded(): void {
    this.seen = undefined;
  }

  /** The source stream was recreated: a new incarnation starts at seq 1, and gap tracking starts over. */
  recreated(): void {
    this.highest = 0;
    this.seen = undefined;
    this.gapDetector = this.newDetector();
  }

  /** A resync finished at `snapshotSeq`: nothing before it can be a gap. */
  resynced(snapshotSeq: number): void {
    this.gapDetector.skipTo(snapshotSeq);
    this.highest = Math.max(this.highest, snapshotSeq);
    this.seen = Math.max(this.seen ?? 0, snapshotSeq);
  }

  /**
   * Reads the cursor against the source: reports a retention gap (never in silence) and applies the
   * link's `onGap` policy; a backlog older than `maxReplayAge` takes the resync path too.
   */
  inspect(reading: BacklogReading): void {
    const { config } = this.deps;
    const gap = this.gapDetector.check({ ...reading, highestSeen: this.highest });
    if (gap && !this.gapFound(gap)) return;
    const maxAge = config.maxReplayAgeMs;
    if (maxAge !== undefined && reading.ageSeconds * 1000 > maxAge && reading.pending > 0) {
      this.deps.logger.warn({ backlogAgeSeconds: reading.ageSeconds, maxReplayAgeMs: maxAge }, "backlog older than maxReplayAge: resyncing instead of replaying");
      this.deps.requestResync("max_replay_age");
    }
  }

  /** The relay's clock against the source region's (measured by the backlog probe): a gauge, and a warning when it is off by 2 s or more. */
  observeClock(offsetMs: number | undefined): void {
    if (offsetMs === undefined) return;
    this.deps.metrics.sourceClockOffset.set({ link: this.deps.config.name }, offsetMs / 1000);
    const off = Math.abs(offsetMs) >= 2_000;
    if (off && (this.clockOffsetLogged === undefined || Math.abs(offsetMs - this.clockOffsetLogged) >= 1_000)) {
      this.clockOffsetLogged = offsetMs;
      this.deps.logger.warn(
        { clockOffsetSeconds: offsetMs / 1000, sourceRegion: this.deps.config.from.region },
        `this relay's clock is ${Math.abs(offsetMs / 1000).toFixed(1)} s ${offsetMs > 0 ? "ahead of" : "behind"} the source region's: backlog ages and maxReplayAge are measured on the source's clock`,
      );
    } else if (!off) this.clockOffsetLogged = undefined;
  }

  /**
   * A lost range, found by a reading or in the deliveries: reported (never in silence) and the link's
   * `onGap` policy applied. False when the link halts: then nothing after the gap is taken.
   */
  private gapFound(gap: Gap): boolean {
    const { config } = this.deps;
    if (config.to.bucket !== undefined) {
      // A KV link: a bucket drops a key's older writes by itself (a newer write past `history`, a
      // purge's rollup, its TTL), and its state is each key's latest write, which is relayed: not a
      // loss, not a gap, and no onGap policy (docs/kv.md).
      this.deps.metrics.kvSuperseded.inc({ link: config.name }, gap.count);
      this.deps.logger.info(
        { fromSeq: gap.fromSeq, toSeq: gap.toSeq, count: gap.count, exact: gap.exact },
        `kv: the source bucket removed ${gap.exact ? "" : "up to "}${gap.count} writes before the link relayed them (superseded by newer writes of their keys, a purge, the bucket's history or TTL); each key's latest write is relayed`,
      );
      return true;
    }
    this.found.push(gap);
    if (this.found.length > 10) this.found.shift();
    this.deps.metrics.gapMessages.inc({ link: config.name }, gap.count);
    this.deps.logger.warn(
      { fromSeq: gap.fromSeq, toSeq: gap.toSeq, count: gap.count, exact: gap.exact, policy: config.onGap },
      `the source deleted ${gap.exact ? "" : "up to "}${gap.count} messages the link had not relayed (source seq ${gap.fromSeq}-${gap.toSeq}; retention, or a delete or purge)`,
    );
    if (config.onGap === "halt") {
      this.deps.fail(new RelayError(ErrorCodes.SOURCE_GAP, `source seq ${gap.fromSeq}-${gap.toSeq} (${gap.count} messages) deleted before they were relayed; onGap is halt`));
      return false;
    }
    if (config.onGap === "resync") this.deps.requestResync("gap");
    return true;
  }

  private range(fromSeq: number, toSeq: number): Gap {
    return { fromSeq, toSeq, count: toSeq - fromSeq + 1, exact: this.deps.config.from.filterSubject === undefined, detectedAt: new Date().toISOString() };
  }

  /**
   * The source's server may jump a consumer over messages it still holds (a subject purge before
   * 2.10.11, nats/purge-skips.ts): jumps are then read back (skip-recovery.ts) before they are gaps.
   */
  private readsBackSkips(): boolean {
    // The connection forgets the server's INFO while it reconnects: the last one known stands, and
    // before any is known the jump is read back (a round trip, where taking it for a loss could lose).
    this.version = this.deps.sourceVersion() ?? this.version;
    return this.version === undefined || skipsOnSubjectPurge(this.version);
  }

  private newDetector(): GapDetector {
    return new GapDetector(this.deps.config.from.filterSubject !== undefined);
  }
}
