/**
 * This member's session: the chain of compare-and-set writes of its own member key (membership.ts),
 * which renews every lease it holds in member mode at once (lease.ts) instead of one write per lease.
 *
 * - A session is named by the revision of its first write; each later write of the chain stores that
 *   name and is a CAS on the chain's last revision, so a write of the key by anyone else (a contender
 *   evicting a member that stopped renewing, see session-judge.ts) ends the chain for good.
 * - Valid until the local time its last successful write was *sent* + leaseMs − margin: the same
 *   arithmetic as a lease's own deadline (lease-deadline.ts). A contender evicts only a revision it has
 *   seen unchanged for that member's lease by its own clock, and receiving a write is after sending it.
 *
 * No I/O here: membership drives it (`renewed`, `ended`), leases read it (`current`, `validFor`) before
 * every publish, commit and ack, and hear when it ends or lapses (`onChange`).
 */
export class MemberSession {
  private session: number | undefined;
  private deadline = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<() => void>();

  constructor(
    private readonly opts: { readonly leaseMs: number; readonly marginMs: number; readonly now: () => number; readonly onEnded?: () => void },
  ) {}

  /** The session valid now (its deadline ahead), or undefined. */
  current(): number | undefined {
    return this.session !== undefined && this.opts.now() < this.deadline ? this.session : undefined;
  }

  /** `session` is this member's session and its deadline has not passed. */
  validFor(session: number): boolean {
    return session === this.session && this.opts.now() < this.deadline;
  }

  /** A write of session `session` sent at `sentAt` (monotonic ms) succeeded (the first one starts it). */
  renewed(session: number, sentAt: number): void {
    if (this.session !== undefined && this.session !== session) this.ended();
    this.session = session;
    this.deadline = Math.max(this.deadline, sentAt + this.opts.leaseMs - this.opts.marginMs);
    this.arm();
  }

  /** The chain ended (`broken`: by another write of the key, or the bucket is gone; else this member stops): never valid again. */
  ended(broken = false): void {
    const had = this.session !== undefined;
    if (had && broken) this.opts.onEnded?.();
    this.session = undefined;
    this.deadline = -Infinity;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (had) this.notify();
  }

  /** `cb` runs when the session ends or its deadline passes without a renewal; returns an unsubscribe. */
  onChange(cb: () => void): () => void {
    this.listeners.add(cb);
    return () => this.listeners.delete(cb);
  }

  private notify(): void {
    for (const cb of this.listeners) cb();
  }

  /** Tells the leases promptly when the deadline passes without a renewal (they stop owning). */
  private arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        if (this.opts.now() >= this.deadline) this.notify();
        else this.arm();
      },
      Math.max(0, this.deadline - this.opts.now()),
    );
    this.timer.unref();
  }
}

/**
 * How long a lease write in member mode keeps its writer the owner by itself (the `leaseMs` it stores):
 * relays that predate member mode judge a lease only by its key's revision, so the owner still rewrites
 * its key within this; its validity is also bounded by its session, which a contender of this version
 * ends by eviction within about `group.lease`.
 */
export function memberModeKeyLeaseMs(leaseMs: number): number {
  return Math.max(6 * leaseMs, 30_000);
}

/** Member keys live under this prefix in the group bucket, beside the leases. */
export const MEMBER_PREFIX = "_group.members";

/** The key of member `id` in the group bucket. */
export function memberKeyOf(id: string): string {
  return `${MEMBER_PREFIX}.${id.replace(/[^-\w]/g, "_")}`;
}
