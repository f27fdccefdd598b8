import type { Logger } from "pino";
import type { LinkState } from "../observability/metrics.js";
import type { BacklogReading } from "./backlog.js";

/**
 * While a link catches up, one log line every interval with what an operator asks during a replay: how
 * many messages are still behind, how old the oldest is, how fast the backlog shrinks and when it will be
 * done. The state change already logs `catching-up` and `live`; these lines fill the time between.
 */
export class CatchUpLog {
  private last: { readonly at: number; readonly messages: number } | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Called with every backlog reading. */
  observe(state: LinkState, reading: BacklogReading): void {
    if (state !== "catching-up" || this.intervalMs <= 0) {
      this.last = undefined;
      return;
    }
    const t = this.now();
    if (!this.last) {
      this.last = { at: t, messages: reading.messages };
      return;
    }
    const elapsed = t - this.last.at;
    if (elapsed < this.intervalMs) return;
    // Net drain: relayed minus newly published, so the ETA holds while producers keep writing.
    const drainRate = ((this.last.messages - reading.messages) * 1000) / elapsed;
    const etaSeconds = drainRate > 0 ? Math.ceil(reading.messages / drainRate) : undefined;
    const age = Math.round(reading.ageSeconds);
    this.logger.info(
      {
        backlogMessages: reading.messages,
        backlogAgeSeconds: age,
        drainRate: Math.round(drainRate),
        ...(etaSeconds === undefined ? {} : { etaSeconds }),
      },
      `catching up: ${reading.messages} messages behind, oldest ${age} s old, ` +
        (etaSeconds === undefined ? "backlog not shrinking" : `shrinking by ${Math.round(drainRate)}/s, about ${etaSeconds} s to go`),
    );
    this.last = { at: t, messages: reading.messages };
  }
}

/** A resync's progress every interval: snapshot messages sent and still to send. */
export class ResyncLog {
  private lastAt: number;

  constructor(
    private readonly logger: Logger,
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.lastAt = now();
  }

  observe(resyncId: string, sent: number, remaining: number): void {
    if (this.intervalMs <= 0) return;
    const t = this.now();
    if (t - this.lastAt < this.intervalMs) return;
    this.lastAt = t;
    this.logger.info({ resyncId, sent, remaining }, `resync: ${sent} snapshot messages sent, ${remaining} to go`);
  }
}
