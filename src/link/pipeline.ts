import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { tokenSource } from "../guard/items.js";
import type { ClaimResult, Guard } from "../guard/types.js";
import { Backoff } from "../lifecycle/backoff.js";
import type { Delivery } from "../nats/delivery.js";
import type { PubAck, JetStreamPublisher } from "../nats/publisher.js";
import type { SourceAcks } from "../nats/source-acks.js";
import type { CorrectionKind, MessageOutcome, RelayMetrics } from "../observability/metrics.js";
import type { Entry, EntryContext } from "./entry.js";
import { entryContext, newEntry, toDeadLetter, toOversizedDeadLetter, wireSize } from "./entry.js";
import { CumulativeAcks } from "./cumulative-acks.js";
import { DestinationLedger } from "./destination-ledger.js";
import { RelayHeaders } from "../protocol/headers.js";
import { outcomeCounters } from "./outcome-counters.js";
import type { OutcomeCounters } from "./outcome-counters.js";
import { directRoutesFor } from "../config/routes.js";
import { identify, route } from "./identity.js";

/**
 * A pipeline holding fewer messages than this works them after COALESCE_MS rather than on the next turn
 * of the event loop: a trickle of deliveries then shares one publish write and one ack (at a steady
 * 5,000 msgs/s, relay CPU per message 9.3 → 8.3 s per 100k in `PROFILE_RATE=5000 npm run bench:profile`),
 * for at most 2 ms more latency. A backlog (a full window) is worked at once, as before.
 */
const COALESCE_BELOW = 64;
const COALESCE_MS = 2;

/** What the pipeline tells its link, so the link can change state; never throws back. */
export interface PipelineEvents {
  /** A destination publish failed and the pipeline rolled back; it retries by itself. */
  publishTrouble(err: RelayError): void;
  /** The guard could not be reached; nothing is published or acked until it can. */
  guardTrouble(err: RelayError): void;
  /** A publish and, with a guard, a commit went through again after trouble. */
  healthy(): void;
  /** A message cannot be handled under the link's policy (`onBadMessage: halt`), or the destination is not the link's. */
  halt(err: RelayError): void;
  /**
   * A PubAck's sequence went backwards: the destination stream was recreated under its name. Publishing
   * is held (and what it stores is not acked) until the link has read the destination again.
   */
  destinationRestarted(detail: string): void;
}

/** What the link read about its destination at start (stream info and the connection's limits). */
export interface DestinationFacts {
  readonly stream: string;
  /** The largest message (headers + payload) the destination takes: min(server max_payload, stream max_msg_size). */
  readonly maxMessageBytes: number;
  /** The stream's duplicate window (ms): broker dedup forgets an id this long after storing it. */
  readonly duplicateWindowMs: number;
}

/** Reads the link's `Relay-Source` markers in the destination (see destination-markers.ts). */
export interface DestinationMarkers {
  /** Source seq → destination seq for the `wanted` source sequences found at or after `fromDestSeq`. */
  findStored(fromDestSeq: number, wanted: ReadonlySet<number>): Promise<ReadonlyMap<number, number>>;
  /** The `Relay-Source` header and payload of the message at `destSeq`, for telling an id collision from a duplicate. */
  storedAt(destSeq: number): Promise<{ readonly source: string; readonly data: Uint8Array } | undefined>;
}

export interface PipelineDeps {
  readonly link: LinkConfig;
  readonly links: readonly LinkConfig[];
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
   * The lease epoch this relay holds the link under (undefined: none). Claims and commits carry it, and
   * the guard refuses an older epoch than it has seen: an ex-owner that passed `owns()` just before a
   * pause cannot commit after another relay took over.
   */
  readonly epoch?: () => number | undefined;
  /** The incarnation of the lease bucket the epoch is a revision of: the guard compares it first. */
  readonly incarnation?: () => number | undefined;
}

/**
 * The ordered, bounded in-flight pipeline of one link (DESIGN §2):
 * identity → loop filter → guard.claim (one round trip per batch) → publish(Nats-Msg-Id) pipelined in
 * source order → PubAck → guard.commit (one round trip per batch) → ack at the source.
 *
 * Source order is kept in the destination: entries are published strictly in arrival order, and a
 * failed publish rolls the publish cursor back to it, so it and everything after it that has no PubAck
 * yet is published again in order (what did land is absorbed by broker dedup). A message is acked at
 * the source only after its PubAck (and commit), or after it was suppressed as a counted correction, or
 * parked on the dead-letter subject.
 */
