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
import { newEntry, stripSet, toDeadLetter } from "./entry.js";
import { NanosFormatter, RelayHeaders } from "./headers.js";
import { outcomeCounters } from "./outcome-counters.js";
import type { OutcomeCounters } from "./outcome-counters.js";
import { directRoutesFor, identify, route } from "./identity.js";

/** What the pipeline tells its link, so the link can change state; never throws back. */
export interface PipelineEvents {
  /** A destination publish failed and the pipeline rolled back; it retries by itself. */
  publishTrouble(err: RelayError): void;
  /** The guard could not be reached; nothing is published or acked until it can. */
  guardTrouble(err: RelayError): void;
  /** A publish and, with a guard, a commit went through again after trouble. */
  healthy(): void;
  /** A message cannot be handled under the link's policy (`onBadMessage: halt`). */
  halt(err: RelayError): void;
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
  private readonly nextToken = tokenSource();
  private commitInFlight = false;
  private guardBlockedUntil = 0;
  private pumpScheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryAt = 0;
  private troubled = false;
  private halted = false;
  private drainWaiters: (() => void)[] = [];

  constructor(private readonly deps: PipelineDeps) {
    this.entryContext = { link: deps.link, strip: stripSet(deps.link), time: new NanosFormatter() };
    this.counters = outcomeCounters(deps.metrics, deps.link.name);
    this.directRoutes = directRoutesFor(deps.link, deps.links);
    this.label = { link: deps.link.name };
  }

  /** Messages between receive and ack. */
  get size(): number {
    return this.bySeq.size;
  }

