/**
 * The guard claim: entries ask the guard for a verdict (relay, duplicate, stale, in-flight), one round
 * trip per batch, batches in arrival order, one call in flight. A duplicate or stale message is
 * finished without a publish; one whose claim another owner holds waits where it is, and nothing newer
 * passes it. A message larger than the destination takes is refused before the guard sees it.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { toRelayError } from "../../errors.js";
import { tokenSource } from "../../guard/items.js";
import type { ClaimResult, Guard } from "../../guard/types.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import type { Entry } from "../entry.js";
import { wireSize } from "../entry.js";
import type { FencingTokenOption, PathState, Scheduler } from "./common.js";
import { claimedItem } from "./common.js";
import type { DeadLetters } from "./dead-letter.js";
import type { Health } from "./health.js";
import type { SourceAckStage } from "./source-ack.js";
import type { Tally } from "./tally.js";
import type { UncommittedVersions } from "./versions.js";

export interface ClaimNeeds {
  readonly link: LinkConfig;
  readonly guard: Guard;
  readonly metrics: Pick<RelayMetrics, "guardDuration" | "guardBuckets" | "held">;
  readonly logger: Logger;
  readonly state: Readonly<Pick<PathState, "destination" | "halted">>;
  /** The fencing token of the lease the relay holds the link under, for the guard's fence. */
  readonly fencingToken: () => FencingTokenOption;
  readonly health: Pick<Health, "guardBlockedUntil" | "guardFailed" | "guardRecovered">;
  readonly versions: Pick<UncommittedVersions, "get" | "set">;
  readonly tally: Pick<Tally, "correct" | "debugOn" | "debug">;
  readonly deadLetters: Pick<DeadLetters, "oversized">;
  readonly sourceAck: Pick<SourceAckStage, "finish">;
  readonly scheduler: Scheduler;
}

export class ClaimStage {
  private readonly label: { link: string };
  /** Entries waiting for a guard verdict, in arrival order. */
  private queue: Entry[] = [];
  private inFlight = false;
  /** The token of a claim call that failed: its retry reuses it (see next). */
  private retryToken: string | undefined;
  private readonly nextToken = tokenSource();
  /** A claim another owner holds: claims (and so publishes past it) wait until then. */
  private holdUntilMs = 0;
  /** Messages up to this source seq were held by a previous owner (ordered recovery): their claims are taken over. */
  takeoverUpTo = 0;

  constructor(private readonly needs: ClaimNeeds) {
    this.label = { link: needs.link.name };
  }

  /** Until when (ms) claims wait for a claim another owner holds. */
  get holdUntil(): number {
    return this.holdUntilMs;
  }

  /** A new entry: queued for its claim (without a guard it is ready at once). */
  add(entry: Entry): void {
    if (this.needs.guard.kind === "none") entry.state = "ready";
    else if (this.screen(entry)) this.queue.push(entry);
  }

  /** The destination's limits are known now: what waited for them is screened. */
  screenQueued(): void {
    for (const e of this.queue) this.screen(e);
  }

  /**
   * A message larger than the destination takes is refused before the guard sees it: a claimed version
   * would make older versions of its entity stale although it is never applied. False when it was
   * refused (dead-lettered, or the link halted).
   */
  private screen(entry: Entry): boolean {
    const dest = this.needs.state.destination;
    if (!dest || entry.state !== "claim" || wireSize(entry) <= dest.maxMessageBytes) return true;
    this.needs.deadLetters.oversized(entry, dest);
    return false;
  }

  /**
   * One claim call in flight at a time, a batch each, in arrival order. (Two in flight were measured:
   * with Redis on the same cores as the relay, the extra, smaller calls cost more than the overlap.)
   */
  next(): void {
    const now = Date.now();
    const { state, link } = this.needs;
    // Claims wait for the destination's limits: an oversized message must be refused before its claim.
    if (state.halted || !state.destination || this.inFlight || now < this.needs.health.guardBlockedUntil || now < this.holdUntilMs || this.queue.length === 0) return;
    // A previous owner's messages (ordered recovery) go in batches of their own, taking its claims over.
    const takeover = (this.queue[0]?.seq ?? Infinity) <= this.takeoverUpTo;
    let n = 0;
    const limit = Math.min(link.batchSize, this.queue.length);
    while (n < limit && ((this.queue[n]?.seq ?? Infinity) <= this.takeoverUpTo) === takeover) n++;
    const batch = this.queue.splice(0, n).filter((e) => e.state === "claim");
    if (batch.length === 0) return;
    // A retry after a failed call reuses its token: claims that landed although the reply was lost
    // are then recognised as ours.
    this.send(batch, (this.retryToken ??= this.nextToken()), takeover);
  }