export class Pipeline {
  /** Arrival order; `entries[head]` is the oldest live entry (finished ones are compacted away lazily). */
  private readonly entries: Entry[] = [];
  private head = 0;
  /** Entries waiting for a guard verdict, in arrival order. */
  private claimQueue: Entry[] = [];
  /** Entries with a PubAck waiting for the guard commit, in PubAck order. */
  private commitQueue: Entry[] = [];
  private readonly bySeq = new Map<number, Entry>();
  private readonly entryContext: EntryContext;
  private readonly counters: OutcomeCounters;
  private readonly directRoutes: ReadonlySet<string>;
  private readonly label: { link: string };
  private readonly publishBackoff = new Backoff(100, 5_000);
  private readonly guardBackoff = new Backoff(100, 5_000);
  private publisher: JetStreamPublisher | undefined;
  private publishPos = 0; // index into entries of the next entry that may need publishing (>= head)
  private publishBlockedUntil = 0;
  private claimInFlight = false;
  /** The token of a claim call that failed: its retry reuses it (see claimNext). */
  private claimRetryToken: string | undefined;
  /** Per entity, the highest version this pipeline claimed and has not committed yet. */
  private readonly uncommittedVersions = new Map<string, number>();
  private readonly correctionCounts: Record<CorrectionKind, number> = { broker_duplicate: 0, guard_duplicate: 0, stale_version: 0 };
  private readonly outcomeCounts: Record<MessageOutcome, number> = { relayed: 0, duplicate: 0, stale: 0, loop: 0, dead_lettered: 0 };
  /** The last error the pipeline met (publish, guard, bad message): shown in /status next to the link's own. */
  private lastErrorSeen: { readonly code: string; readonly message: string; readonly at: string } | undefined;
  private readonly nextToken = tokenSource();
  private commitInFlight = false;
  private guardBlockedUntil = 0;
  private pumpScheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryAt = 0;
  private troubled = false;
  private halted = false;
  private drainWaiters: (() => void)[] = [];
  private readonly ledger = new DestinationLedger();
  /** The highest source sequence counted as a loop: a loop at or below it is a redelivery. */
  private highestLoopCounted = 0;
  private heldBytes = 0;
  /** Finished while the lease was not valid: acked once it is (or dropped by abandon()). */
  private fenced: { entry: Entry; outcome: MessageOutcome }[] = [];
  private destination: DestinationFacts | undefined;
  /**
   * The destination changed (an advisory, a reconnect, a sequence going backwards) and is being read
   * again: nothing is published, and what gets a PubAck meanwhile waits in `parked` for the verdict.
   */
  private held = false;
  private parked: Entry[] = [];
  /** A publish landed in another stream, or was refused for it (10060): nothing from this source seq on is acked. */
  private strayFrom: number | undefined;
  /** A look into the destination before a late retry is running: nothing is published meanwhile. */
  private verifying = false;
  /** The source stream's creation time (ms): part of derived ids. */
  private incarnation: number | undefined;
  /** Messages up to this source seq were held by a previous owner (ordered recovery): their claims are taken over. */
  private takeoverUpTo = 0;
  /** The highest source seq this pipeline saw stored in the destination (its own history, acked or not). */
  private highestStored = 0;
  /** `sourceAcks: cumulative`: finished messages wait here for the one ack that covers them. */
  private readonly cumulative: CumulativeAcks | undefined;
  /** A claim another owner holds: claims (and so publishes past it) wait until then. */
  private claimHoldUntil = 0;

  constructor(private readonly deps: PipelineDeps) {
    this.entryContext = entryContext(deps.link);
    this.counters = outcomeCounters(deps.metrics, deps.link.name);
    this.directRoutes = directRoutesFor(deps.link, deps.links);
    this.label = { link: deps.link.name };
    this.cumulative = deps.link.sourceAcks === "cumulative" ? new CumulativeAcks() : undefined;
  }

  /** Messages between receive and ack. */
  get size(): number {
    return this.bySeq.size;
  }

  /** Messages sent to the destination and not acked at the source yet (publishing, published, committing). */
  get unsettled(): number {
    let n = 0;
    for (const e of this.bySeq.values()) if (e.state === "publishing" || e.state === "published" || e.state === "committing") n++;
    return n;
  }

  /** Payload and header bytes between receive and ack (headers estimated). */
  get bytes(): number {
    return this.heldBytes;
  }

