/**
 * A KV link's last-writer-wins step (docs/kv.md), just before the publish: a remote write is applied
 * only when its version is newer than what the destination bucket holds for its key, and the check
 * and the write are one step. The publish carries `Nats-Expected-Last-Subject-Sequence` for the key's
 * subject as read, so a local write that lands in between makes the server refuse it (err_code 10071)
 * and the write is decided again from a fresh read: a newer local write is never overwritten.
 *
 * - The key's latest message is read from the destination (a last-by-subject get), several keys at
 *   once ahead of the publish cursor; what this link stored itself (its PubAck) is remembered, so a
 *   hot key costs no read per write (a wrong guess is refused by the server and read again).
 * - Writes of one key are serialized: a write waits until the one before it is answered.
 * - An older write is a conflict: acked at the source as a `kv_conflict` correction, counted in
 *   `relay_kv_conflicts_total{outcome="remote_older"}`, logged with the key and both versions. A write
 *   whose version the bucket holds already (it came by another route) is a duplicate. Both are judged
 *   only on a fresh read, never on a remembered PubAck.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import type { RelayError } from "../../errors.js";
import { ErrorCodes } from "../../errors.js";
import type { Guard } from "../../guard/types.js";
import { Backoff } from "../../lifecycle/backoff.js";
import type { Delivery } from "../../nats/delivery.js";
import { withExpectedLastSubjectSeq } from "../../nats/expected-last-seq.js";
import type { PubAck } from "../../nats/publisher.js";
import type { MsgHdrs } from "@nats-io/nats-core";
import type { RelayMetrics } from "../../observability/metrics.js";
import { compareKvVersions, formatKvVersion, KV_VERSION_HEADER, kvVersionOf, kvVersionProblem } from "../../protocol/kv-version.js";
import type { KvVersion } from "../../protocol/kv-version.js";
import type { Entry } from "../entry.js";
import type { DestinationMarkers, LastOnSubject, Scheduler } from "./common.js";
import { claimedItem } from "./common.js";
import type { SourceAckStage } from "./source-ack.js";
import type { Tally } from "./tally.js";
import type { SentVersions } from "./versions.js";
import type { EntryWindow } from "./window.js";

/** The KV operation header the KV API writes on deletes and purges. */
export const KV_OPERATION_HEADER = "KV-Operation";
/** A purge's rollup: carried to the destination only with a purge that wins there. */
export const ROLLUP_HEADER = "Nats-Rollup";

/**
 * At intake, for a KV link: the write's version (its carried `Relay-KV-Version`, its writer's
 * `KV-Version`, else its store time in the source region), written into `Relay-KV-Version` on the
 * first hop; a purge gets its rollup back (the header policy strips `Nats-Rollup`: a purge is
 * published only where it wins). Returns why the version cannot be read (a bad message), or undefined.
 */
export function prepareKvWrite(entry: Entry, msg: Pick<Delivery, "headers" | "timestampNanos">, link: LinkConfig): string | undefined {
  const reader = { get: (name: string) => msg.headers?.get(name) ?? "" };
  const problem = kvVersionProblem(reader);
  if (problem !== undefined) return `KV version unreadable: ${problem}`;
  const version = kvVersionOf(reader, BigInt(msg.timestampNanos || "0"), link.from.region);
  entry.kvVersion = version;
  if (reader.get(KV_VERSION_HEADER) === "") entry.headers.set(KV_VERSION_HEADER, formatKvVersion(version));
  if (reader.get(KV_OPERATION_HEADER).trim().toUpperCase() === "PURGE") entry.headers.set(ROLLUP_HEADER, "sub");
  return undefined;
}

export interface KvApplyNeeds {
  readonly link: LinkConfig;
  readonly logger: Logger;
  readonly metrics: Pick<RelayMetrics, "kvConflicts">;
  readonly owns: () => boolean;
  readonly window: Pick<EntryWindow, "entries" | "publishPos" | "indexOf">;
  readonly markers: Required<Pick<DestinationMarkers, "lastOnSubject">>;
  readonly guard: Pick<Guard, "release">;
  readonly tally: Pick<Tally, "correct">;
  readonly sourceAck: Pick<SourceAckStage, "finish">;
  readonly sent: Pick<SentVersions, "answered">;
  readonly scheduler: Scheduler;
}

/** What the destination holds for a key: the latest message's sequence (0: none) and version. */
interface Known {
  readonly seq: number;
  readonly version: KvVersion | undefined;
  /** Read from the destination and not used for a verdict yet: only such a read may drop a write. */
  fresh: boolean;
}

/** A publish the step let go: its headers (with the expected last subject sequence) and its epoch. */
export interface KvPublish {
  readonly headers: MsgHdrs;
  readonly expected: number;
  readonly epoch: number;
}

