import type { Logger } from "pino";
import type { AllLinks } from "../config/routes.js";
import type { LinkConfig } from "../config/types.js";
import type { RelayError } from "../errors.js";
import type { Guard } from "../guard/types.js";
import type { Delivery } from "../nats/delivery.js";
import type { Entry } from "./entry.js";
import type { JetStreamPublisher } from "../nats/publisher.js";
import type { SourceAcks } from "../nats/source-acks.js";
import type { CorrectionKind, MessageOutcome, RelayMetrics } from "../observability/metrics.js";
import { DestinationLedger } from "./destination-ledger.js";
import { ClaimStage } from "./stages/claim.js";
import { CollisionCheck } from "./stages/collision.js";
import { CommitStage } from "./stages/commit.js";
import { PathState } from "./stages/common.js";
import type { DestinationFacts, DestinationMarkers, FencingTokenOption, PipelineEvents } from "./stages/common.js";
import { DeadLetters } from "./stages/dead-letter.js";
import { Health } from "./stages/health.js";
import { Intake } from "./stages/intake.js";
import { KvApply } from "./stages/kv-apply.js";
import { PubAckStage } from "./stages/pub-ack.js";
import { PublishStage } from "./stages/publish.js";
import { RetryJudge } from "./stages/retry-judge.js";
import { PumpScheduler } from "./stages/scheduler.js";
import { HeaderRules } from "./stages/header-rules.js";
import { SourceAckStage } from "./stages/source-ack.js";
import { StrictOrder } from "./stages/strict-order.js";
import { Tally } from "./stages/tally.js";
import type { LastError } from "./stages/tally.js";
import { SentVersions, UncommittedVersions } from "./stages/versions.js";
import { EntryWindow } from "./stages/window.js";

export type { DestinationFacts, DestinationMarkers, PipelineEvents } from "./stages/common.js";

export interface PipelineDeps {
  readonly link: LinkConfig;
  readonly links: AllLinks;
  readonly guard: Guard;
  /** Acks and naks at the source. */
  readonly acks: SourceAcks;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  readonly events: PipelineEvents;
  readonly markers: DestinationMarkers;
  /**
   * Whether this relay still owns the link (its lease deadline has not passed). Checked before every
   * publish, commit and ack: a process woken from a long pause does nothing before it knows.
   */
  readonly owns: () => boolean;
  /**
   * The lease revision this relay holds the link under (undefined: none). Claims and commits carry it,
   * and the guard refuses an older lease revision than it has seen: an ex-owner that passed `owns()`
   * just before a pause cannot commit after another relay took over.
   */
  readonly leaseRevision?: () => number | undefined;
  /** The incarnation of the lease bucket the lease revision is a revision of: the guard compares it first. */
  readonly incarnation?: () => number | undefined;
}

/**
 * The ordered, bounded in-flight pipeline of one link (DESIGN §2). A delivery goes through these
 * stages, each in its own file under ./stages:
 *
 *   intake       identity; loops, redundant routes and redeliveries of finished messages acked, not published
 *   claim        guard.claim, one round trip per batch, in arrival order (held claims wait in place)
 *   publish      publish(Nats-Msg-Id) pipelined in source order; late retries look in the destination first,
 *                and a retried older version of an entity is judged again (retry-judge.ts)
 *   pub-ack      PubAck (or a marker found): stored → on to commit; stray, restart, too large, rollback
 *   commit       guard.commit, one round trip per batch, in PubAck order
 *   source-ack   ack at the source (each, or cumulative), only while the lease is valid
 *
 * with dead-letter.ts (the bad-message policy) and collision.ts (id collisions behind a duplicate) beside
 * them, and for a KV link kv-apply.ts just before each publish (last writer wins per key). The pipeline
 * owns the window of entries and the pump, which runs the stages in this order.
 *
 * Source order is kept in the destination: entries are published strictly in arrival order, and a
 * failed publish rolls the publish cursor back to it, so it and everything after it that has no PubAck
 * yet is published again in order (what did land is absorbed by broker dedup). A message is acked at
 * the source only after its PubAck (and commit), or after it was suppressed as a counted correction, or
 * parked on the dead-letter subject.
 */
export class Pipeline {
  private readonly window = new EntryWindow();
  private readonly scheduler = new PumpScheduler(() => this.pump(), () => this.window.size);
  private readonly state: PathState;
  private readonly ledger = new DestinationLedger();
  private readonly versions = new UncommittedVersions();
  private readonly sent = new SentVersions();
  private readonly tally: Tally;
  private readonly health: Health;
  private readonly intake: Intake;
  private readonly claim: ClaimStage;
  private readonly publish: PublishStage;
  private readonly pubAck: PubAckStage;
  private readonly commit: CommitStage;
  private readonly sourceAck: SourceAckStage;
  /** `to.order: strict` only: the chain of expected last sequences (strict-order.ts). */
  private readonly order: StrictOrder | undefined;
  /** A KV link only: last writer wins per key (kv-apply.ts). */
  private readonly kv: KvApply | undefined;
  private drainWaiters: (() => void)[] = [];

