/**
 * What the destination says about a publish, and what a recovery read found stored. A PubAck (or a
 * marker found) means the message is in the destination: on to the guard commit, unless the
 * destination is held (then it is parked until the link has read it again) or the store went backwards
 * (a recreated stream: hold). A PubAck from another stream, or a 10060 refusal, halts the link (a
 * stray: nothing from it on is acked). A message refused as too large goes to the bad-message policy;
 * a 429 (the destination's ingest queue is full) is backpressure: counted, and rolled back like any
 * other failure, which publishes it again after a backoff (health.ts) while the pull window shrinks; a
 * refusal of strict order's expected sequence rolls back everything in flight; any other failure
 * rolls publishing back to it.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { ErrorCodes, RelayError } from "../../errors.js";
import type { PubAck } from "../../nats/publisher.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import type { DestinationLedger } from "../destination-ledger.js";
import type { Entry } from "../entry.js";
import type { CollisionCheck } from "./collision.js";
import type { CommitStage } from "./commit.js";
import type { PathState, PipelineEvents, Scheduler } from "./common.js";
import type { DeadLetters } from "./dead-letter.js";
import type { Health } from "./health.js";
import type { Tally } from "./tally.js";
import type { SentVersions } from "./versions.js";
import type { EntryWindow } from "./window.js";

export interface PubAckNeeds {
  readonly link: LinkConfig;
  readonly logger: Logger;
  readonly metrics: Pick<RelayMetrics, "reordered" | "publishBackpressure">;
  readonly events: Pick<PipelineEvents, "destinationRestarted">;
  readonly window: Pick<EntryWindow, "publishPos" | "indexOf" | "head">;
  readonly state: Pick<PathState, "destination" | "held" | "halt">;
  readonly ledger: Pick<DestinationLedger, "lastDestSeq" | "stored" | "destinationRestarted">;
  readonly tally: Pick<Tally, "counters" | "correct" | "recordError" | "debugOn" | "debug">;
  readonly health: Pick<Health, "publishRecovered">;
  readonly deadLetters: Pick<DeadLetters, "refusedAsTooLarge">;
  readonly collisions: Pick<CollisionCheck, "check">;
  /** Publishing rolls back to `index` (the publish stage's rollback). */
  readonly rollback: (index: number, err: RelayError) => void;
  readonly commit: Pick<CommitStage, "add">;
  /** What of each entity is in the destination, and what is on its way: a retried older version is judged against it. */
  readonly sent: Pick<SentVersions, "answered" | "stored">;
  readonly scheduler: Scheduler;
}

export class PubAckStage {
  private readonly label: { link: string };
  /** Stored while the destination was held: committed and acked once it is known to keep them. */
  private parked: Entry[] = [];
  /** A publish landed in another stream, or was refused for it (10060): nothing from this source seq on is acked. */
  private strayFrom: number | undefined;
  /** The highest source seq this pipeline saw stored in the destination (its own history, acked or not). */
  private highestStored = 0;
  /** 429 answers so far (cumulative): the pull window shrinks when it grew since its last look. */
  private busyAnswers = 0;

  constructor(private readonly needs: PubAckNeeds) {
    this.label = { link: needs.link.name };
  }

  /** 429 answers from the destination so far (cumulative). */
  get pushedBack(): number {
    return this.busyAnswers;
  }

  /** The highest source seq this pipeline saw stored in the destination, whether acked yet or not. */
  get highestStoredSourceSeq(): number {
    return this.highestStored;
  }