  /** Publish time (ms) of the oldest message not yet acked, if any. */
  get oldestSourceMs(): number | undefined {
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (e && e.state !== "done") return e.sourceMs;
    }
    return undefined;
  }

  /** The source stream's creation time (ms), read by the link before it consumes. */
  setIncarnation(createdMs: number | undefined): void {
    // A recreated stream restarts at seq 1: what this pipeline remembers by sequence is about the old one.
    if (createdMs !== this.incarnation) {
      this.ledger.reset();
      this.cumulative?.reset();
      this.highestLoopCounted = 0;
    }
    this.incarnation = createdMs;
  }

  /** What the link read about the destination; publishing waits until it is known. Ends a hold. */
  setDestination(facts: DestinationFacts): void {
    const first = this.destination === undefined;
    this.destination = facts;
    if (first) for (const e of this.claimQueue) this.screen(e);
    this.held = false;
    const parked = this.parked;
    this.parked = [];
    for (const e of parked) if (e.state === "published") this.commitOrFinish(e);
    this.schedule();
  }

  /** The destination changed: publish nothing, ack nothing newly stored, until `setDestination` says it is fine. */
  holdDestination(): void {
    this.held = true;
  }

  get destinationHeld(): boolean {
    return this.held;
  }

  /**
   * Source sequences found in the destination by the link's start scan (ordered recovery): when they
   * are delivered again they are acked as already stored, without a publish.
   */
  setStoredInDestination(stored: ReadonlyMap<number, number>, upToSourceSeq: number, heldUpToSourceSeq: number): void {
    this.cursorMoved();
    this.ledger.setKnown(stored, upToSourceSeq);
    this.takeoverUpTo = heldUpToSourceSeq;
  }

  /**
   * The consumer was created or moved: an ack subject of the one before must not be sent to it (under
   * AckAll it would cover messages of the new cursor that are not finished).
   */
  cursorMoved(): void {
    this.cumulative?.reset();
  }

  /** The highest source seq this pipeline saw stored in the destination, whether acked yet or not. */
  get highestStoredSourceSeq(): number {
    return this.highestStored;
  }

  /** The highest destination sequence this link has seen its messages at. */
  get lastDestSeq(): number {
    return this.ledger.lastDestSeq;
  }

  /** The destination side: set when it connects, cleared when it goes away (publishing waits). */
  setPublisher(publisher: JetStreamPublisher | undefined): void {
    this.publisher = publisher;
    if (!publisher) this.rollback(this.head, new RelayError(ErrorCodes.PUBLISH_FAILED, "destination disconnected"));
    this.schedule();
  }

  /** Takes one source delivery. `snapshot`: the resync id, when it comes from a resync pass. */
  push(msg: Delivery, snapshot?: string): void {
    if (this.halted) return; // left unacked: redelivered when the link runs again
    const seq = msg.streamSequence;
    const known = this.bySeq.get(seq);
    if (known) {
      known.reply = msg.reply; // a redelivery while we still hold it: its ack subject acks both
      known.dseq = msg.consumerSequence;
      return;
    }
    if (snapshot === undefined && this.redeliveredAfterDone(msg)) return;
    const result = identify({ subject: msg.subject, headers: msg.headers, streamSequence: seq }, this.deps.link, this.incarnation);
    if (!result.ok) {
      this.badMessage(msg, result.id, result.reason);
      return;
    }
    const decision = route(result.identity, this.deps.link, this.directRoutes);
    if (!decision.forward) {
      if (this.debugOn) this.debug("loop", result.identity.id, { reason: decision.reason, origin: result.identity.origin });
      if (!this.deps.owns()) return; // fenced: the next owner acks it
      this.ackSource(seq, msg.reply, msg.consumerSequence);
      // Messages, not deliveries: a loop redelivered because its ack was lost is acked again, not counted
      // again — whatever its delivery count says (a source server restarted from disk can have lost the
      // acks and deliver them again as first deliveries). The consumer delivers in stream order.
      if (seq > this.highestLoopCounted) {
        this.highestLoopCounted = seq;
        this.count("loop");
      }
      return;
    }
    const entry = newEntry(msg, result.identity, this.entryContext);
    if (snapshot !== undefined) {
      entry.headers.append(RelayHeaders.Snapshot, snapshot);
      entry.dseq = Number.MAX_SAFE_INTEGER; // a resync pass's own numbering: it holds back no ack of the durable's
    }
    this.append(entry);
    if (this.deps.guard.kind === "none") entry.state = "ready";
    else if (this.screen(entry)) this.claimQueue.push(entry);
  }

  /**
   * A redelivery of a message this pipeline already finished (its ack was lost: a source stream leader
   * failover, a reconnect): acked again, never published again, however long after its first copy.
   * Whatever its delivery count says: a consumer leader that died before its followers learnt what it
   * had delivered leaves a new leader that delivers those messages again as first deliveries (delivery
   * count 1, consumer sequences going back).
   */
  private redeliveredAfterDone(msg: Delivery): boolean {
    const destSeq = this.ledger.finishedAt(msg.streamSequence);
    if (destSeq === undefined || !this.deps.owns()) return false;
    this.ackSource(msg.streamSequence, msg.reply, msg.consumerSequence);
    if (destSeq > 0) {
      this.count("duplicate");
      this.correct("broker_duplicate");
      if (this.debugOn) this.deps.logger.debug({ decision: "redelivered_after_done", seq: msg.streamSequence, destSeq }, "decision");
    }
    return true;
  }

  /**
   * A message larger than the destination takes is refused before the guard sees it: a claimed version
   * would make older versions of its entity stale although it is never applied. False when it was
   * refused (dead-lettered, or the link halted).
   */
  private screen(entry: Entry): boolean {
    const dest = this.destination;
    if (!dest || entry.state !== "claim" || wireSize(entry) <= dest.maxMessageBytes) return true;
    this.oversized(entry, dest);
    return false;
  }

  /** Resolves when every entry has left the pipeline (or `signal` aborts). */
  async drained(signal?: AbortSignal): Promise<void> {
    if (this.bySeq.size === 0 || signal?.aborted) return;
    await new Promise<void>((resolve) => {
      this.drainWaiters.push(resolve);
      signal?.addEventListener("abort", () => resolve(), { once: true });
    });
  }

  /** Releases claims of what was not published and forgets everything (it stays unacked at the source). */
  async abandon(): Promise<void> {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const claimed = this.entries.filter((e) => e.token !== undefined && (e.state === "ready" || e.state === "publishing"));
    for (const e of this.entries) e.state = "done";
    this.entries.length = 0;
    this.claimQueue = [];
    this.commitQueue = [];
    this.fenced = [];
    this.parked = [];
    this.ledger.reset();
    this.cumulative?.reset();
    this.uncommittedVersions.clear();
    this.head = 0;
    this.bySeq.clear();
    this.heldBytes = 0;
    this.publishPos = 0;
    for (const entry of claimed) entry.state = "done";
    if (claimed.length > 0) {
      await this.deps.guard.release(claimed.map((e) => claimedItem(e))).catch((err: unknown) => {
        this.deps.logger.warn({ err: toRelayError(err).message }, "could not release claims on stop; they expire by TTL");
      });
    }
    this.notifyDrained();
  }

  private append(entry: Entry): void {
    this.entries.push(entry);
    this.bySeq.set(entry.seq, entry);
    this.heldBytes += entry.heldBytes;
    this.schedule();
  }

  private badMessage(msg: Delivery, id: string, reason: string): void {
    const policy = this.deps.link.badMessage;
    const err = new RelayError(ErrorCodes.BAD_MESSAGE, `link ${this.deps.link.name}: message ${id} (source seq ${msg.streamSequence}): ${reason}`);
    this.recordError(err);
    const entry = newEntry(msg, { id, origin: this.deps.link.from.region, path: [] }, this.entryContext);
    if (policy.action === "halt") {
      entry.haltWith = err;
      entry.state = "ready";
    } else {
      this.deps.logger.warn({ id, seq: msg.streamSequence, reason, deadLetter: policy.subject }, "bad message: dead-lettering");
      toDeadLetter(entry, policy.subject, this.deps.link.name, reason);
    }
    this.append(entry);
  }

  /**
   * Looks for work again. The pipeline runs on events (deliveries, PubAcks, timers); a condition that
   * changes outside it (the lease valid again) must say so, or a full window would wait for an event
   * that never comes. The link also calls it on every poll, as a safety net.
   */
  resume(): void {
    this.schedule();
  }

  private schedule(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    if (this.bySeq.size >= COALESCE_BELOW) setImmediate(this.runPump);
    else setTimeout(this.runPump, COALESCE_MS);
  }

  /** The scheduled pump: one function for the pipeline's life, not a closure per schedule. */
  private readonly runPump = (): void => {
    this.pumpScheduled = false;
    this.pump();
  };

  /** Arms one timer for the earliest deadline asked for; a later deadline never pushes it back. */
  private scheduleAt(until: number): void {
    if (this.retryTimer && this.retryAt <= until) return;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryAt = until;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.schedule();
    }, Math.max(0, until - Date.now()));
  }

  private pump(): void {
    // A halted link publishes and claims nothing more, but what it published still gets its commit and ack.
    if (this.fenced.length > 0 && this.deps.owns()) {
      const fenced = this.fenced;
      this.fenced = [];
      for (const f of fenced) if (f.entry.state !== "done") this.finish(f.entry, f.outcome);
    }
    if (this.bySeq.size > 0 && this.claimHoldUntil > Date.now()) this.scheduleAt(this.claimHoldUntil);
    this.claimNext();
    this.publishReady();
    this.commitNext();
    this.trim();
    this.flushAcks();
    // Work held back by a backoff must find a timer waiting for it: nothing else may wake us up
    // (a paused link receives no new messages once its ack window is full).
    const now = Date.now();
    for (const until of [this.guardBlockedUntil, this.publishBlockedUntil]) if (until > now && this.bySeq.size > 0) this.scheduleAt(until);
  }

  // ---- guard claim: one round trip per batch, batches in arrival order -------------------------------
  /**
   * One claim call in flight at a time, a batch each, in arrival order. (Two in flight were measured:
   * with Redis on the same cores as the relay, the extra, smaller calls cost more than the overlap.)
   */
  private claimNext(): void {
    const now = Date.now();
    // Claims wait for the destination's limits: an oversized message must be refused before its claim.
    if (this.halted || !this.destination || this.claimInFlight || now < this.guardBlockedUntil || now < this.claimHoldUntil || this.claimQueue.length === 0) return;
    // A previous owner's messages (ordered recovery) go in batches of their own, taking its claims over.
    const takeover = (this.claimQueue[0]?.seq ?? Infinity) <= this.takeoverUpTo;
    let n = 0;
    const limit = Math.min(this.deps.link.batchSize, this.claimQueue.length);
    while (n < limit && ((this.claimQueue[n]?.seq ?? Infinity) <= this.takeoverUpTo) === takeover) n++;
    const batch = this.claimQueue.splice(0, n).filter((e) => e.state === "claim");
    if (batch.length === 0) return;
    // A retry after a failed call reuses its token: claims that landed although the reply was lost
    // are then recognised as ours.
    this.sendClaim(batch, (this.claimRetryToken ??= this.nextToken()), takeover);
  }

  private sendClaim(batch: Entry[], token: string, takeover: boolean): void {
    this.claimInFlight = true;
    const end = this.deps.metrics.guardDuration.startTimer({ ...this.label, op: "claim" });
    this.deps.guard
      .claim(batch.map((e) => e.identity), token, { ...(takeover ? { takeover } : {}), ...this.epochOption() })
      .then((results) => {
        end();
        this.claimRetryToken = undefined;
        this.guardRecovered();
        const held: Entry[] = [];
        batch.forEach((e, i) => {
          if (this.applyClaim(e, results[i]) === "held") held.push(e);
        });
        if (held.length > 0) this.hold(held);
      })
      .catch((err: unknown) => {
        // Nothing was claimed that we know of: the batch goes back to the front, in order.
        this.claimQueue = [...batch.filter((e) => e.state === "claim"), ...this.claimQueue];
        this.guardFailed(err);
      })
      .finally(() => {
        this.claimInFlight = false;
        this.schedule();
      });
  }

  private applyClaim(entry: Entry, result: ClaimResult | undefined): "held" | undefined {
    if (entry.state !== "claim") return undefined; // abandoned meanwhile
    const decision = result?.decision ?? "in-flight";
    if (this.debugOn) this.debug(decision, entry.identity.id, { storedVersion: result?.storedVersion });
    switch (decision) {
      case "relay": {
        entry.token = result?.token;
        const { entity, version } = entry.identity;
        if (entity !== undefined && version !== undefined) {
          // The guard compares with committed versions; a newer version of this entity that we claimed
          // in an earlier batch and have not committed yet makes this one stale too.
          const pending = this.uncommittedVersions.get(entity);
          if (pending !== undefined && version <= pending) {
            this.deps.guard.release([claimedItem(entry)]).catch(() => undefined); // else it expires
            this.debug("stale", entry.identity.id, { uncommittedVersion: pending });
            this.correct("stale_version");
            this.finish(entry, "stale");
            return undefined;
          }
          this.uncommittedVersions.set(entity, version);
        }
        entry.state = "ready";
        return undefined;
      }
      case "duplicate":
        this.correct("guard_duplicate");
        this.finish(entry, "duplicate");
        return undefined;
      case "stale":
        this.correct("stale_version");
        this.finish(entry, "stale");
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
    this.claimQueue = [...held, ...this.claimQueue]; // back to the front, in arrival order
    const waitMs = Math.min(1_000, Math.max(50, Math.floor(this.deps.link.ackWaitMs / 10)));
    this.claimHoldUntil = Date.now() + waitMs;
    this.scheduleAt(this.claimHoldUntil);
    this.deps.metrics.held.inc(this.label, held.length);
    const first = held[0];
    if (first) {
      this.deps.logger.info({ id: first.identity.id, seq: first.seq, held: held.length }, "claim held by another owner: waiting for it to commit or expire before relaying newer messages");
    }
  }

  // ---- publish: strictly in arrival order, rolled back on failure ------------------------------------
  private publishReady(): void {
    const publisher = this.publisher;
    const dest = this.destination;
    if (!publisher || !dest) return;
    if (this.publishPos < this.head) this.publishPos = this.head;
    // Every pass re-checks the blocks: a callback run meanwhile may have rolled back or halted.
    while (this.publishPos < this.entries.length && !this.halted && !this.held && !this.verifying && Date.now() >= this.publishBlockedUntil && this.deps.owns()) {
      const entry = this.entries[this.publishPos];
      if (!entry || entry.state === "claim") return; // order: never publish past an undecided entry
      if (entry.state !== "ready") {
        this.publishPos++;
        continue;
      }
      if (entry.haltWith) {
        this.halted = true;
        this.deps.events.halt(entry.haltWith);
        return;
      }
      if (entry.data.length > 0 && wireSize(entry) > dest.maxMessageBytes) {
        this.oversized(entry, dest);
        continue; // now a dead-letter record (or the link halted): looked at again
      }
      if (entry.deadLetterReason === undefined) {
        const storedAt = this.ledger.storedAt(entry.seq);
        if (storedAt !== undefined) {
          // Found in the destination by the start scan: stored by an earlier process, not yet acked.
          this.publishPos++;
          this.onStored(entry, { stream: dest.stream, seq: storedAt, duplicate: true }, "found in the destination at start");
          continue;
        }
        if (entry.firstAttemptMs > 0 && Date.now() - entry.firstAttemptMs >= this.lateRetryMs(dest)) {
          this.verifyLateRetries(this.publishPos, dest);
          return;
        }
      }
      this.publishPos++;
      entry.state = "publishing";
      const attempt = ++entry.attempt;
      entry.publishStartedAt = performance.now();
      if (entry.firstAttemptMs === 0) {
        entry.firstAttemptMs = Date.now();
        entry.destFloor = this.ledger.lastDestSeq;
      }
      publisher.publish(entry.subject, entry.data, entry.headers.asMsgHdrs(), (err, ack) => this.onPubAck(entry, attempt, err, ack));
    }
  }

  /**
   * A retry this long after the first attempt may find broker dedup has forgotten the id (its window
   * counts from when the first copy was stored, which is no earlier than the first attempt): half the
   * window leaves room for the retry's own way to the server.
   */
  private lateRetryMs(dest: DestinationFacts): number {
    return Math.max(1, Math.floor(dest.duplicateWindowMs / 2));
  }

  /**
   * Before a late retry, look in the destination for the messages' `Relay-Source` markers above the
   * highest destination sequence known at their first attempt: what is there is not published again.
   */
  private verifyLateRetries(from: number, dest: DestinationFacts): void {
    const late: Entry[] = [];
    const cutoff = Date.now() - this.lateRetryMs(dest);
    for (let i = from; i < this.entries.length && late.length < this.deps.link.batchSize; i++) {
      const e = this.entries[i];
      if (!e || e.state === "claim") break;
      if (e.state !== "ready" || e.deadLetterReason !== undefined) continue;
      if (e.firstAttemptMs === 0 || e.firstAttemptMs > cutoff) break;
      late.push(e);
    }
    const floor = Math.min(...late.map((e) => e.destFloor));
    this.verifying = true;
    this.deps.markers
      .findStored(floor + 1, new Set(late.map((e) => e.seq)))
      .then((found) => {
        let published = 0;
        for (const e of late) {
          if (e.state !== "ready") continue;
          const destSeq = found.get(e.seq);
          if (destSeq !== undefined) {
            this.onStored(e, { stream: dest.stream, seq: destSeq, duplicate: true }, "found in the destination before a late retry");
          } else {
            e.firstAttemptMs = Date.now(); // not there: this retry is a fresh first attempt
            e.destFloor = this.ledger.lastDestSeq;
            published++;
          }
        }
        this.deps.logger.info({ checked: late.length, found: late.length - published, fromDestSeq: floor + 1 }, "late retry: looked for the messages in the destination first");
      })
      .catch((err: unknown) => {
        const head = late[0];
        const index = head ? this.entries.indexOf(head, this.head) : -1;
        this.rollback(index >= 0 ? index : this.head, toRelayError(err, ErrorCodes.PUBLISH_FAILED), true);
      })
      .finally(() => {
        this.verifying = false;
        this.schedule();
      });
  }

  /** Larger than the destination takes (headers included): never published as is. */
  private oversized(entry: Entry, dest: DestinationFacts): void {
    const size = wireSize(entry);
    const reason = `message is ${size} bytes with headers; the destination takes at most ${dest.maxMessageBytes}`;
    if (entry.deadLetterReason !== undefined) {
      // Already on its way to the dead-letter subject, and too large for it too: park the record only.
      toOversizedDeadLetter(entry, entry.subject, this.deps.link.name, `${entry.deadLetterReason}; ${reason}`);
      return;
    }
    const err = new RelayError(ErrorCodes.MESSAGE_TOO_LARGE, `link ${this.deps.link.name}: message ${entry.identity.id} (source seq ${entry.seq}): ${reason}`);
    this.recordError(err);
    this.rejectMessage(entry, err, reason, true);
  }

  /** The bad-message policy for a message the destination will not take: halt, or park it on the dead-letter subject. */
  private rejectMessage(entry: Entry, err: RelayError, reason: string, oversized: boolean): void {
    const policy = this.deps.link.badMessage;
    this.forgetVersion(entry); // a refused version is never applied
    if (policy.action === "halt") {
      entry.haltWith = err; // the link halts when the publish cursor gets there
      entry.state = "ready";
      return;
    }
    this.deps.logger.warn({ id: entry.identity.id, seq: entry.seq, code: err.code, reason, deadLetter: policy.subject }, "message refused by the destination: dead-lettering");
    if (oversized) toOversizedDeadLetter(entry, policy.subject, this.deps.link.name, reason);
    else toDeadLetter(entry, policy.subject, this.deps.link.name, reason);
    entry.firstAttemptMs = 0;
  }

  private onPubAck(entry: Entry, attempt: number, err: RelayError | null, ack: PubAck | null): void {
    if (entry.state !== "publishing" && entry.state !== "ready") return;
    if (this.strayFrom !== undefined && entry.seq > this.strayFrom) {
      // Published before the link halted on a stray message: whatever its answer, it is not acked (a copy
      // in the destination is found by its marker when the link runs again).
      entry.state = "ready";
      return;
    }
    if (ack) {
      // A success is a success whatever attempt it answers: the message is in the stream.
      this.counters.publishDuration.observe((performance.now() - entry.publishStartedAt) / 1000);
      const dest = this.destination;
      if (dest && entry.deadLetterReason === undefined && ack.stream !== dest.stream) {
        const mismatch = new RelayError(
          ErrorCodes.DESTINATION_MISMATCH,
          `link ${this.deps.link.name}: subject ${entry.subject} is stored by stream ${ack.stream}, not the link's destination ${dest.stream} (message ${entry.identity.id}, source seq ${entry.seq}, now at ${ack.stream} seq ${ack.seq}); bind the subject to ${dest.stream} or change the link`,
        );
        this.stray(entry, mismatch);
        return;
      }
      this.onStored(entry, ack);
      return;
    }
    if (err?.code === ErrorCodes.DESTINATION_MISMATCH) {
      // Refused for `Nats-Expected-Stream` (10060): the subject is bound to another stream; nothing was stored.
      const stream = this.destination?.stream ?? this.deps.link.to.stream;
      this.stray(entry, new RelayError(ErrorCodes.DESTINATION_MISMATCH, `link ${this.deps.link.name}: message ${entry.identity.id} (source seq ${entry.seq}) refused: ${err.message}; the subject is no longer bound to ${stream}: bind it again or change the link`));
      return;
    }
    if (attempt !== entry.attempt || !err) return; // an older attempt's failure: already rolled back
    const index = this.entries.indexOf(entry, this.head);
    if (err.code === ErrorCodes.MESSAGE_TOO_LARGE && entry.data.length > 0) {
      // The stream's own limit was lower than the one read at start (changed since): as if known before.
      this.recordError(err);
      if (entry.deadLetterReason !== undefined) toOversizedDeadLetter(entry, entry.subject, this.deps.link.name, `${entry.deadLetterReason}; ${err.message}`);
      else this.rejectMessage(entry, err, err.message, true);
      if (index >= 0) this.publishPos = Math.min(this.publishPos, index);
      this.schedule();
      return;
    }
    if (index >= 0) this.rollback(index, err);
  }

  /**
   * A message went to (or was refused for) another stream than the link's: the link halts at once.
   * It and everything after it stay unacked at the source; what came before it is still acked.
   */
  private stray(entry: Entry, err: RelayError): void {
    this.recordError(err);
    entry.state = "ready"; // not in the destination: left for the next run
    if (this.strayFrom === undefined || entry.seq < this.strayFrom) this.strayFrom = entry.seq;
    if (this.halted) return;
    this.halted = true;
    this.deps.events.halt(err);
  }

  /** The message is in the destination (a PubAck, or found by its marker): on to commit and ack. */
  private onStored(entry: Entry, ack: PubAck, foundBy?: string): void {
    if (foundBy === undefined && !ack.duplicate && entry.deadLetterReason === undefined && ack.seq <= this.ledger.lastDestSeq) {
      // A stream's sequences only grow: a new store at or below one seen before is a new stream under the
      // old name (deleted and recreated). Its settings are not known: hold until the link read them.
      const detail = `PubAck for source seq ${entry.seq} at destination seq ${ack.seq}, below seq ${this.ledger.lastDestSeq} seen before: the destination stream was recreated`;
      this.ledger.destinationRestarted();
      this.held = true;
      this.deps.events.destinationRestarted(detail);
    }
    entry.state = "published";
    if (entry.seq > this.highestStored) this.highestStored = entry.seq;
    entry.destSeq = ack.seq;
    entry.brokerDuplicate = ack.duplicate;
    if (entry.deadLetterReason === undefined) {
      const reorder = this.ledger.stored(entry.seq, ack.seq, !ack.duplicate);
      if (reorder) {
        this.deps.metrics.reordered.inc(this.label);
        this.deps.logger.warn(
          { id: entry.identity.id, ...reorder },
          "the destination stored a message after a later one (an earlier publish failed while later ones in flight were stored)",
        );
      }
    }
    if (ack.duplicate) {
      this.correct("broker_duplicate");
      if (foundBy) this.deps.logger.info({ id: entry.identity.id, seq: entry.seq, destSeq: ack.seq }, `${foundBy}: not published again`);
      else this.checkCollision(entry, ack.seq);
      if (this.debugOn) this.debug("broker_duplicate", entry.identity.id, { destSeq: ack.seq });
    }
    this.publishRecovered();
    if (this.held && entry.deadLetterReason === undefined) {
      this.parked.push(entry); // acked (and committed) only once the destination is known to keep it
      return;
    }
    this.commitOrFinish(entry);
  }

  private commitOrFinish(entry: Entry): void {
    if (this.deps.guard.kind === "none") {
      this.finish(entry, this.outcomeOf(entry));
    } else {
      this.commitQueue.push(entry);
      this.schedule();
    }
  }

  /**
   * A duplicate answer names the stored message's sequence. When that message came from another source
   * position and holds another payload, two different messages share an id: the second is not stored,
   * and that must not be silent.
   */
  private checkCollision(entry: Entry, destSeq: number): void {
    if (entry.deadLetterReason !== undefined) return;
    const ours = entry.headers.get(RelayHeaders.Source) ?? "";
    const data = entry.data;
    this.deps.markers
      .storedAt(destSeq)
      .then((stored) => {
        if (!stored || stored.source === ours || Buffer.compare(Buffer.from(stored.data), Buffer.from(data)) === 0) return;
        this.deps.metrics.idCollisions.inc(this.label);
        this.deps.logger.error(
          { id: entry.identity.id, source: ours, storedSource: stored.source, destSeq },
          "id collision: the destination holds a different message under this Nats-Msg-Id; this one was not stored",
        );
      })
      .catch((err: unknown) => this.deps.logger.debug({ err: toRelayError(err).message, destSeq }, "could not read a duplicate's stored copy"));
  }

  /** Everything from `index` on that has no PubAck is published again, in order, after a backoff. */
  private rollback(index: number, err: RelayError, force = false): void {
    let rolled = 0;
    const from = Math.max(this.head, index);
    for (let i = from; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (e?.state === "publishing") {
        e.state = "ready";
        e.attempt++;
        rolled++;
      }
    }
    this.publishPos = Math.min(this.publishPos, from);
    if (rolled === 0 && index > this.head && !force) return;
    this.recordError(err);
    this.troubled = true;
    this.publishBlockedUntil = Date.now() + this.publishBackoff.next();
    this.scheduleAt(this.publishBlockedUntil);
    if (rolled > 0) this.deps.logger.warn({ code: err.code, err: err.message, rolledBack: rolled }, "publish failed; retrying in order");
    this.deps.events.publishTrouble(err);
  }

  // ---- commit then ack ---------------------------------------------------------------------------------
  private commitNext(): void {
    if (this.commitInFlight || Date.now() < this.guardBlockedUntil || this.commitQueue.length === 0 || !this.deps.owns()) return;
    const batch = this.commitQueue.splice(0, this.deps.link.batchSize).filter((e) => e.state === "published");
    if (batch.length > 0) this.sendCommit(batch);
  }

  private sendCommit(batch: Entry[]): void {
    this.commitInFlight = true;
    for (const e of batch) e.state = "committing";
    const withTokens = batch.filter((e) => e.token !== undefined);
    const end = this.deps.metrics.guardDuration.startTimer({ ...this.label, op: "commit" });
    this.deps.guard
      // A dead-lettered message was not applied: its id is done, its entity's version does not move.
      .commit(withTokens.map((e) => claimedItem(e, e.deadLetterReason === undefined)), this.epochOption())
      .then(() => {
        end();
        this.guardRecovered();
        for (const e of batch) this.finish(e, this.outcomeOf(e));
      })
      .catch((err: unknown) => {
        // Already in the destination: keep it, commit again when the guard is back, then ack.
        const back = batch.filter((e) => e.state === "committing");
        for (const e of back) e.state = "published";
        this.commitQueue = [...back, ...this.commitQueue];
        this.guardFailed(err);
      })
      .finally(() => {
        this.commitInFlight = false;
        this.schedule();
      });
  }

  private outcomeOf(entry: Entry): MessageOutcome {
    if (entry.deadLetterReason !== undefined) return "dead_lettered";
    return entry.brokerDuplicate ? "duplicate" : "relayed";
  }

  /** Drops the entity's pending version when it is this entry's (it will not be applied). */
  private forgetVersion(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity !== undefined && this.uncommittedVersions.get(entity) === version) this.uncommittedVersions.delete(entity);
  }

  /**
   * In-progress acks for messages held longer than half the ack wait (a slow or paused destination, a
   * held claim): the source would otherwise redeliver the whole window across the WAN every ack wait.
   * Called by the link's timer; returns how many were sent.
   */
  keepAlive(): number {
    if (!this.deps.owns()) return 0;
    const now = performance.now();
    const after = this.deps.link.ackWaitMs / 2;
    let sent = 0;
    for (const e of this.bySeq.values()) {
      if (now - Math.max(e.receivedAt, e.workingSentAt) < after) continue;
      if (this.deps.acks.working(e.reply)) sent++;
      e.workingSentAt = now;
    }
    return sent;
  }

  private finish(entry: Entry, outcome: MessageOutcome): void {
    if (!this.deps.owns()) {
      // Fenced: no ack now. The lease comes back (a renewal that landed late) or is lost (abandon()).
      this.fenced.push({ entry, outcome });
      this.scheduleAt(Date.now() + 100);
      return;
    }
    this.ackSource(entry.seq, entry.reply, entry.dseq);
    this.ledger.done(entry.seq, entry.destSeq);
    const { entity, version } = entry.identity;
    if (entity !== undefined && entry.token !== undefined && this.uncommittedVersions.get(entity) === version) {
      this.uncommittedVersions.delete(entity); // committed (or stale): the guard knows it now
    }
    this.count(outcome);
    if (outcome === "relayed") {
      this.counters.replayAge.observe(Math.max(0, (Date.now() - entry.sourceMs) / 1000));
    }
    this.remove(entry);
  }

  /** A finished message's ack: sent now (`each`), or left for the next flush to cover (`cumulative`). */
  private ackSource(seq: number, reply: string, dseq = 0): void {
    if (!this.cumulative) {
      if (this.deps.acks.ack(reply)) this.deps.metrics.sourceAcks.inc(this.label);
      return;
    }
    this.cumulative.done(seq, reply, dseq);
    this.schedule();
  }

  /** `cumulative`: one ack for every finished message below the lowest one still held (also before the link fails). */
  flushAcks(): void {
    const acks = this.cumulative;
    if (!acks || acks.waiting === 0 || !this.deps.owns()) return;
    let lowest: number | undefined;
    let lowestDseq: number | undefined;
    for (const e of this.bySeq.values()) {
      if (lowest === undefined || e.seq < lowest) lowest = e.seq;
      if (lowestDseq === undefined || e.dseq < lowestDseq) lowestDseq = e.dseq;
    }
    const reply = acks.flush(lowest, lowestDseq);
    if (reply !== undefined && this.deps.acks.ack(reply)) this.deps.metrics.sourceAcks.inc(this.label);
  }

  private remove(entry: Entry): void {
    entry.state = "done";
    if (this.bySeq.delete(entry.seq)) this.heldBytes -= entry.heldBytes;
    if (this.bySeq.size === 0) {
      // Drained: a stop or a handover releases the lease next, so the cumulative ack goes now.
      this.flushAcks();
      this.notifyDrained();
    }
  }

  /** Moves `head` past finished entries; compacts the array once the dead prefix is large. */
  private trim(): void {
    while (this.head < this.entries.length && this.entries[this.head]?.state === "done") this.head++;
    if (this.head < 4_096 && this.head * 2 < this.entries.length) return;
    this.entries.splice(0, this.head);
    this.publishPos = Math.max(0, this.publishPos - this.head);
    this.head = 0;
  }

  private epochOption(): { epoch?: number; incarnation?: number } {
    const epoch = this.deps.epoch?.();
    const incarnation = this.deps.incarnation?.();
    return epoch === undefined ? {} : { epoch, ...(incarnation !== undefined ? { incarnation } : {}) };
  }

  private guardFailed(err: unknown): void {
    const relayErr = toRelayError(err, ErrorCodes.GUARD_UNAVAILABLE);
    this.recordError(relayErr);
    if (relayErr.code === ErrorCodes.LEASE_FENCED) {
      // Another relay owns the link under a newer epoch: nothing of this batch was claimed or
      // committed. What this relay holds stays unacked; the link drops it for the new owner.
      this.deps.logger.warn({ code: relayErr.code, err: relayErr.message }, "guard fenced this relay off: another relay owns the link");
      this.guardBlockedUntil = Date.now() + 1_000;
      this.scheduleAt(this.guardBlockedUntil);
      return;
    }
    this.troubled = true;
    this.guardBlockedUntil = Date.now() + this.guardBackoff.next();
    this.scheduleAt(this.guardBlockedUntil);
    this.deps.events.guardTrouble(relayErr);
  }

  private guardRecovered(): void {
    this.guardBackoff.reset();
    this.recovered();
  }

  private publishRecovered(): void {
    this.publishBackoff.reset();
    this.recovered();
  }

  private recovered(): void {
    if (!this.troubled) return;
    this.troubled = false;
    this.deps.events.healthy();
  }

  /** Corrections so far, by kind (also in `relay_corrections_total`): shown in /status. */
  get corrections(): Readonly<Record<CorrectionKind, number>> {
    return this.correctionCounts;
  }

  private correct(kind: CorrectionKind): void {
    this.counters.corrections[kind].inc();
    this.correctionCounts[kind]++;
  }

  private count(outcome: MessageOutcome): void {
    this.counters.messages[outcome].inc();
    this.outcomeCounts[outcome]++;
  }

  /** Messages finished since the relay started, by outcome (also in `relay_messages_total`): shown in /status. */
  get outcomes(): Readonly<Record<MessageOutcome, number>> {
    return this.outcomeCounts;
  }

  get lastError(): { readonly code: string; readonly message: string; readonly at: string } | undefined {
    return this.lastErrorSeen;
  }

  private recordError(err: RelayError): void {
    this.deps.metrics.errors.inc({ ...this.label, code: err.code });
    this.lastErrorSeen = { code: err.code, message: err.message, at: new Date().toISOString() };
  }

  /** Decision logs are per message: their fields are only built when debug is on. */
  private get debugOn(): boolean {
    return this.deps.logger.isLevelEnabled("debug");
  }

  private debug(decision: string, id: string, extra: Record<string, unknown>): void {
    if (!this.debugOn) return;
    const entry = this.bySeqForId(id);
    this.deps.logger.debug({ decision, id, entity: entry?.identity.entity, version: entry?.identity.version, ...extra }, "decision");
  }

  private bySeqForId(id: string): Entry | undefined {
    for (const e of this.bySeq.values()) if (e.identity.id === id) return e;
    return undefined;
  }

  private notifyDrained(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }
}

function claimedItem(e: Entry, withVersion = true) {
  const { id, entity, version } = e.identity;
  return withVersion ? { id, entity, version, token: e.token ?? "" } : { id, token: e.token ?? "" };
}
