/**
 * The guard commit: what the destination stored (in PubAck order) is committed in the guard, one round
 * trip per batch, one call in flight, before the source ack. A failed commit keeps the messages (they
 * are in the destination) and commits them again when the guard is back. Without a guard there is
 * nothing to commit: a stored message goes straight to the source ack.
 */
import type { LinkConfig } from "../../config/types.js";
import type { Guard } from "../../guard/types.js";
import type { MessageOutcome, RelayMetrics } from "../../observability/metrics.js";
import type { Entry } from "../entry.js";
import type { FencingTokenOption, Scheduler } from "./common.js";
import { claimedItem } from "./common.js";
import type { Health } from "./health.js";
import type { SourceAckStage } from "./source-ack.js";

export interface CommitNeeds {
  readonly link: LinkConfig;
  readonly guard: Guard;
  readonly metrics: Pick<RelayMetrics, "guardDuration" | "guardBuckets">;
  readonly owns: () => boolean;
  /** The fencing token of the lease the relay holds the link under, for the guard's fence. */
  readonly fencingToken: () => FencingTokenOption;
  readonly health: Pick<Health, "guardBlockedUntil" | "guardFailed" | "guardRecovered">;
  readonly sourceAck: Pick<SourceAckStage, "finish">;
  readonly scheduler: Scheduler;
}

/** How a finished message counts: dead-lettered, a broker duplicate, or relayed. */
export function outcomeOf(entry: Entry): MessageOutcome {
  if (entry.deadLetterReason !== undefined) return "dead_lettered";
  return entry.brokerDuplicate ? "duplicate" : "relayed";
}

export class CommitStage {
  private readonly label: { link: string };
  /** Entries with a PubAck waiting for the guard commit, in PubAck order. */
  private queue: Entry[] = [];
  private inFlight = false;

  constructor(private readonly needs: CommitNeeds) {
    this.label = { link: needs.link.name };
  }

  /** The message is in the destination: committed next (or, without a guard, finished at once). */
  add(entry: Entry): void {
    if (this.needs.guard.kind === "none") {
      this.needs.sourceAck.finish(entry, outcomeOf(entry));
    } else {
      this.queue.push(entry);
      this.needs.scheduler.schedule();
    }
  }

  /** Sends the next batch, unless a commit is in flight, the guard is in backoff, or the lease is not valid. */
  next(): void {
    if (this.inFlight || Date.now() < this.needs.health.guardBlockedUntil || this.queue.length === 0 || !this.needs.owns()) return;
    const batch = this.queue.splice(0, this.needs.link.batchSize).filter((e) => e.state === "published");
    if (batch.length > 0) this.send(batch);
  }

  private send(batch: Entry[]): void {
    const { guard, health } = this.needs;
    this.inFlight = true;
    for (const e of batch) e.state = "committing";
    const withTokens = batch.filter((e) => e.token !== undefined);
    const end = this.needs.metrics.guardDuration.startTimer({ ...this.label, op: "commit" });
    guard
      // A dead-lettered message was not applied: its id is done, its entity's version does not move.
      .commit(withTokens.map((e) => claimedItem(e, e.deadLetterReason === undefined)), this.needs.fencingToken())
      .then(() => {
        end();
        if (guard.liveBuckets !== undefined) this.needs.metrics.guardBuckets.set(this.label, guard.liveBuckets);
        health.guardRecovered();
        for (const e of batch) this.needs.sourceAck.finish(e, outcomeOf(e));
      })
      .catch((err: unknown) => {
        // Already in the destination: keep it, commit again when the guard is back, then ack.
        const back = batch.filter((e) => e.state === "committing");
        for (const e of back) e.state = "published";
        this.queue = [...back, ...this.queue];
        health.guardFailed(err);
      })
      .finally(() => {
        this.inFlight = false;
        this.needs.scheduler.schedule();
      });
  }

  /** Forgets what waits for a commit (the pipeline is abandoned). */
  clear(): void {
    this.queue = [];
  }
}
