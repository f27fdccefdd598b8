/**
 * Trouble on a link's path and the way back: the publish and guard backoffs (how long publishing, and
 * claims and commits, wait after a failure) and the events that tell the link it is troubled or healthy.
 */
import type { Logger } from "pino";
import { ErrorCodes, toRelayError } from "../../errors.js";
import type { RelayError } from "../../errors.js";
import { Backoff } from "../../lifecycle/backoff.js";
import type { PipelineEvents, Scheduler } from "./common.js";
import type { Tally } from "./tally.js";

export interface HealthNeeds {
  readonly events: Pick<PipelineEvents, "publishTrouble" | "guardTrouble" | "healthy">;
  readonly logger: Logger;
  readonly tally: Pick<Tally, "recordError">;
  readonly scheduler: Scheduler;
}

export class Health {
  private readonly publishBackoff = new Backoff(100, 5_000);
  private readonly guardBackoff = new Backoff(100, 5_000);
  private blockedPublishUntil = 0;
  private blockedGuardUntil = 0;
  private troubled = false;

  constructor(private readonly needs: HealthNeeds) {}

  /** Nothing is published before this (ms): the backoff after a failed publish. */
  get publishBlockedUntil(): number {
    return this.blockedPublishUntil;
  }

  /** Nothing is claimed or committed before this (ms): the backoff after a failed guard call. */
  get guardBlockedUntil(): number {
    return this.blockedGuardUntil;
  }

  /**
   * A publish failed and `rolled` messages were rolled back: publishing waits a backoff. A 429
   * (DESTINATION_BUSY) is backpressure: the same backoff, but no error and no trouble (the link stays
   * live; `relay_publish_backpressure_total` counts it).
   */
  publishFailed(err: RelayError, rolled: number): void {
    if (err.code === ErrorCodes.DESTINATION_BUSY) {
      this.blockedPublishUntil = Date.now() + this.publishBackoff.next();
      this.needs.scheduler.scheduleAt(this.blockedPublishUntil);
      this.needs.logger.debug({ rolledBack: rolled, until: this.blockedPublishUntil }, "destination busy (429): publishing again after a backoff");
      return;
    }
    this.needs.tally.recordError(err);
    this.troubled = true;
    this.blockedPublishUntil = Date.now() + this.publishBackoff.next();
    this.needs.scheduler.scheduleAt(this.blockedPublishUntil);
    if (rolled > 0) this.needs.logger.warn({ code: err.code, err: err.message, rolledBack: rolled }, "publish failed; retrying in order");
    this.needs.events.publishTrouble(err);
  }

  /** A claim or commit call failed: claims and commits wait a backoff (or a second, when fenced off). */
  guardFailed(err: unknown): void {
    const relayErr = toRelayError(err, ErrorCodes.GUARD_UNAVAILABLE);
    this.needs.tally.recordError(relayErr);
    if (relayErr.code === ErrorCodes.LEASE_FENCED) {
      // Another relay owns the link under a newer lease revision: nothing of this batch was claimed or
      // committed. What this relay holds stays unacked; the link drops it for the new owner.
      this.needs.logger.warn({ code: relayErr.code, err: relayErr.message }, "guard fenced this relay off: another relay owns the link");
      this.blockedGuardUntil = Date.now() + 1_000;
      this.needs.scheduler.scheduleAt(this.blockedGuardUntil);
      return;
    }
    this.troubled = true;
    this.blockedGuardUntil = Date.now() + this.guardBackoff.next();
    this.needs.scheduler.scheduleAt(this.blockedGuardUntil);
    this.needs.events.guardTrouble(relayErr);
  }

  guardRecovered(): void {
    this.guardBackoff.reset();
    this.recovered();
  }

  publishRecovered(): void {
    this.publishBackoff.reset();
    this.recovered();
  }

  private recovered(): void {
    if (!this.troubled) return;
    this.troubled = false;
    this.needs.events.healthy();
  }
}
