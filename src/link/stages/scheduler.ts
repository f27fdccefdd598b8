/**
 * When a link's pump runs: on the next turn of the event loop (coalesced while the pipeline holds
 * little), or at the earliest deadline a stage asked for (a backoff, a held claim, a fenced ack).
 */
import type { Scheduler } from "./common.js";

/**
 * A pipeline holding fewer messages than this works them after COALESCE_MS rather than on the next turn
 * of the event loop: a trickle of deliveries then shares one publish write and one ack (at a steady
 * 5,000 msgs/s, relay CPU per message 9.3 → 8.3 s per 100k in `PROFILE_RATE=5000 npm run bench:profile`),
 * for at most 2 ms more latency. A backlog (a full window) is worked at once, as before.
 */
const COALESCE_BELOW = 64;
const COALESCE_MS = 2;

export class PumpScheduler implements Scheduler {
  private pumpScheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryAt = 0;

  /** `pump`: the work to run; `held`: how many messages the pipeline holds now. */
  constructor(
    private readonly pump: () => void,
    private readonly held: () => number,
  ) {}

  schedule(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    if (this.held() >= COALESCE_BELOW) setImmediate(this.runPump);
    else setTimeout(this.runPump, COALESCE_MS);
  }

  /** The scheduled pump: one function for the pipeline's life, not a closure per schedule. */
  private readonly runPump = (): void => {
    this.pumpScheduled = false;
    this.pump();
  };

  /** Arms one timer for the earliest deadline asked for; a later deadline never pushes it back. */
  scheduleAt(until: number): void {
    if (this.retryTimer && this.retryAt <= until) return;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryAt = until;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.schedule();
    }, Math.max(0, until - Date.now()));
  }

  /** Stops the deadline timer (the pipeline is abandoned); a later deadline arms a new one. */
  cancel(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }
}