  /** Publish time (ms) of the oldest message not yet acked, if any. */
  get oldestSourceMs(): number | undefined {
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (e && e.state !== "done") return e.sourceMs;
    }
    return undefined;
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
      known.replies.push(msg.reply); // a redelivery while we still hold it: ack both when done
      return;
    }
    const result = identify({ subject: msg.subject, headers: msg.headers, streamSequence: seq }, this.deps.link);
    if (!result.ok) {
      this.badMessage(msg, result.id, result.reason);
      return;
    }
    const decision = route(result.identity, this.deps.link, this.directRoutes);
    if (!decision.forward) {
      if (this.debugOn) this.debug("loop", result.identity.id, { reason: decision.reason, origin: result.identity.origin });
      this.deps.acks.ack(msg.reply);
      // Messages, not deliveries: a loop redelivered because its ack was lost is acked again, not counted again.
      if (msg.deliveryCount <= 1) this.count("loop");
      return;
    }
    const entry = newEntry(msg, result.identity, this.entryContext);
    if (snapshot !== undefined) entry.headers.append(RelayHeaders.Snapshot, snapshot);
    if (this.deps.guard.kind === "none") entry.state = "ready";
    else this.claimQueue.push(entry);
    this.append(entry);
  }

  /** Resolves when every entry has left the pipeline (or `signal` aborts). */
  async drained(signal?: AbortSignal): Promise<void> {
    if (this.bySeq.size === 0) return;
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
    this.uncommittedVersions.clear();
    this.head = 0;
    this.bySeq.clear();
    this.publishPos = 0;
    for (const entry of claimed) entry.state = "done";
    if (claimed.length > 0) {
      await this.deps.guard.release(claimed.map(claimedItem)).catch((err: unknown) => {
        this.deps.logger.warn({ err: toRelayError(err).message }, "could not release claims on stop; they expire by TTL");
      });
    }
    this.notifyDrained();
  }

  private append(entry: Entry): void {
    this.entries.push(entry);
    this.bySeq.set(entry.seq, entry);
    this.schedule();
  }

  private badMessage(msg: Delivery, id: string, reason: string): void {
    const policy = this.deps.link.badMessage;
    const err = new RelayError(ErrorCodes.BAD_MESSAGE, `link ${this.deps.link.name}: message ${id} (source seq ${msg.streamSequence}): ${reason}`);
    this.deps.metrics.errors.inc({ ...this.label, code: err.code });
    if (policy.action === "halt") {
      this.halted = true;
      this.deps.events.halt(err);
      return;
    }
    this.deps.logger.warn({ id, seq: msg.streamSequence, reason, deadLetter: policy.subject }, "bad message: dead-lettering");
    const entry = newEntry(msg, { id, origin: this.deps.link.from.region, path: [] }, this.entryContext);
    toDeadLetter(entry, policy.subject, this.deps.link.name, reason);
    this.append(entry);
  }

  private schedule(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

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
    if (this.halted) return;
    this.claimNext();
    this.publishReady();
    this.commitNext();
    this.trim();
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
    if (this.claimInFlight || Date.now() < this.guardBlockedUntil || this.claimQueue.length === 0) return;
    const batch = this.claimQueue.splice(0, this.deps.link.batchSize).filter((e) => e.state === "claim");
    if (batch.length === 0) return;
    // A retry after a failed call reuses its token: claims that landed although the reply was lost
    // are then recognised as ours.
    this.sendClaim(batch, (this.claimRetryToken ??= this.nextToken()));
  }

  private sendClaim(batch: Entry[], token: string): void {
    this.claimInFlight = true;
    const end = this.deps.metrics.guardDuration.startTimer({ ...this.label, op: "claim" });
    this.deps.guard
      .claim(batch.map((e) => e.identity), token)
      .then((results) => {
        end();
        this.claimRetryToken = undefined;
        this.guardRecovered();
        batch.forEach((e, i) => this.applyClaim(e, results[i]));
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

  private applyClaim(entry: Entry, result: ClaimResult | undefined): void {
    if (entry.state !== "claim") return; // abandoned meanwhile
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
            return;
          }
          this.uncommittedVersions.set(entity, version);
        }
        entry.state = "ready";
        return;
      }
      case "duplicate":
        this.correct("guard_duplicate");
        this.finish(entry, "duplicate");
        return;
      case "stale":
        this.correct("stale_version");
        this.finish(entry, "stale");
        return;
      case "in-flight":
        // Another relay holds the claim: leave it to that relay, look again after its claim could expire.
        for (const reply of entry.replies) this.deps.acks.nak(reply, this.deps.link.ackWaitMs);
        this.remove(entry);
        return;
    }
  }

  // ---- publish: strictly in arrival order, rolled back on failure ------------------------------------
  private publishReady(): void {
    const publisher = this.publisher;
    if (!publisher || Date.now() < this.publishBlockedUntil) return;
    if (this.publishPos < this.head) this.publishPos = this.head;
    while (this.publishPos < this.entries.length) {
      const entry = this.entries[this.publishPos];
      if (!entry || entry.state === "claim") return; // order: never publish past an undecided entry
      this.publishPos++;
      if (entry.state !== "ready") continue;
      entry.state = "publishing";
      const attempt = ++entry.attempt;
      entry.publishStartedAt = performance.now();
      publisher.publish(entry.subject, entry.data, entry.headers.asMsgHdrs(), (err, ack) => this.onPubAck(entry, attempt, err, ack));
    }
  }

  private onPubAck(entry: Entry, attempt: number, err: RelayError | null, ack: PubAck | null): void {
    if (entry.state !== "publishing" && entry.state !== "ready") return;
    if (ack) {
      // A success is a success whatever attempt it answers: the message is in the stream.
      entry.state = "published";
      this.counters.publishDuration.observe((performance.now() - entry.publishStartedAt) / 1000);
      if (ack.duplicate) {
        this.correct("broker_duplicate");
        if (this.debugOn) this.debug("broker_duplicate", entry.identity.id, { destSeq: ack.seq });
      }
      entry.brokerDuplicate = ack.duplicate;
      this.publishRecovered();
      if (this.deps.guard.kind === "none") {
        this.finish(entry, this.outcomeOf(entry));
      } else {
        this.commitQueue.push(entry);
        this.schedule();
      }
      return;
    }
    if (attempt !== entry.attempt || !err) return; // an older attempt's failure: already rolled back
    const index = this.entries.indexOf(entry, this.head);
    if (err.code === ErrorCodes.PUBLISH_REJECTED && entry.deadLetterReason === undefined) {
      const policy = this.deps.link.badMessage;
      this.deps.metrics.errors.inc({ ...this.label, code: err.code });
      if (policy.action === "halt") {
        this.halted = true;
        this.deps.events.halt(err);
        return;
      }
      this.deps.logger.warn({ id: entry.identity.id, seq: entry.seq, reason: err.message }, "destination rejected message: dead-lettering");
      toDeadLetter(entry, policy.subject, this.deps.link.name, err.message);
      if (index >= 0) this.publishPos = Math.min(this.publishPos, index);
      this.schedule();
      return;
    }
    if (index >= 0) this.rollback(index, err);
  }

  /** Everything from `index` on that has no PubAck is published again, in order, after a backoff. */
  private rollback(index: number, err: RelayError): void {
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
    if (rolled === 0 && index > this.head) return;
    this.deps.metrics.errors.inc({ ...this.label, code: err.code });
    this.troubled = true;
    this.publishBlockedUntil = Date.now() + this.publishBackoff.next();
    this.scheduleAt(this.publishBlockedUntil);
    if (rolled > 0) this.deps.logger.warn({ code: err.code, err: err.message, rolledBack: rolled }, "publish failed; retrying in order");
    this.deps.events.publishTrouble(err);
  }

  // ---- commit then ack ---------------------------------------------------------------------------------
  private commitNext(): void {
    if (this.commitInFlight || Date.now() < this.guardBlockedUntil || this.commitQueue.length === 0) return;
    const batch = this.commitQueue.splice(0, this.deps.link.batchSize).filter((e) => e.state === "published");
    if (batch.length > 0) this.sendCommit(batch);
  }

  private sendCommit(batch: Entry[]): void {
    this.commitInFlight = true;
    for (const e of batch) e.state = "committing";
    const withTokens = batch.filter((e) => e.token !== undefined);
    const end = this.deps.metrics.guardDuration.startTimer({ ...this.label, op: "commit" });
    this.deps.guard
      .commit(withTokens.map(claimedItem))
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

  private finish(entry: Entry, outcome: MessageOutcome): void {
    for (const reply of entry.replies) this.deps.acks.ack(reply);
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

  private remove(entry: Entry): void {
    entry.state = "done";
    this.bySeq.delete(entry.seq);
    if (this.bySeq.size === 0) this.notifyDrained();
  }

  /** Moves `head` past finished entries; compacts the array once the dead prefix is large. */
  private trim(): void {
    while (this.head < this.entries.length && this.entries[this.head]?.state === "done") this.head++;
    if (this.head < 4_096 && this.head * 2 < this.entries.length) return;
    this.entries.splice(0, this.head);
    this.publishPos = Math.max(0, this.publishPos - this.head);
    this.head = 0;
  }

  private guardFailed(err: unknown): void {
    const relayErr = toRelayError(err, ErrorCodes.GUARD_UNAVAILABLE);
    this.deps.metrics.errors.inc({ ...this.label, code: relayErr.code });
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

function claimedItem(e: Entry) {
  return { id: e.identity.id, entity: e.identity.entity, version: e.identity.version, token: e.token ?? "" };
}
