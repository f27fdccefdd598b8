/**
 * The last stage: the ack at the source. A finished message (relayed, suppressed, dead-lettered, or
 * found already stored) is acked — at once (`sourceAcks: each`), or covered by the next cumulative ack
 * (`cumulative`) — only while this relay owns the link; finished while fenced, it waits for the lease.
 * Also the in-progress acks that keep messages held long from being redelivered.
 */
import type { LinkConfig } from "../../config/types.js";
import type { SourceAcks } from "../../nats/source-acks.js";
import type { MessageOutcome, RelayMetrics } from "../../observability/metrics.js";
import { CumulativeAcks } from "../cumulative-acks.js";
import type { DestinationLedger } from "../destination-ledger.js";
import type { Entry } from "../entry.js";
import type { Scheduler } from "./common.js";
import type { Tally } from "./tally.js";
import type { SentVersions, UncommittedVersions } from "./versions.js";
import type { EntryWindow } from "./window.js";

export interface SourceAckNeeds {
  readonly link: LinkConfig;
  /** Acks and naks at the source. */
  readonly acks: SourceAcks;
  readonly metrics: Pick<RelayMetrics, "sourceAcks">;
  readonly owns: () => boolean;
  readonly window: Pick<EntryWindow, "bySeq" | "size" | "remove" | "lowestHeld">;
  readonly ledger: Pick<DestinationLedger, "done">;
  readonly versions: Pick<UncommittedVersions, "settled">;
  readonly sent: Pick<SentVersions, "release">;
  readonly tally: Pick<Tally, "count" | "counters">;
  readonly scheduler: Scheduler;
  /** The window is empty now: whoever waits for the pipeline to drain is told. */
  readonly drained: () => void;
  /** Monotonic ms (default performance.now). */
  readonly clock?: () => number;
}

/** A cumulative ack waits for this many finished messages, or ACK_EVERY_MS after the last one. */
export const ACK_BATCH = 128;
export const ACK_EVERY_MS = 10;

export class SourceAckStage {
  private readonly label: { link: string };
  /** When the last cumulative ack was sent (on `clock`). */
  private flushedAt = -Infinity;
  private readonly clock: () => number;
  /** `sourceAcks: cumulative`: finished messages wait here for the one ack that covers them. */
  private readonly cumulative: CumulativeAcks | undefined;
  /** Finished while the lease was not valid: acked once it is (or dropped by abandon()). */
  private fenced: { entry: Entry; outcome: MessageOutcome }[] = [];

  constructor(private readonly needs: SourceAckNeeds) {
    this.label = { link: needs.link.name };
    this.cumulative = needs.link.sourceAcks === "cumulative" ? new CumulativeAcks() : undefined;
    this.clock = needs.clock ?? (() => performance.now());
  }

  /** The message is finished with `outcome`: acked, counted, and out of the window. */
  finish(entry: Entry, outcome: MessageOutcome): void {
    if (!this.needs.owns()) {
      // Fenced: no ack now. The lease comes back (a renewal that landed late) or is lost (abandon()).
      this.fenced.push({ entry, outcome });
      this.needs.scheduler.scheduleAt(Date.now() + 100);
      return;
    }
    this.ack(entry.seq, entry.reply, entry.dseq);
    this.needs.ledger.done(entry.seq, entry.destSeq);
    this.needs.versions.settled(entry);
    this.needs.tally.count(outcome);
    if (outcome === "relayed") {
      this.needs.tally.counters.replayAge.observe(Math.max(0, (Date.now() - entry.sourceMs) / 1000));
    }
    const window = this.needs.window;
    if (window.remove(entry)) this.needs.sent.release(entry);
    if (window.size === 0) {
      // Drained: a stop or a handover releases the lease next, so the cumulative ack goes now.
      this.flush(true);
      this.needs.drained();
    }
  }

  /** What was finished while fenced, once the lease is valid again. */
  finishFenced(): void {
    if (this.fenced.length === 0 || !this.needs.owns()) return;
    const fenced = this.fenced;
    this.fenced = [];
    for (const f of fenced) if (f.entry.state !== "done") this.finish(f.entry, f.outcome);
  }

  /** A finished message's ack: sent now (`each`), or left for the next flush to cover (`cumulative`). */
  ack(seq: number, reply: string, dseq = 0): void {
    if (!this.cumulative) {
      if (this.needs.acks.ack(reply)) this.needs.metrics.sourceAcks.inc(this.label);
      return;
    }
    this.cumulative.done(seq, reply, dseq);
    this.needs.scheduler.schedule();
  }

  /**
   * `cumulative`: one ack for every finished message below the lowest one still held — at once when
   * `now` (drained, or the link fails), else once ACK_BATCH wait or ACK_EVERY_MS passed since the last:
   * a steady trickle then costs the source a write (and, on an R3 stream, a replicated ack) every few
   * milliseconds instead of at every turn of the pump.
   */
  flush(now = false): void {
    const acks = this.cumulative;
    if (!acks || acks.waiting === 0 || !this.needs.owns()) return;
    const at = this.clock();
    if (!now && acks.waiting < ACK_BATCH && at - this.flushedAt < ACK_EVERY_MS) {
      this.needs.scheduler.scheduleAt(Date.now() + Math.ceil(this.flushedAt + ACK_EVERY_MS - at));
      return;
    }
    const lowest = this.needs.window.lowestHeld();
    const reply = acks.flush(lowest?.seq, lowest?.dseq);
    if (reply === undefined) return;
    this.flushedAt = at;
    if (this.needs.acks.ack(reply)) this.needs.metrics.sourceAcks.inc(this.label);
  }

  /**
   * In-progress acks for messages held longer than half the ack wait (a slow or paused destination, a
   * held claim): the source would otherwise redeliver the whole window across the WAN every ack wait.
   * Returns how many were sent.
   */
  keepAlive(): number {
    if (!this.needs.owns()) return 0;
    const now = performance.now();
    const after = this.needs.link.ackWaitMs / 2;
    let sent = 0;
    for (const e of this.needs.window.bySeq.values()) {
      if (now - Math.max(e.receivedAt, e.workingSentAt) < after) continue;
      if (this.needs.acks.working(e.reply)) sent++;
      e.workingSentAt = now;
    }
    return sent;
  }

  /**
   * Forgets the finished messages waiting for a cumulative ack: the cursor moved (an ack subject of
   * the consumer before must not be sent to the new one), or the source stream is another one.
   */
  forgetWaiting(): void {
    this.cumulative?.reset();
  }

  /** Forgets everything waiting for an ack (the pipeline is abandoned: it stays unacked at the source). */
  clear(): void {
    this.fenced = [];
    this.cumulative?.reset();
  }
}
