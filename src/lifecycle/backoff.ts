/** Resolves after `ms`, or at once when `signal` aborts (never rejects: callers check `signal.aborted`). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Exponential backoff with full jitter ("decorrelated" retries from many relays do not synchronise
 * against a recovering server). `next()` returns the delay to wait; `reset()` after a success.
 */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs = 100,
    private readonly maxMs = 5_000,
    private readonly random: () => number = Math.random,
  ) {}

  next(): number {
    const cap = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(this.attempt, 20));
    this.attempt++;
    return Math.round(cap / 2 + (this.random() * cap) / 2);
  }

  get attempts(): number {
    return this.attempt;
  }

  reset(): void {
    this.attempt = 0;
  }
}
