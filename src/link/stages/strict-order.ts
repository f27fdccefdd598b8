/**
 * `to.order: strict`: the link's publishes to the destination form a chain. Each carries
 * `Nats-Expected-Last-Sequence`: message k of a run carries the destination's last sequence + k − 1,
 * so the server stores it only right after the one before it. When one publish is lost (a destination
 * leader dying under a window), every later one in flight fails its check (err_code 10071, ORDER_REJECTED)
 * instead of being stored ahead of it, and nothing is stored out of source order; a message that some
 * other writer published moves the stream on and is refused the same way (an ex-owner of the link is
 * fenced by the server itself).
 *
 * The chain is known only while every publish of it is stored where it expects. Any failure (the
 * publish stage's rollback), a stored copy answered at another sequence (a deduplicated retry, which
 * the server answers before the check), or a change of the destination forgets it. Before the next
 * publish, once every publish of the old chain is answered, it is read again from the destination's
 * truth: the stream's last sequence, and the link's `Relay-Source` markers for what was sent and not
 * answered as stored (those are stored now, not sent again). The chain then starts at the highest of
 * them. (Why that keeps order even when a timed-out publish is stored later: docs/data-path.md.)
 */
import type { MsgHdrs } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { ErrorCodes } from "../../errors.js";
import type { RelayError } from "../../errors.js";
import { Backoff } from "../../lifecycle/backoff.js";
import { withExpectedLastSeq } from "../../nats/expected-last-seq.js";
import type { EncodedHeaders } from "../../nats/expected-last-seq.js";
import type { PubAck } from "../../nats/publisher.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import type { Entry } from "../entry.js";
import type { DestinationMarkers, PathState, Scheduler } from "./common.js";
import type { EntryWindow } from "./window.js";

export interface StrictOrderNeeds {
  readonly link: LinkConfig;
  readonly logger: Logger;
  readonly metrics: Pick<RelayMetrics, "orderRejections">;
  readonly owns: () => boolean;
  readonly window: Pick<EntryWindow, "entries" | "head">;
  readonly state: Pick<PathState, "destination">;
  readonly markers: Pick<DestinationMarkers, "findStored" | "lastSeq">;
  /** A message found stored by its marker goes on to commit (the PubAck stage's `onStored`). */
  readonly stored: (entry: Entry, destSeq: number) => void;
  readonly scheduler: Scheduler;
}

/** One publish of the chain: its headers, and the last sequence it expects. */
export interface ChainLink {
  readonly headers: MsgHdrs;
  readonly expected: number;
  readonly epoch: number;
  /**
   * Where the chain was read from the destination: no attempt of this message, in this chain or a
   * later one (read later, from a stream that only grows), is stored at or below it.
   */
  readonly base: number;
}

export class StrictOrder {
  private readonly label: { link: string };
  /** The last sequence the next publish expects; undefined while the chain is not known. */
  private next: number | undefined;
  /** The last sequence the chain was read at. */
  private base = 0;
  /** Bumped when the chain is forgotten: answers to an older chain do not judge the new one. */
  private epoch = 0;
  /** Where the forgotten chain would have left the stream, had all of it been stored (another writer went past it). */
  private forgottenAt: number | undefined;
  /** Publishes of the chain not answered yet (a PubAck, an error or a timeout each). */
  private inFlight = 0;
  private reading = false;
  /** Refusals since the chain was last read: the first of a run is logged, the rest follow from it. */
  private rejectedThisEpoch = 0;
  private readonly backoff = new Backoff(100, 5_000);
  private retryAt = 0;

  constructor(private readonly needs: StrictOrderNeeds) {
    this.label = { link: needs.link.name };
  }

  /**
   * Whether the chain is known, so a publish may go. When it is not, reads it again from the
   * destination once every publish of the old chain is answered (the pump runs again when it is).
   */
  ready(): boolean {
    if (this.next !== undefined) return true;
    this.read();
    return false;
  }

  /** The next publish of the chain (`ready()` said yes): its headers carry the last sequence it expects. */
  chain(headers: EncodedHeaders): ChainLink {
    const expected = this.next as number;
    this.next = expected + 1;
    this.inFlight++;
    return { headers: withExpectedLastSeq(headers, expected), expected, epoch: this.epoch, base: this.base };
  }

