import type { CompiledLeaseOptions } from "./types.js";

/**
 * The owner's side of the lease clock: its deadline (the local time a successful write was *sent* +
 * the leaseMs that write stored − marginMs), when the next renewal is due, and a timer that ends
 * ownership promptly when the deadline passes, even while a renewal hangs. Monotonic ms throughout.
 */
export class OwnerDeadline {
  /** Monotonic ms; the owner is valid while `now() < at`. */
  private deadline = -Infinity;
  private nextRenewAt = 0;
  private timer: NodeJS.Timeout | undefined;

  /**
   * `owning`: whether the member still owns the lease when the timer fires; `onPassed`: the deadline
   * passed while it did.
   */
  constructor(
    private readonly opts: Pick<CompiledLeaseOptions, "leaseMs" | "renewMs" | "marginMs" | "now">,
    private readonly owning: () => boolean,
    private readonly onPassed: () => void,
  ) {}

  /** The deadline itself (-Infinity: none). */
  get at(): number {
    return this.deadline;
  }

  /** The deadline has not passed yet. */
  ahead(): boolean {
    return this.opts.now() < this.deadline;
  }

  /** Ms until the next renewal is due (≤ 0: due now). */
  renewalDueIn(): number {
    return this.nextRenewAt - this.opts.now();
  }

  /** A renewal sent at `sentAt` is under way: until it succeeds, retry soon (several attempts fit before the deadline). */
  retrySoon(sentAt: number): void {
    this.nextRenewAt = sentAt + Math.max(this.opts.renewMs / 4, 10);
  }

  /** The next renewal is due at once. */
  renewNow(): void {
    this.nextRenewAt = this.opts.now();
  }

  /**
   * A successful write sent at `sentAt` (local monotonic ms) keeps us valid until sentAt + leaseMs −
   * margin: the leaseMs that write stored (`encodeLeaseValue`), so never past what contenders judge by.
   */
  extend(sentAt: number, leaseMs = this.opts.leaseMs): void {
    this.deadline = sentAt + leaseMs - this.opts.marginMs;
    // A write in member mode stores a long lease (lease-value.ts `writeLeaseMs`): rewritten at half of it.
    this.nextRenewAt = sentAt + (leaseMs === this.opts.leaseMs ? this.opts.renewMs : leaseMs / 2);
    this.arm();
  }

  /** No deadline (not valid) until the next `extend`, and no timer. */
  clear(): void {
    this.deadline = -Infinity;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Calls `onPassed` promptly when the deadline passes, even while a renewal hangs. */
  private arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () => {
        if (!this.owning()) return;
        if (this.opts.now() >= this.deadline) this.onPassed();
        else this.arm();
      },
      Math.max(0, this.deadline - this.opts.now()),
    );
    this.timer.unref();
  }
}