  /** The answer to publish attempt `attempt` of `entry`. */
  onPubAck(entry: Entry, attempt: number, err: RelayError | null, ack: PubAck | null): void {
    this.needs.sent.answered(entry);
    if (entry.state !== "publishing" && entry.state !== "ready") return;
    const { link, state, window } = this.needs;
    if (this.strayFrom !== undefined && entry.seq > this.strayFrom) {
      // Published before the link halted on a stray message: whatever its answer, it is not acked (a copy
      // in the destination is found by its marker when the link runs again).
      entry.state = "ready";
      return;
    }
    if (ack) {
      // A success is a success whatever attempt it answers: the message is in the stream.
      this.needs.tally.counters.publishDuration.observe((performance.now() - entry.publishStartedAt) / 1000);
      const dest = state.destination;
      if (dest && entry.deadLetterReason === undefined && ack.stream !== dest.stream) {
        const mismatch = new RelayError(
          ErrorCodes.DESTINATION_MISMATCH,
          `link ${link.name}: subject ${entry.subject} is stored by stream ${ack.stream}, not the link's destination ${dest.stream} (message ${entry.identity.id}, source seq ${entry.seq}, now at ${ack.stream} seq ${ack.seq}); bind the subject to ${dest.stream} or change the link`,
        );
        this.stray(entry, mismatch);
        return;
      }
      this.onStored(entry, ack);
      return;
    }
    if (err?.code === ErrorCodes.DESTINATION_MISMATCH) {
      // Refused for `Nats-Expected-Stream` (10060): the subject is bound to another stream; nothing was stored.
      const stream = state.destination?.stream ?? link.to.stream;
      this.stray(entry, new RelayError(ErrorCodes.DESTINATION_MISMATCH, `link ${link.name}: message ${entry.identity.id} (source seq ${entry.seq}) refused: ${err.message}; the subject is no longer bound to ${stream}: bind it again or change the link`));
      return;
    }
    if (err?.code === ErrorCodes.DESTINATION_BUSY) {
      // Backpressure: every refused publish counts; the retry is the rollback below (once per burst).
      this.busyAnswers++;
      this.needs.metrics.publishBackpressure.inc(this.label);
    }
    if (attempt !== entry.attempt || !err) return; // an older attempt's failure: already rolled back
    // Strict order: a publish refused for its expected sequence means one before it is lost or slow;
    // everything in flight rolls back (what was stored is found by its marker before publishing again).
    const index = err.code === ErrorCodes.ORDER_REJECTED ? window.head : window.indexOf(entry);
    if (err.code === ErrorCodes.MESSAGE_TOO_LARGE && entry.data.length > 0) {
      // The stream's own limit was lower than the one read at start (changed since): as if known before.
      this.needs.deadLetters.refusedAsTooLarge(entry, err);
      if (index >= 0) window.publishPos = Math.min(window.publishPos, index);
      this.needs.scheduler.schedule();
      return;
    }
    if (index >= 0) this.needs.rollback(index, err);
  }

  /**
   * A message went to (or was refused for) another stream than the link's: the link halts at once.
   * It and everything after it stay unacked at the source; what came before it is still acked.
   */
  private stray(entry: Entry, err: RelayError): void {
    this.needs.tally.recordError(err);
    entry.state = "ready"; // not in the destination: left for the next run
    if (this.strayFrom === undefined || entry.seq < this.strayFrom) this.strayFrom = entry.seq;
    this.needs.state.halt(err);
  }

  /** The message is in the destination (a PubAck, or found by its marker): on to commit and ack. */
  onStored(entry: Entry, ack: PubAck, foundBy?: string): void {
    const { ledger, state, tally, logger } = this.needs;
    if (foundBy === undefined && !ack.duplicate && entry.deadLetterReason === undefined && ack.seq <= ledger.lastDestSeq) {
      // A stream's sequences only grow: a new store at or below one seen before is a new stream under the
      // old name (deleted and recreated). Its settings are not known: hold until the link read them.
      const detail = `PubAck for source seq ${entry.seq} at destination seq ${ack.seq}, below seq ${ledger.lastDestSeq} seen before: the destination stream was recreated`;
      ledger.destinationRestarted();
      state.held = true;
      this.needs.events.destinationRestarted(detail);
    }
    entry.state = "published";
    this.needs.sent.stored(entry);
    if (entry.seq > this.highestStored) this.highestStored = entry.seq;
    entry.destSeq = ack.seq;
    entry.brokerDuplicate = ack.duplicate;
    if (entry.deadLetterReason === undefined) {
      const reorder = ledger.stored(entry.seq, ack.seq, !ack.duplicate);
      // A KV link's writes of different keys do not keep source order (a write decided again after a
      // local write landed goes after later ones): not a reorder of anything a bucket reader sees.
      if (reorder && this.needs.link.to.bucket === undefined) {
        this.needs.metrics.reordered.inc(this.label);
        logger.warn(
          { id: entry.identity.id, ...reorder },
          "the destination stored a message after a later one (an earlier publish failed while later ones in flight were stored)",
        );
      }
    }
    if (ack.duplicate) {
      tally.correct("broker_duplicate");
      if (foundBy) logger.info({ id: entry.identity.id, seq: entry.seq, destSeq: ack.seq }, `${foundBy}: not published again`);
      else this.needs.collisions.check(entry, ack.seq);
      if (tally.debugOn) tally.debug("broker_duplicate", entry.identity.id, { destSeq: ack.seq });
    }
    this.needs.health.publishRecovered();
    if (state.held && entry.deadLetterReason === undefined) {
      this.parked.push(entry); // acked (and committed) only once the destination is known to keep it
      return;
    }
    this.needs.commit.add(entry);
  }

  /** The destination is known again (the hold ended): what was parked meanwhile goes on to commit. */
  releaseParked(): void {
    const parked = this.parked;
    this.parked = [];
    for (const e of parked) if (e.state === "published") this.needs.commit.add(e);
  }

  /** Forgets what is parked (the pipeline is abandoned). */
  clear(): void {
    this.parked = [];
  }
}
