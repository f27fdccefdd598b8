/**
 * A retried publish of a versioned message is judged again before it goes. The guard judged it once,
 * at its claim; when its publish failed while later ones pipelined behind it were stored (a
 * destination leader dying under a window), the retry lands after them. If a newer version of its
 * entity is among them, or was committed in the guard since (by any writer), publishing it would
 * move the entity backwards in the destination: it is stale instead (acked at the source, never
 * published, its claim released, counted as a `stale_version` correction and in
 * `relay_stale_retries_total`, logged with its ids). Newer versions are looked for in two places:
 * the guard's committed versions, read once per batch of retries before the first goes; and what
 * this link stored while it held the message (SentVersions: PubAcked, maybe not committed yet),
 * checked at the moment of the publish, after waiting for the answer to any newer version's publish
 * still on its way.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import type { Guard } from "../../guard/types.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import type { Entry } from "../entry.js";
import type { Scheduler } from "./common.js";
import { claimedItem } from "./common.js";
import type { Health } from "./health.js";
import type { SourceAckStage } from "./source-ack.js";
import type { Tally } from "./tally.js";
import type { SentVersions } from "./versions.js";
import type { EntryWindow } from "./window.js";

export interface RetryJudgeNeeds {
  readonly link: LinkConfig;
  readonly guard: Guard;
  readonly logger: Logger;
  /** Whether this relay still owns the link: a retry is finished (acked) only then, else it waits. */
  readonly owns: () => boolean;
  readonly metrics: Pick<RelayMetrics, "staleRetries" | "guardDuration">;
  readonly window: Pick<EntryWindow, "entries">;
  readonly sent: Pick<SentVersions, "highestStored" | "highestUnanswered">;
  readonly health: Pick<Health, "guardBlockedUntil" | "guardFailed" | "guardRecovered">;
  readonly tally: Pick<Tally, "correct">;
  readonly sourceAck: Pick<SourceAckStage, "finish">;
  readonly scheduler: Scheduler;
}

/** Entities read from the guard in one call at most (a rollback can retry a whole window). */
const READ_LIMIT = 1_024;
/** How often a retry waiting for a newer version's answer looks again (ms). */
const ANSWER_POLL_MS = 20;

export type RetryVerdict = "publish" | "stale" | "wait";

export class RetryJudge {
  private readonly label: { link: string };
  /** A read of the guard's versions is under way: the retries it covers wait for it. */
  private reading = false;
  /** The retry waiting for a newer version's publish to be answered, and since when (ms). */
  private waiting: Entry | undefined;
  private waitingSince = 0;

  constructor(private readonly needs: RetryJudgeNeeds) {
    this.label = { link: needs.link.name };
  }

  /** Whether `entry` is judged again before this publish: a retry of a versioned message, with a guard. */
  applies(entry: Entry): boolean {
    return (
      entry.firstAttemptMs > 0 &&
      entry.deadLetterReason === undefined &&
      entry.identity.entity !== undefined &&
      entry.identity.version !== undefined &&
      this.needs.guard.kind !== "none"
    );
  }

  /**
   * The verdict for a retry at the publish cursor (`index` in the window): `publish`, `stale` (finished
   * here: acked, counted, logged), or `wait` (the guard's versions are being read; the pump runs again
   * when they are in).
   */
  judge(entry: Entry, index: number): RetryVerdict {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined) return "publish";
    if (entry.judgedAttempt !== entry.attempt && this.needs.guard.readVersions !== undefined) {
      this.read(index);
      return "wait";
    }
    // What this link stored since (maybe not committed yet): checked at the very moment of the
    // publish, so a newer version whose commit overtook the guard read is still seen.
    const stored = this.needs.sent.highestStored(entity);
    if (stored !== undefined && stored > version) {
      if (!this.needs.owns()) return "wait"; // finished (acked) once the lease is valid again
      this.stale(entry, { storedVersion: stored });
      return "stale";
    }
    // A newer version whose publish is not answered yet may be stored: its answer (within the publish
    // timeout) decides. Bounded, in case an answer never comes.
    const unanswered = this.needs.sent.highestUnanswered(entity);
    if (unanswered !== undefined && unanswered > version) {
      const now = Date.now();
      if (this.waiting !== entry) {
        this.waiting = entry;
        this.waitingSince = now;
      }
      if (now - this.waitingSince < this.needs.link.publishTimeoutMs + 1_000) {
        this.needs.scheduler.scheduleAt(now + ANSWER_POLL_MS);
        return "wait";
      }
      this.needs.logger.warn(
        { id: entry.identity.id, seq: entry.seq, entity, version, unansweredVersion: unanswered },
        "retried publish: a newer version of its entity is still unanswered after the publish timeout; publishing",
      );
    }
    this.waiting = undefined;
    return "publish";
  }

  /** Reads the committed versions for the retries from `from` on that need it, up to READ_LIMIT entities. */
  private read(from: number): void {
    const { window, health, guard, scheduler } = this.needs;
    const readVersions = guard.readVersions?.bind(guard);
    if (this.reading || !readVersions) return;
    if (Date.now() < health.guardBlockedUntil) {
      scheduler.scheduleAt(health.guardBlockedUntil);
      return;
    }
    const batch: { entry: Entry; attempt: number }[] = [];
    const entities = new Set<string>();
    for (let i = from; i < window.entries.length && entities.size < READ_LIMIT; i++) {
      const e = window.entries[i];
      if (!e || e.state === "claim") break; // nothing is published past an undecided entry anyway
      if (e.state !== "ready" || !this.applies(e) || e.judgedAttempt === e.attempt) continue;
      batch.push({ entry: e, attempt: e.attempt });
      entities.add(e.identity.entity as string);
    }
    if (batch.length === 0) return;
    this.reading = true;
    const end = this.needs.metrics.guardDuration.startTimer({ ...this.label, op: "read_versions" });
    readVersions([...entities])
      .then((committed) => {
        end();
        health.guardRecovered();
        for (const { entry, attempt } of batch) {
          // Stored meanwhile (a late PubAck of its earlier attempt), or finished: nothing to judge.
          if (entry.state !== "ready" || entry.attempt !== attempt) continue;
          const stored = committed.get(entry.identity.entity as string);
          if (stored === undefined || (entry.identity.version as number) > stored)
            entry.judgedAttempt = attempt;
          else if (this.needs.owns()) this.stale(entry, { committedVersion: stored }); // else read again with the lease back
        }
      })
      .catch((err: unknown) => health.guardFailed(err)) // judged when the guard is back; nothing is published meanwhile
      .finally(() => {
        this.reading = false;
        scheduler.schedule();
      });
  }

  /** A retry that a newer version of its entity superseded: finished as stale, its claim given back. */
  private stale(entry: Entry, newer: { storedVersion?: number; committedVersion?: number }): void {
    const { guard, logger, tally, sourceAck } = this.needs;
    if (entry.token !== undefined) guard.release([claimedItem(entry)]).catch(() => undefined); // else it expires
    tally.correct("stale_version");
    this.needs.metrics.staleRetries.inc(this.label);
    logger.info(
      {
        id: entry.identity.id,
        seq: entry.seq,
        entity: entry.identity.entity,
        version: entry.identity.version,
        attempts: entry.attempt,
        ...newer,
      },
      "retried publish is stale: a newer version of its entity reached the destination after its first attempt failed; acked, not published",
    );
    sourceAck.finish(entry, "stale");
  }
}
