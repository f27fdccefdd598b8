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
  private readonly periods = new Map<number, { timer: NodeJS.Timeout | undefined; fns: Set<() => void> }>();

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

  /**
   * Calls `fn` at every multiple of `everyMs` on this grid's clock, with every other function given the
   * same period, in one timer callback, until the returned function is called. Nothing is allocated per
   * call: for work done by every link every second.
   */
  every(everyMs: number, fn: () => void): () => void {
    let period = this.periods.get(everyMs);
    if (!period) {
      const fns = new Set<() => void>();
      const entry = { fns, timer: undefined as NodeJS.Timeout | undefined };
      const arm = () => {
        const now = this.now();
        const next = (Math.floor(now / everyMs) + 1) * everyMs;
        entry.timer = setTimeout(() => {
          arm();
          for (const f of fns) {
            try {
              f();
            } catch (err) {
              // The others still run this tick; the error surfaces as it would from a timer of its own.
              queueMicrotask(() => {
                throw err;
              });
            }
          }
        }, next - now);
      };
      arm();
      period = entry;
      this.periods.set(everyMs, period);
    }
    const mine = period;
    mine.fns.add(fn);
    return () => {
      mine.fns.delete(fn);
      if (mine.fns.size === 0 && this.periods.get(everyMs) === mine) {
        clearTimeout(mine.timer);
        this.periods.delete(everyMs);
      }
    };
  }

  /** Ticks with waiters now, and periods with functions (for tests). */
  get pending(): number {
    return this.ticks.size + this.periods.size;
  }
}
