/**
 * Gap detection (DESIGN §4). JetStream skips, without a word, the messages that retention deleted before
 * a consumer saw them. The link compares its cursor with the source stream's first sequence: every
 * sequence after what the link has seen and before the first one still stored is lost to it.
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

  constructor(private readonly filtered: boolean) {}

  /** Returns the newly lost range, once: a range is never reported twice. */
  check(reading: CursorReading): Gap | undefined {
    const from = Math.max(reading.ackFloor, reading.highestSeen, this.reportedUpTo) + 1;
    const to = reading.streamFirstSeq - 1;
    if (to < from) return undefined;
    this.reportedUpTo = to;
    return { fromSeq: from, toSeq: to, count: to - from + 1, exact: !this.filtered, detectedAt: new Date().toISOString() };
  }

  /** The link starts over from a later cursor (after a resync): nothing before it can be a gap. */
  skipTo(seq: number): void {
    this.reportedUpTo = Math.max(this.reportedUpTo, seq);
  }
}
