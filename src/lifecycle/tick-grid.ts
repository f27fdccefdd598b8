/**
 * Wake-ups on a shared grid of ticks, for periodic work many links do alike (lease renewals, backlog
 * polls). Waiters due at the same tick are woken by one timer callback, so the requests they send in
 * response leave in one write per connection (the NATS client flushes once per turn), not one write
 * and one timer each: a thousand idle links renewing and polling cost a few writes a second, not
 * thousands.
 *
 * A wait is never longer than asked: it ends at the last tick at or before `ms` from now (at once when
 * there is none: a wait shorter than the grid is not rounded). Lifecycle: none beyond its timers, which
 * end with their waiters (a waiter's abort takes its tick's timer with it when it was the last).
 */
export class TickGrid {
  private readonly ticks = new Map<number, { timer: NodeJS.Timeout; waiters: Set<() => void> }>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /**
   * Resolves at the last multiple of `gridMs` (on this grid's clock) at or before `ms` from now, or
   * after `ms` when that multiple is not ahead of now; at once when `signal` aborts. Never rejects.
   */
  sleep(ms: number, gridMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const now = this.now();
      const aligned = gridMs > 0 ? Math.floor((now + ms) / gridMs) * gridMs : now + ms;
      const at = Math.ceil(aligned > now ? aligned : now + ms);
      let tick = this.ticks.get(at);
      if (!tick) {
        const waiters = new Set<() => void>();
        const timer = setTimeout(() => {
          this.ticks.delete(at);
          for (const wake of waiters) wake();
        }, at - now);
        tick = { timer, waiters };
        this.ticks.set(at, tick);
      }
      const entry = tick;
      const done = () => {
        entry.waiters.delete(done);
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        done();
        if (entry.waiters.size === 0 && this.ticks.get(at) === entry) {
          clearTimeout(entry.timer);
          this.ticks.delete(at);
        }
      };
      entry.waiters.add(done);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Ticks with waiters now (for tests). */
  get pending(): number {
    return this.ticks.size;
  }
}