export type KvVerdict = KvPublish | "wait" | "finished";

/** Keys read ahead of the publish cursor at once, and entries looked at for them. */
const MAX_READS = 64;
const LOOKAHEAD = 512;
/** Keys whose latest message is remembered; the oldest are forgotten past this. */
const MAX_KNOWN = 16_384;
/** Conflicts logged at info at most this often (the rest at debug, counted in the next line). */
const CONFLICT_LOG_EVERY_MS = 1_000;

export class KvApply {
  private readonly known = new Map<string, Known>();
  private readonly reading = new Set<string>();
  /** Publishes per key not answered yet: the next write of the key waits for them. */
  private readonly unanswered = new Map<string, number>();
  /** Bumped when everything is forgotten: answers to older reads and publishes change nothing. */
  private epoch = 0;
  private readonly backoff = new Backoff(100, 5_000);
  private retryAt = 0;
  private readonly prefix: string;
  private conflictLoggedAt = 0;
  private conflictsUnlogged = 0;

  constructor(private readonly needs: KvApplyNeeds) {
    this.prefix = `$KV.${needs.link.to.bucket ?? ""}.`;
  }

  /**
   * The verdict for the write at the publish cursor (`index`): publish it (with these headers),
   * `wait` (its key is being read, or an earlier write of it is unanswered; the pump runs again), or
   * `finished` (older than, or the same as, what the bucket holds: acked and counted here).
   */
  decide(entry: Entry, index: number): KvVerdict {
    const version = entry.kvVersion;
    if (version === undefined) return this.publish(entry, 0); // not a KV write (cannot happen: read at intake)
    const subject = entry.subject;
    if ((this.unanswered.get(subject) ?? 0) > 0 || this.reading.has(subject)) return "wait";
    const known = this.known.get(subject);
    if (known === undefined) {
      this.readAhead(index);
      return "wait";
    }
    const order = known.version === undefined ? 1 : compareKvVersions(version, known.version);
    if (order > 0) return this.publish(entry, known.seq);
    if (!known.fresh) {
      // Remembered from a PubAck: a write is dropped only on what the bucket holds now.
      this.known.delete(subject);
      this.readAhead(index);
      return "wait";
    }
    if (!this.needs.owns()) return "wait"; // finished (acked) once the lease is valid again
    known.fresh = false;
    this.drop(entry, version, known, order === 0);
    return "finished";
  }

  /**
   * The answer to a publish the step let go, before the PubAck stage sees it. True when it was a
   * refusal for the expected last subject sequence of the write's latest attempt: handled here (the
   * write is decided again from a fresh read), not a failure of the link.
   */
  answered(entry: Entry, attempt: number, publish: KvPublish, err: RelayError | null, ack: PubAck | null): boolean {
    const subject = entry.subject;
    if (publish.epoch !== this.epoch) return false;
    const left = (this.unanswered.get(subject) ?? 1) - 1;
    if (left > 0) this.unanswered.set(subject, left);
    else this.unanswered.delete(subject);
    this.needs.scheduler.schedule();
    if (ack) {
      if (ack.duplicate) this.known.delete(subject); // an earlier copy's sequence: not necessarily the latest
      else this.remember(subject, { seq: ack.seq, version: entry.kvVersion, fresh: false });
      return false;
    }
    this.known.delete(subject);
    if (err?.code !== ErrorCodes.ORDER_REJECTED || attempt !== entry.attempt || entry.state !== "publishing") return false;
    this.needs.metrics.kvConflicts.inc({ link: this.needs.link.name, outcome: "local_write_between" });
    this.needs.logger.info(
      { key: this.key(subject), id: entry.identity.id, seq: entry.seq, version: versionText(entry.kvVersion), expectedLastSubjectSeq: publish.expected },
      "kv: a write landed on the key between the relay's read and its publish (the destination refused the publish for its expected last subject sequence); deciding again from a fresh read",
    );
    this.needs.sent.answered(entry);
    entry.state = "ready";
    const { window } = this.needs;
    const at = window.indexOf(entry);
    if (at >= 0) window.publishPos = Math.min(window.publishPos, at);
    return true;
  }

  /** Forgets what it read and remembered (the destination changed, the pipeline was abandoned). */
  forget(): void {
    this.epoch++;
    this.known.clear();
    this.reading.clear();
    this.unanswered.clear();
  }

  private publish(entry: Entry, expected: number): KvPublish {
    this.unanswered.set(entry.subject, (this.unanswered.get(entry.subject) ?? 0) + 1);
    return { headers: withExpectedLastSubjectSeq(entry.headers, expected), expected, epoch: this.epoch };
  }

