/**
 * The callers waiting in `LinkLease.acquired()` for this member to become owner: resolved with the
 * lease revision when it does, rejected when the lease stops or its loop fails, or by their own abort
 * signal.
 */

interface Waiter {
  resolve(leaseRevision: number): void;
  reject(err: unknown): void;
}

export class AcquireWaiters {
  private readonly waiters = new Set<Waiter>();

  /** A wait until `resolveAll` or `rejectAll`; rejects with `signal.reason` when `signal` aborts first. */
  wait(signal?: AbortSignal): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const onAbort = () => waiter.reject(signal?.reason);
      const settle = () => {
        this.waiters.delete(waiter);
        signal?.removeEventListener("abort", onAbort);
      };
      const waiter: Waiter = {
        resolve: (leaseRevision) => (settle(), resolve(leaseRevision)),
        reject: (err) => (settle(), reject(err as Error)),
      };
      this.waiters.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  resolveAll(leaseRevision: number): void {
    for (const w of [...this.waiters]) w.resolve(leaseRevision);
  }

  rejectAll(err: unknown): void {
    for (const w of [...this.waiters]) w.reject(err);
  }
}

/** The callbacks of `LinkLease.onLost`: each runs once per involuntary loss; one that throws is logged, the rest still run. */
export class LostListeners {
  private readonly callbacks: ((reason: string) => void)[] = [];

  add(cb: (reason: string) => void): void {
    this.callbacks.push(cb);
  }

  fire(reason: string, onThrow: (err: unknown) => void): void {
    for (const cb of this.callbacks) {
      try {
        cb(reason);
      } catch (err) {
        onThrow(err);
      }
    }
  }
}

/** What a wait rejects with when the lease stops. */
export function stoppedError(): Error {
  return new DOMException("lease stopped", "AbortError");
}
