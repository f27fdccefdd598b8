/**
 * The first stage: a delivery's identity and screening. A redelivery of a message already finished is
 * acked again; a loop or a redundant route, or a subject delete marker the link drops
 * (`to.deleteMarkers: drop`), is acked and counted, never published; a message without a
 * usable identity goes to the bad-message policy; every other message becomes an entry for the claim.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { directRoutesFor } from "../../config/routes.js";
import type { AllLinks } from "../../config/routes.js";
import type { Delivery } from "../../nats/delivery.js";
import { RelayHeaders } from "../../protocol/headers.js";
import type { DestinationLedger } from "../destination-ledger.js";
import type { Entry, EntryContext } from "../entry.js";
import { entryContext, newEntry } from "../entry.js";
import { identify, route } from "../identity.js";
import type { DeadLetters } from "./dead-letter.js";
import type { HeaderRules } from "./header-rules.js";
import { prepareKvWrite } from "./kv-apply.js";
import type { SourceAckStage } from "./source-ack.js";
import type { Tally } from "./tally.js";

export interface IntakeNeeds {
  readonly link: LinkConfig;
  readonly links: AllLinks;
  readonly owns: () => boolean;
  readonly logger: Logger;
  readonly ledger: Pick<DestinationLedger, "finishedAt">;
  readonly tally: Pick<Tally, "count" | "correct" | "debugOn" | "debug">;
  readonly deadLetters: Pick<DeadLetters, "badMessage">;
  readonly sourceAck: Pick<SourceAckStage, "ack">;
  /** Subject delete markers a link drops (`to.deleteMarkers`). */
  readonly headerRules: Pick<HeaderRules, "dropsMarker" | "dropped" | "reset">;
}

export class Intake {
  private readonly entryContext: EntryContext;
  /** The direct routes into the link's destination stream, and the link list they were read from. */
  private directRoutes: ReadonlySet<string> = new Set();
  private routesOf: readonly LinkConfig[] | undefined;
  /** The source stream's creation time (ms): part of derived ids. */
  private incarnation: number | undefined;
  /** The highest source sequence counted as a loop: a loop at or below it is a redelivery. */
  private highestLoopCounted = 0;

  constructor(private readonly needs: IntakeNeeds) {
    this.entryContext = entryContext(needs.link);
  }

  /** Read again only when the relay's links changed (a reload): the list is the same array until then. */
  private routes(): ReadonlySet<string> {
    const links = typeof this.needs.links === "function" ? this.needs.links() : this.needs.links;
    if (links !== this.routesOf) {
      this.routesOf = links;
      this.directRoutes = directRoutesFor(this.needs.link, links);
    }
    return this.directRoutes;
  }

  /**
   * The source stream's creation time (ms). True when it is another stream than before (a recreated
   * stream restarts at seq 1: what the pipeline remembers by sequence is about the old one).
   */
  setIncarnation(createdMs: number | undefined): boolean {
    const changed = createdMs !== this.incarnation;
    if (changed) {
      this.highestLoopCounted = 0;
      this.needs.headerRules.reset();
    }
    this.incarnation = createdMs;
    return changed;
  }

  /**
   * The entry for a delivery the pipeline does not hold, or undefined when it was finished here (a
   * redelivery of a finished message, a loop, a redundant route; or fenced: left for the next owner).
   * `snapshot`: the resync id, when it comes from a resync pass.
   */
  admit(msg: Delivery, snapshot?: string): Entry | undefined {
    const { link, tally } = this.needs;
    const seq = msg.streamSequence;
    if (snapshot === undefined && this.redeliveredAfterDone(msg)) return undefined;
    if (this.needs.headerRules.dropsMarker(msg)) {
      // A subject delete marker the link drops: acked, counted, never published (nor claimed).
      if (!this.needs.owns()) return undefined; // fenced: the next owner acks it
      this.needs.sourceAck.ack(seq, msg.reply, msg.consumerSequence);
      this.needs.headerRules.dropped(seq);
      return undefined;
    }
    const result = identify({ subject: msg.subject, headers: msg.headers, streamSequence: seq }, link, this.incarnation);
    if (!result.ok) {
      return this.needs.deadLetters.badMessage(newEntry(msg, { id: result.id, origin: link.from.region, path: [] }, this.entryContext), result.reason);
    }
    const decision = route(result.identity, link, this.routes());
    if (!decision.forward) {
      if (tally.debugOn) tally.debug("loop", result.identity.id, { reason: decision.reason, origin: result.identity.origin });
      if (!this.needs.owns()) return undefined; // fenced: the next owner acks it
      this.needs.sourceAck.ack(seq, msg.reply, msg.consumerSequence);
      // Messages, not deliveries: a loop redelivered because its ack was lost is acked again, not counted
      // again — whatever its delivery count says (a source server restarted from disk can have lost the
      // acks and deliver them again as first deliveries). The consumer delivers in stream order.
      if (seq > this.highestLoopCounted) {
        this.highestLoopCounted = seq;
        tally.count("loop");
      }
      return undefined;
    }
    const entry = newEntry(msg, result.identity, this.entryContext);
    if (link.to.bucket !== undefined) {
      // A KV link: the write's version, read once here (a malformed one is a bad message).
      const problem = prepareKvWrite(entry, msg, link);
      if (problem !== undefined) return this.needs.deadLetters.badMessage(entry, problem);
    }
    if (snapshot !== undefined) {
      entry.headers.append(RelayHeaders.Snapshot, snapshot);
      entry.dseq = Number.MAX_SAFE_INTEGER; // a resync pass's own numbering: it holds back no ack of the durable's
    }
    return entry;
  }

  /**
   * A redelivery of a message this pipeline already finished (its ack was lost: a source stream leader
   * failover, a reconnect): acked again, never published again, however long after its first copy.
   * Whatever its delivery count says: a consumer leader that died before its followers learnt what it
   * had delivered leaves a new leader that delivers those messages again as first deliveries (delivery
   * count 1, consumer sequences going back).
   */
  private redeliveredAfterDone(msg: Delivery): boolean {
    const destSeq = this.needs.ledger.finishedAt(msg.streamSequence);
    if (destSeq === undefined || !this.needs.owns()) return false;
    this.needs.sourceAck.ack(msg.streamSequence, msg.reply, msg.consumerSequence);
    if (destSeq > 0) {
      this.needs.tally.count("duplicate");
      this.needs.tally.correct("broker_duplicate");
      if (this.needs.tally.debugOn) this.needs.logger.debug({ decision: "redelivered_after_done", seq: msg.streamSequence, destSeq }, "decision");
    }
    return true;
  }
}
