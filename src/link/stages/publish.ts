/**
 * Publishing to the destination with `Nats-Msg-Id`, pipelined, strictly in arrival order: the publish
 * cursor never passes an entry without a guard verdict, and a failed publish rolls it back, so the
 * failed message and everything after it without a PubAck is published again in order (what did land
 * is absorbed by broker dedup). Before a publish, what the start scan found stored is not sent again,
 * a retry late enough for broker dedup to have forgotten the id first looks for the message's
 * marker in the destination, and a retry of a versioned message is judged again (retry-judge.ts).
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../../errors.js";
import type { JetStreamPublisher } from "../../nats/publisher.js";
import type { DestinationLedger } from "../destination-ledger.js";
import type { Entry } from "../entry.js";
import { wireSize } from "../entry.js";
import type { DestinationFacts, DestinationMarkers, PathState, Scheduler } from "./common.js";
import type { DeadLetters } from "./dead-letter.js";
import type { HeaderRules } from "./header-rules.js";
import type { Health } from "./health.js";
import type { PubAckStage } from "./pub-ack.js";
import type { RetryJudge } from "./retry-judge.js";
import type { KvApply, KvPublish } from "./kv-apply.js";
import type { StrictOrder } from "./strict-order.js";
import type { SentVersions } from "./versions.js";
import type { EntryWindow } from "./window.js";

export interface PublishNeeds {
  readonly link: LinkConfig;
  readonly owns: () => boolean;
  readonly logger: Logger;
  readonly window: Pick<EntryWindow, "entries" | "head" | "publishPos" | "indexOf">;
  readonly state: Pick<PathState, "destination" | "held" | "halted" | "halt">;
  readonly ledger: Pick<DestinationLedger, "storedAt" | "lastDestSeq">;
  readonly markers: Pick<DestinationMarkers, "findStored">;
  readonly health: Pick<Health, "publishBlockedUntil" | "publishFailed">;
  readonly deadLetters: Pick<DeadLetters, "oversized">;
  readonly pubAck: Pick<PubAckStage, "onPubAck" | "onStored">;
  /** A retry of a versioned message is judged again before it goes (retry-judge.ts). */
  readonly judge: Pick<RetryJudge, "applies" | "judge">;
  readonly sent: Pick<SentVersions, "sent">;
  /** The header policy's last word before a publish (`Nats-TTL` only to a stream that allows it). */
  readonly headerRules: Pick<HeaderRules, "beforePublish">;
  readonly scheduler: Scheduler;
  /** `to.order: strict`: every publish to the destination is a link of its chain (strict-order.ts). */
  readonly order?: Pick<StrictOrder, "ready" | "chain" | "answered" | "forget">;
  /** A KV link: every write is judged against the key's latest write in the bucket first (kv-apply.ts). */
  readonly kv?: Pick<KvApply, "decide" | "answered">;
}

/** Publishes between two checks of the lease within one pass (see `next`). */
const OWNS_EVERY = 64;

export class PublishStage {
  private publisher: JetStreamPublisher | undefined;
  /** A look into the destination before a late retry is running: nothing is published meanwhile. */
  private verifying = false;

  constructor(private readonly needs: PublishNeeds) {}

  /** The destination side: set when it connects, cleared when it goes away (what is publishing rolls back). */
  setPublisher(publisher: JetStreamPublisher | undefined): void {
    this.publisher = publisher;
    if (!publisher) this.rollback(this.needs.window.head, new RelayError(ErrorCodes.PUBLISH_FAILED, "destination disconnected"));
  }

