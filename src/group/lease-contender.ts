import type { Logger } from "pino";
import type { CompiledLeaseOptions, LeaseValue } from "./types.js";

/**
 * A contender's view of a lease it does not hold: the revision it last saw and the local time it first
 * saw it (its expiry clock, never the stored wall time), the lease duration stored with it, whether
 * placement prefers this member, and the hold-off after the bucket was re-created. From these it
 * decides whether a free or expired key may be taken now, and how long to wait before looking again.
 */

/** A revision of the key as a contender saw it. */
export interface Observation {
  readonly revision: number;
  /** Own clock when this member first saw the revision. */
  readonly at: number;
  /** The lease duration the revision stored (its writer's `group.lease`). */
  readonly leaseMs: number;
}

export class ContenderView {
  /** The revision a contender last saw, the local time it first saw it (its expiry clock), and the lease duration it stored. */
  observed: Observation | undefined;
  /** Since when (own clock) the key has been free or expired while this member was not eligible. */
  vacantSince: number | undefined;
  /** Placement prefers this member for the lease (default: yes; a group without placement has one member per link). */
  private isEligible = true;
  /** Own clock when this member saw the bucket re-created: it takes no key until `holdOffMs()` later. */
  private recreatedAt: number | undefined;
  /** The longest lease duration this member has seen stored (its own at least). */
  private longestLeaseMs: number;
  /** `holder/leaseMs` of the last lease judged by a stored duration other than this member's (logged once). */
  private foreignLease: string | undefined;

  constructor(
    private readonly opts: Pick<CompiledLeaseOptions, "leaseMs" | "pollMs" | "now" | "onHoldOff">,
    private readonly logger: Logger,
  ) {
    this.longestLeaseMs = opts.leaseMs;
  }

  get eligible(): boolean {
    return this.isEligible;
  }

  /** Returns whether it changed. */
  setEligible(eligible: boolean): boolean {
    if (eligible === this.isEligible) return false;
    this.isEligible = eligible;
    this.vacantSince = undefined;
    return true;
  }

  /** A revision seen for the first time at `at`: its expiry clock starts. */
  observe(revision: number, at: number, value: LeaseValue | undefined): Observation {
    this.observed = { revision, at, leaseMs: this.storedLeaseMs(value) };
    this.vacantSince = undefined;
    return this.observed;
  }

  /** The bucket was re-created (incarnation `known` → `incarnation`, seen at `now`): no key is taken in it until `holdOffMs()` later. */
  recreated(now: number, known: number, incarnation: number): void {
    this.recreatedAt = now;
    this.observed = undefined;
    this.opts.onHoldOff?.("recreated_bucket");
    this.logger.warn(
      { was: new Date(known).toISOString(), now: new Date(incarnation).toISOString(), holdOffMs: this.holdOffMs() },
      "the group bucket was re-created: its revisions start over; no lease is taken in it for the longest lease seen",
    );
  }

  /**
   * The bucket, first seen at `now` (own clock), was `ageMs` old then at the latest: created at
   * `now - ageMs` or before. Younger than the hold-off, an owner of a bucket deleted just before it was
   * created may still act: no key is taken in it until it is `holdOffMs()` old. Returns whether it holds off.
   */
  youngBucket(now: number, ageMs: number): boolean {
    const holdOffMs = this.holdOffMs();
    if (ageMs >= holdOffMs) return false;
    this.recreatedAt = now - ageMs;
    this.opts.onHoldOff?.("young_bucket");
    this.logger.info(
      { ageMs: Math.round(ageMs), holdOffMs: Math.round(holdOffMs - ageMs) },
      "the group bucket is younger than group.lease (just created, or re-created while an owner of the old one may still act): no lease is taken in it until it is that old",
    );
    return true;
  }

  holdOffMs(): number {
    return this.longestLeaseMs;
  }

  /** Until the next contender step: the next poll, or the moment the observed lease would expire if sooner. */
  waitMs(): number {
    if (this.recreatedAt !== undefined) {
      const holdOffLeft = this.recreatedAt + this.holdOffMs() - this.opts.now();
      return Math.max(1, Math.min(this.opts.pollMs, holdOffLeft + 1));
    }
    const seen = this.observed;
    if (!seen || !this.isEligible) return this.opts.pollMs;
    const expiresIn = seen.at + seen.leaseMs - this.opts.now();
    return Math.max(1, Math.min(this.opts.pollMs, expiresIn + 1));
  }

  /**
   * A free or expired lease: taken by an eligible member at once, by another after a further leaseMs;
   * by none while the bucket was just re-created (see `LinkLease.bucketRecreated`).
   */
  mayTake(seenAt: number): boolean {
    if (this.recreatedAt !== undefined) {
      if (seenAt - this.recreatedAt < this.holdOffMs()) return false;
      this.recreatedAt = undefined;
    }
    if (this.isEligible) return true;
    this.vacantSince ??= seenAt;
    return seenAt - this.vacantSince >= this.opts.leaseMs;
  }

  /** Why the key is taken: `reason`, and for a member placement does not prefer, how long it waited. */
  why(reason: string): string {
    return this.isEligible ? reason : `${reason}; no preferred member took it for ${this.opts.leaseMs}ms`;
  }

  /** Logs (once per holder and duration) a lease judged by a stored duration other than this member's. */
  judgedBy(holder: string, leaseMs: number): void {
    if (leaseMs === this.opts.leaseMs) return;
    const which = `${holder}/${leaseMs}`;
    if (this.foreignLease === which) return;
    this.foreignLease = which;
    this.logger.warn(
      { holder, storedLeaseMs: leaseMs, leaseMs: this.opts.leaseMs },
      `the lease of ${holder} is judged by the duration it stored (${leaseMs} ms), not this member's group.lease (${this.opts.leaseMs} ms): the group's members disagree on group.lease`,
    );
  }

  /** The lease duration a value stored (its writer's `group.lease`); this member's own when it has none. */
  private storedLeaseMs(value: LeaseValue | undefined): number {
    const ms = value?.leaseMs;
    const stored = typeof ms === "number" && Number.isFinite(ms) && ms > 0 ? ms : this.opts.leaseMs;
    // In member mode the owner is bounded by its session, whose chain a re-created bucket breaks: its
    // own group.lease is what a hold-off after that must cover.
    const member = value?.session !== undefined ? value.memberLeaseMs : undefined;
    this.longestLeaseMs = Math.max(this.longestLeaseMs, typeof member === "number" && member > 0 ? member : stored);
    return stored;
  }
}