  private send(batch: Entry[], token: string, takeover: boolean): void {
    const { guard, health } = this.needs;
    this.inFlight = true;
    const end = this.needs.metrics.guardDuration.startTimer({ ...this.label, op: "claim" });
    guard
      .claim(
        batch.map((e) => e.identity),
        token,
        { ...(takeover ? { takeover } : {}), ...this.needs.fencingToken() },
      )
      .then((results) => {
        end();
        if (guard.liveBuckets !== undefined) this.needs.metrics.guardBuckets.set(this.label, guard.liveBuckets);
        this.retryToken = undefined;
        health.guardRecovered();
        const held: Entry[] = [];
        batch.forEach((e, i) => {
          if (this.apply(e, results[i]) === "held") held.push(e);
        });
        if (held.length > 0) this.hold(held);
      })
      .catch((err: unknown) => {
        // Nothing was claimed that we know of: the batch goes back to the front, in order.
        this.queue = [...batch.filter((e) => e.state === "claim"), ...this.queue];
        health.guardFailed(err);
      })
      .finally(() => {
        this.inFlight = false;
        this.needs.scheduler.schedule();
      });
  }

  private apply(entry: Entry, result: ClaimResult | undefined): "held" | undefined {
    if (entry.state !== "claim") return undefined; // abandoned meanwhile
    const { tally, sourceAck } = this.needs;
    const decision = result?.decision ?? "in-flight";
    if (tally.debugOn) tally.debug(decision, entry.identity.id, { storedVersion: result?.storedVersion });
    switch (decision) {
      case "relay": {
        entry.token = result?.token;
        entry.guardKey = result?.key;
        const { entity, version } = entry.identity;
        if (entity !== undefined && version !== undefined) {
          // The guard compares with committed versions; a newer version of this entity that we claimed
          // in an earlier batch and have not committed yet makes this one stale too.
          const pending = this.needs.versions.get(entity);
          if (pending !== undefined && version <= pending) {
            this.needs.guard.release([claimedItem(entry)]).catch(() => undefined); // else it expires
            tally.debug("stale", entry.identity.id, { uncommittedVersion: pending });
            tally.correct("stale_version");
            sourceAck.finish(entry, "stale");
            return undefined;
          }
          this.needs.versions.set(entity, version);
        }
        entry.state = "ready";
        return undefined;
      }
      case "duplicate":
        tally.correct("guard_duplicate");
        sourceAck.finish(entry, "duplicate");
        return undefined;
      case "stale":
        tally.correct("stale_version");
        sourceAck.finish(entry, "stale");
        return undefined;
      case "in-flight":
        return "held";
    }
  }

  /**
   * Claims another owner still holds (a crashed or paused process, a rollout's old pod): the messages
   * wait where they are, and nothing after them is published, until that owner commits (then they are
   * duplicates) or its claims expire (then they are ours). Skipping them would let newer messages
   * overtake them in the destination.
   */
  private hold(held: Entry[]): void {
    this.queue = [...held, ...this.queue]; // back to the front, in arrival order
    const waitMs = Math.min(1_000, Math.max(50, Math.floor(this.needs.link.ackWaitMs / 10)));
    this.holdUntilMs = Date.now() + waitMs;
    this.needs.scheduler.scheduleAt(this.holdUntilMs);
    this.needs.metrics.held.inc(this.label, held.length);
    const first = held[0];
    if (first) {
      this.needs.logger.info({ id: first.identity.id, seq: first.seq, held: held.length }, "claim held by another owner: waiting for it to commit or expire before relaying newer messages");
    }
  }

  /** Releases the claims of entries that were not published (the pipeline is abandoned); they expire by TTL otherwise. */
  async release(claimed: readonly Entry[]): Promise<void> {
    await this.needs.guard.release(claimed.map((e) => claimedItem(e))).catch((err: unknown) => {
      this.needs.logger.warn({ err: toRelayError(err).message }, "could not release claims on stop; they expire by TTL");
    });
  }

  /** Forgets what waits for a claim (the pipeline is abandoned). */
  clear(): void {
    this.queue = [];
  }
}
