/**
 * Gap detection (DESIGN §4). JetStream skips, without a word, the messages that retention deleted before
 * a consumer saw them. The link compares its cursor with the source stream's first sequence: every
 * sequence after what the link has seen and before the first one still stored is lost to it. Holes
 * above the first sequence show in the deliveries themselves: a sequence the consumer jumped over.
 */
export interface Gap {
  /** First and last lost source sequence (inclusive). */
  readonly fromSeq: number;
  readonly toSeq: number;
  /** Sequences in the range. Under a subject filter some of them may not have matched it. */
  readonly count: number;
  /** True when every sequence in the range was the link's to relay (no subject filter). */
  readonly exact: boolean;
  readonly detectedAt: string;
}

export interface CursorReading {
  /** Every source sequence <= ackFloor is in the destination (or was suppressed or parked). */
  readonly ackFloor: number;
  /** The highest sequence this link has received in this process (0 if none). */
  readonly highestSeen: number;
  /** The source stream's first stored sequence. */
  readonly streamFirstSeq: number;
  /** Messages currently in the stream (0 means first_seq is the next one to be written). */
  readonly streamMessages: number;
}

export class GapDetector {
  private reportedUpTo = 0;
  /** The highest source sequence the consumer has delivered since the cursor was placed; undefined: not known yet. */
  private frontier: number | undefined;

  constructor(private readonly filtered: boolean) {}

  /** Returns the newly lost range, once: a range is never reported twice. */
  check(reading: CursorReading): Gap | undefined {
    return this.report(Math.max(reading.ackFloor, reading.highestSeen) + 1, reading.streamFirstSeq - 1);
  }

  /**
   * The cursor was placed: its next first delivery follows `afterSeq` (undefined when that is not
   * known, e.g. a consumer created from the start of the stream: its first delivery sets it).
   */
  placed(afterSeq: number | undefined): void {
    this.frontier = afterSeq;
  }

  /**
   * A delivery. A consumer delivers in sequence order and skips, without a word, what was deleted before
   * it got there (retention, a per-subject limit, a delete or a purge), also while the link is live and
   * far above the stream's first sequence, where `check` cannot see it. Without a subject filter every
   * sequence is the link's, so a first delivery past the one after the frontier is an exact gap; under a
   * filter the other subjects' messages make such jumps normal, and only `check` applies.
   */
  delivered(seq: number, firstDelivery: boolean): Gap | undefined {
    const frontier = this.frontier;
    if (frontier === undefined || seq > frontier) this.frontier = seq;
    if (this.filtered || !firstDelivery || frontier === undefined) return undefined;
    return this.report(frontier + 1, seq - 1);
  }

  /** The link starts over from a later cursor (after a resync): nothing before it can be a gap. */
  skipTo(seq: number): void {
    this.reportedUpTo = Math.max(this.reportedUpTo, seq);
    this.frontier = Math.max(this.frontier ?? seq, seq);
  }

  private report(fromSeq: number, to: number): Gap | undefined {
    const from = Math.max(fromSeq, this.reportedUpTo + 1);
    if (to < from) return undefined;
    this.reportedUpTo = to;
    return { fromSeq: from, toSeq: to, count: to - from + 1, exact: !this.filtered, detectedAt: new Date().toISOString() };
  }
}