  /** Publishes what is ready from the cursor on, in order, until an undecided entry or a block. */
  next(): void {
    const publisher = this.publisher;
    const { window, state, health, ledger, order, kv } = this.needs;
    const dest = state.destination;
    if (!publisher || !dest) return;
    if (window.publishPos < window.head) window.publishPos = window.head;
    // The clocks are read once a pass: its publishes leave together, in the flush after it. (A block
    // set during the pass is in the future of `wallNow`, so it still stops the pass.)
    const wallNow = Date.now();
    const startedAt = performance.now();
    // Every step re-checks the blocks: a callback run meanwhile may have rolled back or halted. The
    // lease is checked at the start and every OWNS_EVERY publishes: the write gate checks it again
    // when the bytes leave, and a lapse it finds drops them all (write-gate.ts).
    let steps = 0;
    // Strict order: nothing goes while the chain is being read again from the destination.
    while (window.publishPos < window.entries.length && !state.halted && !state.held && !this.verifying && wallNow >= health.publishBlockedUntil && (steps++ % OWNS_EVERY !== 0 || this.needs.owns()) && (!order || order.ready())) {
      const entry = window.entries[window.publishPos];
      if (!entry || entry.state === "claim") return; // order: never publish past an undecided entry
      if (entry.state !== "ready") {
        window.publishPos++;
        continue;
      }
      if (entry.haltWith) {
        state.halt(entry.haltWith);
        return;
      }
      this.needs.headerRules.beforePublish(entry, dest);
      if (entry.data.length > 0 && wireSize(entry) > dest.maxMessageBytes) {
        this.needs.deadLetters.oversized(entry, dest);
        continue; // now a dead-letter record (or the link halted): looked at again
      }
      if (entry.deadLetterReason === undefined) {
        const storedAt = ledger.storedAt(entry.seq);
        if (storedAt !== undefined) {
          // Found in the destination by the start scan: stored by an earlier process, not yet acked.
          window.publishPos++;
          this.needs.pubAck.onStored(entry, { stream: dest.stream, seq: storedAt, duplicate: true }, "found in the destination at start");
          continue;
        }
        if (entry.firstAttemptMs > 0 && wallNow - entry.firstAttemptMs >= lateRetryMs(dest)) {
          this.verifyLateRetries(window.publishPos, dest);
          return;
        }
        if (this.needs.judge.applies(entry)) {
          // A retry lands after what was stored meanwhile: a newer version of its entity makes it stale.
          const verdict = this.needs.judge.judge(entry, window.publishPos);
          if (verdict === "wait") return;
          if (verdict === "stale") continue; // finished: the cursor moves past it
        }
      }
      let kvPublish: KvPublish | undefined;
      if (kv && entry.deadLetterReason === undefined) {
        // Last writer wins: published only when newer than what the bucket holds for its key.
        const verdict = kv.decide(entry, window.publishPos);
        if (verdict === "wait") return;
        if (verdict === "finished") continue; // a conflict or a duplicate: the cursor moves past it
        kvPublish = verdict;
      }
      window.publishPos++;
      entry.state = "publishing";
      this.needs.sent.sent(entry);
      const attempt = ++entry.attempt;
      entry.publishStartedAt = startedAt;
      // Strict order: a link of the chain (a dead-letter record goes to a stream of its own, sole-writer.ts).
      const link = order && entry.deadLetterReason === undefined ? order.chain(entry.headers) : undefined;
      if (entry.firstAttemptMs === 0) {
        entry.firstAttemptMs = wallNow;
        // Strict order: this and every later attempt can only be stored above where the chain was read
        // (a tighter floor than the link's own highest sequence, 0 in a fresh process: a look reads less).
        entry.destFloor = Math.max(ledger.lastDestSeq, link?.base ?? 0);
      }
      if (kv && kvPublish) {
        const judged = kvPublish;
        publisher.publish(entry.subject, entry.data, judged.headers, (err, ack) => {
          if (!kv.answered(entry, attempt, judged, err, ack)) this.needs.pubAck.onPubAck(entry, attempt, err, ack);
        }, wallNow);
        continue;
      }
      if (order && link) {
        publisher.publish(entry.subject, entry.data, link.headers, (err, ack) => {
          order.answered(entry, link, err, ack);
          this.needs.pubAck.onPubAck(entry, attempt, err, ack);
        }, wallNow);
        continue;
      }
      publisher.publish(entry.subject, entry.data, entry.headers.asMsgHdrs(), (err, ack) => this.needs.pubAck.onPubAck(entry, attempt, err, ack), wallNow);
    }
  }

  /**
   * Before a late retry, look in the destination for the messages' `Relay-Source` markers above the
   * highest destination sequence known at their first attempt: what is there is not published again.
   */
  private verifyLateRetries(from: number, dest: DestinationFacts): void {
    const { window, ledger } = this.needs;
    const late: Entry[] = [];
    const cutoff = Date.now() - lateRetryMs(dest);
    for (let i = from; i < window.entries.length && late.length < this.needs.link.batchSize; i++) {
      const e = window.entries[i];
      if (!e || e.state === "claim") break;
      if (e.state !== "ready" || e.deadLetterReason !== undefined) continue;
      if (e.firstAttemptMs === 0 || e.firstAttemptMs > cutoff) break;
      late.push(e);
    }
    const floor = Math.min(...late.map((e) => e.destFloor));
    this.verifying = true;
    this.needs.markers
      .findStored(floor + 1, new Set(late.map((e) => e.seq)))
      .then((found) => {
        let published = 0;
        for (const e of late) {
          if (e.state !== "ready") continue;
          const destSeq = found.get(e.seq);
          if (destSeq !== undefined) {
            this.needs.pubAck.onStored(e, { stream: dest.stream, seq: destSeq, duplicate: true }, "found in the destination before a late retry");
          } else {
            e.firstAttemptMs = Date.now(); // not there: this retry is a fresh first attempt
            e.destFloor = ledger.lastDestSeq;
            published++;
          }
        }
        this.needs.logger.info({ checked: late.length, found: late.length - published, fromDestSeq: floor + 1 }, "late retry: looked for the messages in the destination first");
      })
      .catch((err: unknown) => {
        const head = late[0];
        const index = head ? window.indexOf(head) : -1;
        this.rollback(index >= 0 ? index : window.head, toRelayError(err, ErrorCodes.PUBLISH_FAILED), true);
      })
      .finally(() => {
        this.verifying = false;
        this.needs.scheduler.schedule();
      });
  }

  /** Everything from `index` on that has no PubAck is published again, in order, after a backoff. */
  rollback(index: number, err: RelayError, force = false): void {
    const { window } = this.needs;
    this.needs.order?.forget(`${err.code}: ${err.message}`); // strict order: resumed from the destination's truth
    let rolled = 0;
    const from = Math.max(window.head, index);
    for (let i = from; i < window.entries.length; i++) {
      const e = window.entries[i];
      if (e?.state === "publishing") {
        e.state = "ready";
        e.attempt++;
        rolled++;
      }
    }
    window.publishPos = Math.min(window.publishPos, from);
    if (rolled === 0 && index > window.head && !force) return;
    this.needs.health.publishFailed(err, rolled);
  }
}

/**
 * A retry this long after the first attempt may find broker dedup has forgotten the id (its window
 * counts from when the first copy was stored, which is no earlier than the first attempt): half the
 * window leaves room for the retry's own way to the server.
 */
function lateRetryMs(dest: DestinationFacts): number {
  return Math.max(1, Math.floor(dest.duplicateWindowMs / 2));
}