  /** Older than, or the same write as, what the bucket holds: finished without a publish. */
  private drop(entry: Entry, version: KvVersion, known: Known, same: boolean): void {
    const { needs } = this;
    if (entry.token !== undefined) needs.guard.release([claimedItem(entry)]).catch(() => undefined); // else it expires
    const detail = { key: this.key(entry.subject), id: entry.identity.id, seq: entry.seq, version: versionText(version), destinationVersion: versionText(known.version), destinationSeq: known.seq };
    if (same) {
      needs.tally.correct("broker_duplicate");
      needs.logger.debug(detail, "kv: the bucket holds this write already (it came by another route): not published again");
      needs.sourceAck.finish(entry, "duplicate");
      return;
    }
    needs.tally.correct("kv_conflict");
    needs.metrics.kvConflicts.inc({ link: needs.link.name, outcome: "remote_older" });
    this.logConflict(detail);
    needs.sourceAck.finish(entry, "stale");
  }

  /**
   * A conflict is logged at info at most once a second (with how many were not logged since): keys
   * written in two regions at once conflict all the time, by design. Every one is logged at debug.
   */
  private logConflict(detail: Record<string, unknown>): void {
    const { logger } = this.needs;
    const msg = "kv: conflict: the bucket holds a newer write of the key; the older remote write is not applied (last writer wins)";
    const now = Date.now();
    if (now - this.conflictLoggedAt >= CONFLICT_LOG_EVERY_MS) {
      logger.info({ ...detail, ...(this.conflictsUnlogged > 0 ? { conflictsNotLoggedSince: this.conflictsUnlogged } : {}) }, msg);
      this.conflictLoggedAt = now;
      this.conflictsUnlogged = 0;
    } else {
      this.conflictsUnlogged++;
      if (logger.isLevelEnabled("debug")) logger.debug(detail, msg);
    }
  }

  /** Reads the latest message of the keys of the writes from `from` on that need it, several at once. */
  private readAhead(from: number): void {
    const { window, scheduler } = this.needs;
    const now = Date.now();
    if (now < this.retryAt) return scheduler.scheduleAt(this.retryAt);
    const seen = new Set<string>();
    const end = Math.min(window.entries.length, from + LOOKAHEAD);
    for (let i = from; i < end && this.reading.size < MAX_READS; i++) {
      const e = window.entries[i];
      if (!e || e.state === "claim") break; // nothing is published past an undecided entry anyway
      if (e.state !== "ready" || e.kvVersion === undefined || e.deadLetterReason !== undefined || seen.has(e.subject)) continue;
      seen.add(e.subject);
      if (this.known.has(e.subject) || this.reading.has(e.subject) || this.unanswered.has(e.subject)) continue;
      this.read(e.subject);
    }
  }

  private read(subject: string): void {
    const { markers, scheduler, logger } = this.needs;
    const epoch = this.epoch;
    this.reading.add(subject);
    markers
      .lastOnSubject(subject)
      .then((last) => {
        if (epoch !== this.epoch) return;
        this.backoff.reset();
        this.remember(subject, last === undefined ? { seq: 0, version: undefined, fresh: true } : { seq: last.seq, version: this.versionOf(subject, last), fresh: true });
      })
      .catch((err: unknown) => {
        if (epoch !== this.epoch) return;
        this.retryAt = Date.now() + this.backoff.next();
        logger.warn({ key: this.key(subject), err: err instanceof Error ? err.message : String(err) }, "kv: cannot read the key's latest write in the destination; its writes wait");
      })
      .finally(() => {
        if (epoch === this.epoch) this.reading.delete(subject);
        scheduler.schedule();
      });
  }

  /** The version of what the destination holds: its carried or writer's version, else its store time here. */
  private versionOf(subject: string, last: LastOnSubject): KvVersion {
    const region = this.needs.link.to.region;
    const reader = { get: (name: string) => last.headers?.get(name) ?? "" };
    try {
      return kvVersionOf(reader, last.timeNs, region);
    } catch (err) {
      this.needs.logger.warn(
        { key: this.key(subject), destinationSeq: last.seq, reason: err instanceof Error ? err.message : String(err) },
        "kv: the destination's latest write of the key has an unreadable version; judged by its store time",
      );
      return { ns: last.timeNs, region };
    }
  }

  private remember(subject: string, known: Known): void {
    this.known.delete(subject); // re-inserted last: the oldest keys are forgotten first
    this.known.set(subject, known);
    if (this.known.size > MAX_KNOWN) {
      const oldest = this.known.keys().next();
      if (!oldest.done) this.known.delete(oldest.value);
    }
  }

  private key(subject: string): string {
    return subject.startsWith(this.prefix) ? subject.slice(this.prefix.length) : subject;
  }
}

function versionText(v: KvVersion | undefined): string {
  return v === undefined ? "none" : formatKvVersion(v);
}