  /** The answer to a publish of the chain, before the PubAck stage sees it. */
  answered(entry: Entry, link: ChainLink, err: RelayError | null, ack: PubAck | null): void {
    this.inFlight--;
    if (err?.code === ErrorCodes.ORDER_REJECTED) this.rejected(entry, link, err);
    else if (ack && link.epoch === this.epoch && ack.seq !== link.expected + 1) {
      // Answered at another sequence than its place in the chain: a copy stored by an earlier attempt
      // (the server answers a duplicate before it checks the sequence). What follows it expects wrong.
      this.forget(`message ${entry.identity.id} (source seq ${entry.seq}) is stored at destination seq ${ack.seq}, not ${link.expected + 1} where the chain expected it (an earlier attempt's copy)`);
    }
    if (this.inFlight === 0 && this.next === undefined) this.needs.scheduler.schedule();
  }

  /** Forgets the chain: it is read from the destination again before the next publish. */
  forget(why: string): void {
    if (this.next === undefined) return;
    this.needs.logger.info({ reason: why, nextExpected: this.next }, "strict order: the chain is read again from the destination before the next publish");
    this.forgottenAt = this.next;
    this.next = undefined;
    this.epoch++;
  }

  private rejected(entry: Entry, link: ChainLink, err: RelayError): void {
    this.needs.metrics.orderRejections.inc(this.label);
    if (this.rejectedThisEpoch++ > 0) return;
    const text = /wrong last sequence: (\d+)/.exec(err.message)?.[1];
    const actual = text === undefined ? undefined : Number(text);
    const detail = { id: entry.identity.id, seq: entry.seq, expectedLastSeq: link.expected, ...(actual === undefined ? {} : { destinationLastSeq: actual }) };
    if (!this.needs.owns()) {
      this.needs.logger.warn(detail, "strict order: the destination refused this relay's publish for its expected last sequence while this relay no longer owns the link: fenced by the server (another owner moved the stream on); nothing of it was stored");
    } else if (actual !== undefined && actual > link.expected) {
      this.needs.logger.warn(detail, "strict order: the destination refused a publish for its expected last sequence and is ahead of the chain (another writer stored messages, or an earlier attempt's copy was stored): nothing was stored out of order; rolling back and resuming from the destination's last sequence");
    } else {
      this.needs.logger.warn(detail, "strict order: the destination refused a publish for its expected last sequence (an earlier publish of the chain was not stored): nothing was stored out of order; rolling back and resuming from the destination's last sequence");
    }
  }

  /** Reads the chain from the destination: its last sequence, and the markers of what was sent and not answered as stored. */
  private read(): void {
    const { scheduler } = this.needs;
    if (this.reading || this.inFlight > 0) return; // the last answer schedules the pump
    const now = Date.now();
    if (now < this.retryAt) return scheduler.scheduleAt(this.retryAt);
    const dest = this.needs.state.destination;
    if (!dest) return;
    this.reading = true;
    const epoch = this.epoch;
    this.resume(dest.stream)
      .then((next) => {
        if (epoch !== this.epoch) return; // forgotten again meanwhile: read again
        this.backoff.reset();
        this.rejectedThisEpoch = 0;
        this.base = next;
        this.next = next;
      })
      .catch((err: unknown) => {
        this.retryAt = Date.now() + this.backoff.next();
        this.needs.logger.warn({ err: err instanceof Error ? err.message : String(err) }, "strict order: cannot read the destination's last sequence; publishing waits");
      })
      .finally(() => {
        this.reading = false;
        scheduler.schedule();
      });
  }

  private async resume(stream: string): Promise<number> {
    const { window, markers, logger } = this.needs;
    const last = await markers.lastSeq();
    const sent: Entry[] = [];
    for (let i = window.head; i < window.entries.length; i++) {
      const e = window.entries[i];
      if (e?.state === "ready" && e.firstAttemptMs > 0 && e.deadLetterReason === undefined) sent.push(e);
    }
    let next = last;
    let found = 0;
    if (sent.length > 0) {
      const floor = Math.min(...sent.map((e) => e.destFloor));
      const stored = await markers.findStored(floor + 1, new Set(sent.map((e) => e.seq)));
      for (const e of sent) {
        const destSeq = stored.get(e.seq);
        if (destSeq === undefined || e.state !== "ready") continue;
        this.needs.stored(e, destSeq);
        found++;
        // A copy above the last sequence read (stored meanwhile) is below the next publish too.
        if (destSeq > next) next = destSeq;
      }
    }
    const previous = this.forgottenAt;
    if (previous !== undefined && next > previous) {
      logger.warn(
        { stream, destinationLastSeq: next, chainEnd: previous, foreign: next - previous },
        "strict order: the destination holds messages past everything this link sent: another writer stored them (a previous owner of the link, or a client publishing into the stream); the link goes on after them",
      );
    }
    logger.info({ stream, lastSeq: next, rolledBack: sent.length, foundStored: found }, "strict order: publishing resumes from the destination's last sequence");
    return next;
  }
}
