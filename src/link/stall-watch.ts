import type { Logger } from "pino";

/** How a stall is healed, in the order tried (each given `stallAfter` to show progress before the next). */
export const STALL_STEPS = ["pull", "consumer", "reconnect"] as const;
export type StallStep = (typeof STALL_STEPS)[number];

/** What the watch reads from the source every poll (the backlog probe's reading). */
export interface StallReading {
  /** The source stream's last sequence. */
  readonly streamLastSeq: number;
  /** Messages of the link's filter the consumer has not delivered yet (num_pending). */
  readonly pending: number;
  /** The last source sequence the consumer delivered. */
  readonly deliveredSeq: number;
}

export interface StallWatchOptions {
  readonly stallAfterMs: number;
  /** The link reads a subset of the stream: the stream's last sequence alone does not mean work for it. */
  readonly filtered: boolean;
  readonly logger: Logger;
  /** Monotonic ms. */
  readonly now?: () => number;
  /** Counted per step (relay_link_stalls_total{link,step}). */
  readonly counted: (step: StallStep) => void;
  /** Runs one healing step; the watch goes on judging by progress whatever it returns. */
  readonly heal: (step: StallStep) => Promise<void>;
  /** The stall began (its reason) or ended (undefined). */
  readonly changed: (reason: string | undefined) => void;
}

/**
 * Stall by progress. A link whose source has messages for it (its last sequence past what the consumer
 * delivered, or pending messages under a filter) while nothing is delivered for `stallAfter`, although
 * every connection looks healthy and nothing in the relay holds it back, is stalled: a consumer stuck on
 * the server (nats-server#8630 reports one with a lag of 0), a pull lost without an error, a connection
 * that carries PINGs but no deliveries. The watch says so (the link's state `stalled`, with the reason)
 * and heals it in escalating steps — a new pull, then the consumer re-created from the destination's
 * record, then a new connection — each after the previous one had `stallAfter` to show progress, and
 * the last repeated. Progress (a delivery, or the consumer's delivered sequence moving) ends it.
 *
 * Never a stall on an idle source (no work), and never while the caller says the link is not eligible:
 * a standby, a link paused by its guard or destination, one holding messages or throttled, a resync.
 */
export class StallWatch {
  private readonly now: () => number;
  private noProgressSince: number | undefined;
  private lastDelivered = -1;
  private lastDeliveredSeq = -1;
  private stalledReason: string | undefined;
  private step = 0;
  private nextStepAt = 0;
  private healing = false;

  constructor(private readonly opts: StallWatchOptions) {
    this.now = opts.now ?? (() => performance.now());
  }

  get stalled(): string | undefined {
    return this.stalledReason;
  }

  /**
   * One poll. `delivered`: the relay's own count of deliveries so far (progress even when the probe's
   * reading lags); `eligible`: whether the link should be moving now if the source has work for it.
   */
  observe(reading: StallReading, delivered: number, eligible: boolean): void {
    const progressed = delivered !== this.lastDelivered || reading.deliveredSeq !== this.lastDeliveredSeq;
    this.lastDelivered = delivered;
    this.lastDeliveredSeq = reading.deliveredSeq;
    const work = reading.pending > 0 || (!this.opts.filtered && reading.streamLastSeq > reading.deliveredSeq);
    const now = this.now();
    if (progressed || !work) {
      this.noProgressSince = undefined;
      if (this.stalledReason !== undefined) this.end(progressed ? "deliveries resumed" : "nothing waits at the source any more");
      return;
    }
    if (!eligible) {
      this.noProgressSince = undefined; // the clock starts again once the link may move
      return;
    }
    this.noProgressSince ??= now;
    const silentMs = now - this.noProgressSince;
    if (silentMs < this.opts.stallAfterMs) return;
    if (this.stalledReason === undefined) {
      const waiting = this.opts.filtered || reading.pending > 0 ? `${reading.pending} messages pending` : `source at seq ${reading.streamLastSeq}`;
      this.stalledReason = `no delivery for ${Math.round(silentMs / 1000)} s while the source has messages for the link (${waiting}, consumer delivered up to seq ${reading.deliveredSeq})`;
      this.opts.logger.warn({ silentMs: Math.round(silentMs), pending: reading.pending, streamLastSeq: reading.streamLastSeq, deliveredSeq: reading.deliveredSeq }, "link stalled: the source has messages for it and delivers none");
      this.opts.changed(this.stalledReason);
      this.step = 0;
      this.nextStepAt = now;
    }
    if (now < this.nextStepAt || this.healing) return;
    const step = STALL_STEPS[Math.min(this.step, STALL_STEPS.length - 1)] as StallStep;
    this.step++;
    this.nextStepAt = now + this.opts.stallAfterMs;
    this.opts.counted(step);
    this.opts.logger.warn({ step, attempt: this.step }, `healing a stalled link: ${describe(step)}`);
    this.healing = true;
    this.opts
      .heal(step)
      .catch((err: unknown) => this.opts.logger.warn({ step, err: err instanceof Error ? err.message : String(err) }, "stall healing step failed"))
      .finally(() => (this.healing = false));
  }

  /** Forget the stall (the link stopped working it: standby, stopping). */
  reset(): void {
    if (this.stalledReason !== undefined) this.end("the link is not worked here any more");
    this.noProgressSince = undefined;
  }

  private end(why: string): void {
    this.opts.logger.info({ why, steps: this.step }, "link no longer stalled");
    this.stalledReason = undefined;
    this.step = 0;
    this.opts.changed(undefined);
  }
}

function describe(step: StallStep): string {
  if (step === "pull") return "a new pull";
  if (step === "consumer") return "the consumer re-created from the destination's record";
  return "a new connection to the source region";
}