  constructor(deps: PipelineDeps) {
    const { link, guard, metrics, logger } = deps;
    const owns = (): boolean => deps.owns();
    const { window, scheduler, ledger, versions, sent } = this;
    const fencingToken = (): FencingTokenOption => fencingTokenOption(deps);
    this.state = new PathState((err) => deps.events.halt(err));
    const state = this.state;
    const tally = (this.tally = new Tally(metrics, link.name, logger, (id) => window.findById(id)));
    const health = (this.health = new Health({ events: deps.events, logger, tally, scheduler }));
    const deadLetters = new DeadLetters({ link, logger, tally, versions });
    const collisions = new CollisionCheck({ link: link.name, markers: deps.markers, metrics, logger });
    // Built from the last stage back: each is handed the next one it passes messages on to.
    const sourceAck = (this.sourceAck = new SourceAckStage({ link, acks: deps.acks, metrics, owns, window, ledger, versions, sent, tally, scheduler, drained: () => this.notifyDrained() }));
    const commit = (this.commit = new CommitStage({ link, guard, metrics, owns, fencingToken, health, sourceAck, scheduler }));
    const rollback = (index: number, err: RelayError) => this.publish.rollback(index, err);
    const pubAck = (this.pubAck = new PubAckStage({ link, logger, metrics, events: deps.events, window, state, ledger, tally, health, deadLetters, collisions, rollback, commit, sent, scheduler }));
    const judge = new RetryJudge({ link, guard, logger, owns, metrics, window, sent, health, tally, sourceAck, scheduler });
    const headerRules = new HeaderRules({ link, metrics });
    const stored = (entry: Entry, seq: number) => pubAck.onStored(entry, { stream: state.destination?.stream ?? link.to.stream, seq, duplicate: true }, "found in the destination before strict order resumed");
    const order = (this.order = link.to.order === "strict" ? new StrictOrder({ link, logger, metrics, owns, window, state, markers: deps.markers, stored, scheduler }) : undefined);
    const lastOnSubject = deps.markers.lastOnSubject?.bind(deps.markers);
    const kv = (this.kv = link.to.bucket !== undefined && lastOnSubject ? new KvApply({ link, logger, metrics, owns, window, markers: { lastOnSubject }, guard, tally, sourceAck, sent, scheduler }) : undefined);
    this.publish = new PublishStage({ link, owns, logger, window, state, ledger, markers: deps.markers, health, deadLetters, pubAck, judge, sent, headerRules, scheduler, ...(order ? { order } : {}), ...(kv ? { kv } : {}) });
    this.claim = new ClaimStage({ link, guard, metrics, logger, state, fencingToken, health, versions, tally, deadLetters, sourceAck, scheduler });
    this.intake = new Intake({ link, links: deps.links, owns, logger, ledger, tally, deadLetters, sourceAck, headerRules });
  }

  /**
   * One turn of work, in the order of the stages. A halted link publishes and claims nothing more, but
   * what it published still gets its commit and ack.
   */
  private pump(): void {
    this.sourceAck.finishFenced(); // finished while the lease was not valid: acked now that it is
    if (this.window.size > 0 && this.claim.holdUntil > Date.now()) this.scheduler.scheduleAt(this.claim.holdUntil);
    this.claim.next();
    this.publish.next();
    this.commit.next();
    this.window.trim();
    this.sourceAck.flush();
    // Work held back by a backoff must find a timer waiting for it: nothing else may wake us up
    // (a paused link receives no new messages once its ack window is full).
    const now = Date.now();
    for (const until of [this.health.guardBlockedUntil, this.health.publishBlockedUntil]) if (until > now && this.window.size > 0) this.scheduler.scheduleAt(until);
  }

  /** Takes one source delivery. `snapshot`: the resync id, when it comes from a resync pass. */
  push(msg: Delivery, snapshot?: string): void {
    if (this.state.halted) return; // left unacked: redelivered when the link runs again
    if (this.window.redelivered(msg)) return; // held already: the latest delivery's ack subject acks both
    const entry = this.intake.admit(msg, snapshot);
    if (entry === undefined) return; // finished at intake (or fenced): nothing to publish
    this.window.add(entry);
    this.sent.hold(entry);
    this.scheduler.schedule();
    if (entry.state === "claim") this.claim.add(entry); // else a bad message: ready as a halt or a dead-letter record
  }

  /** Messages between receive and ack. */
  get size(): number {
    return this.window.size;
  }

  /** 429 answers from the destination so far (cumulative): backpressure the pull window shrinks for. */
  get pushedBack(): number {
    return this.pubAck.pushedBack;
  }

  /** Messages sent to the destination and not acked at the source yet (publishing, published, committing). */
  get unsettled(): number {
    return this.window.unsettled;
  }

  /** Payload and header bytes between receive and ack (headers estimated). */
  get bytes(): number {
    return this.window.bytes;
  }

  /** Publish time (ms) of the oldest message not yet acked, if any. */
  get oldestSourceMs(): number | undefined {
    return this.window.oldestSourceMs;
  }

  /** The source stream's creation time (ms), read by the link before it consumes. */
  setIncarnation(createdMs: number | undefined): void {
    // A recreated stream restarts at seq 1: what this pipeline remembers by sequence is about the old one.
    if (this.intake.setIncarnation(createdMs)) {
      this.ledger.reset();
      this.sourceAck.forgetWaiting();
    }
  }

  /** What the link read about the destination; publishing waits until it is known. Ends a hold. */
  setDestination(facts: DestinationFacts): void {
    const first = this.state.destination === undefined;
    if (this.state.held) {
      this.order?.forget("the destination changed"); // its last sequence is read again
      this.kv?.forget(); // so are its keys
    }
    this.state.destination = facts;
    if (first) this.claim.screenQueued();
    this.state.held = false;
    this.pubAck.releaseParked();
    this.scheduler.schedule();
  }

  /** The destination changed: publish nothing, ack nothing newly stored, until `setDestination` says it is fine. */
  holdDestination(): void {
    this.state.held = true;
  }

  get destinationHeld(): boolean {
    return this.state.held;
  }

  /**
   * Source sequences found in the destination by the link's start scan (ordered recovery): when they
   * are delivered again they are acked as already stored, without a publish.
   */
  setStoredInDestination(stored: ReadonlyMap<number, number>, upToSourceSeq: number, heldUpToSourceSeq: number): void {
    this.cursorMoved();
    this.order?.forget("the link read its position again");
    this.ledger.setKnown(stored, upToSourceSeq);
    this.claim.takeoverUpTo = heldUpToSourceSeq;
  }

  /**
   * The consumer was created or moved: an ack subject of the one before must not be sent to it (under
   * AckAll it would cover messages of the new cursor that are not finished).
   */
  cursorMoved(): void {
    this.sourceAck.forgetWaiting();
  }

  /** The highest source seq this pipeline saw stored in the destination, whether acked yet or not. */
  get highestStoredSourceSeq(): number {
    return this.pubAck.highestStoredSourceSeq;
  }

  /** The highest destination sequence this link has seen its messages at. */
  get lastDestSeq(): number {
    return this.ledger.lastDestSeq;
  }

  /** The destination side: set when it connects, cleared when it goes away (publishing waits). */
  setPublisher(publisher: JetStreamPublisher | undefined): void {
    this.publish.setPublisher(publisher);
    this.scheduler.schedule();
  }

  /** Resolves when every entry has left the pipeline (or `signal` aborts). */
  async drained(signal?: AbortSignal): Promise<void> {
    if (this.window.size === 0 || signal?.aborted) return;
    await new Promise<void>((resolve) => {
      this.drainWaiters.push(resolve);
      signal?.addEventListener("abort", () => resolve(), { once: true });
    });
  }

  /** Releases claims of what was not published and forgets everything (it stays unacked at the source). */
  async abandon(): Promise<void> {
    this.scheduler.cancel();
    this.order?.forget("the pipeline was abandoned");
    this.kv?.forget();
    const claimed = this.window.clear();
    this.claim.clear();
    this.commit.clear();
    this.sourceAck.clear();
    this.pubAck.clear();
    this.ledger.reset();
    this.versions.clear();
    this.sent.clear();
    if (claimed.length > 0) await this.claim.release(claimed);
    this.notifyDrained();
  }

  /**
   * Looks for work again. The pipeline runs on events (deliveries, PubAcks, timers); a condition that
   * changes outside it (the lease valid again) must say so, or a full window would wait for an event
   * that never comes. The link also calls it on every poll, as a safety net.
   */
  resume(): void {
    this.scheduler.schedule();
  }

  /**
   * In-progress acks for messages held longer than half the ack wait (a slow or paused destination, a
   * held claim): the source would otherwise redeliver the whole window across the WAN every ack wait.
   * Called by the link's timer; returns how many were sent.
   */
  keepAlive(): number {
    return this.sourceAck.keepAlive();
  }

  /** `cumulative`: one ack for every finished message below the lowest one still held (also before the link fails). */
  flushAcks(): void {
    this.sourceAck.flush(true);
  }

  /** Corrections so far, by kind (also in `relay_corrections_total`): shown in /status. */
  get corrections(): Readonly<Record<CorrectionKind, number>> {
    return this.tally.corrections;
  }

  /** Messages finished since the relay started, by outcome (also in `relay_messages_total`): shown in /status. */
  get outcomes(): Readonly<Record<MessageOutcome, number>> {
    return this.tally.outcomes;
  }

  /** The last error the pipeline met (publish, guard, bad message): shown in /status next to the link's own. */
  get lastError(): LastError | undefined {
    return this.tally.lastError;
  }

  private notifyDrained(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }
}

/** The fencing token claims and commits carry, when the relay holds a lease. */
function fencingTokenOption(deps: Pick<PipelineDeps, "leaseRevision" | "incarnation">): FencingTokenOption {
  const leaseRevision = deps.leaseRevision?.();
  const incarnation = deps.incarnation?.();
  return leaseRevision === undefined ? {} : { leaseRevision, ...(incarnation !== undefined ? { incarnation } : {}) };
}
