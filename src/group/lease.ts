import { JetStreamApiCodes } from "@nats-io/jetstream";
import { KvWatchInclude } from "@nats-io/kv";
import type { KV, KvEntry, KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { isApiCode } from "../nats/durable-consumer.js";
import { bucketIncarnation, isBucketGone, openGroupBucket } from "./bucket.js";
import { compileLeaseOptions } from "./types.js";
import type { CompiledLeaseOptions, LeaseOptions, LeaseState, LeaseValue } from "./types.js";

export type { LeaseOptions, LeaseState, LeaseValue } from "./types.js";

interface Waiter {
  resolve(epoch: number): void;
  reject(err: unknown): void;
}

/**
 * One link's ownership lease (DESIGN §9): a key in a JetStream KV bucket, acquired and renewed by CAS on
 * its revision. Exactly one member is `owner` at a time; `valid()` fences it by its own monotonic clock.
 *
 * - Acquire: `create` when the key is absent, `update` on the revision of a delete tombstone, or `update`
 *   on a revision this member has seen unchanged for the lease duration *stored in it* (its writer's
 *   `leaseMs`; this member's own for values without one) by its own clock (never by the stored wall
 *   time). The acquiring revision is the epoch; renewals keep it.
 * - Owner deadline: the local time a successful write was *sent* + the leaseMs that write stored −
 *   renewMs/2. A contender can only take over that leaseMs after it *received* the last revision, which
 *   is after that send: the two intervals never overlap, whatever the wall clocks say, and whatever
 *   `group.lease` each member runs with.
 * - Incarnation: the bucket's creation time. A bucket deleted and created again restarts its revisions,
 *   so the epoch is only meaningful with it (the guard's fence compares it first). A member that sees the
 *   bucket re-created under it stops owning at once and takes no key in the new bucket until the longest
 *   lease it has seen has passed (an owner that has not noticed yet has stopped by then).
 *
 * Lifecycle: `start()`, `release()` (back to idle; `start()` again to rejoin), idempotent `stop()`,
 * `closed()`.
 */
export class LinkLease {
  private readonly opts: CompiledLeaseOptions;
  private readonly logger: Logger;
  private readonly now: () => number;
  private current: LeaseState = "idle";
  private kv: KV | undefined;
  /** Revision of our last successful write (0: none known); what a renewal or release CASes on. */
  private revision = 0;
  private heldEpoch: number | undefined;
  /** Monotonic ms; `valid()` is `owner && now() < deadline`. */
  private deadline = -Infinity;
  private nextRenewAt = 0;
  private deadlineTimer: NodeJS.Timeout | undefined;
  /** The revision a contender last saw, the local time it first saw it (its expiry clock), and the lease duration it stored. */
  private observed: { revision: number; at: number; leaseMs: number } | undefined;
  /** The incarnation (creation time) of the bucket as this member last read it; of the held lease. */
  private knownIncarnation: number | undefined;
  private heldIncarnation: number | undefined;
  /** Own clock when this member saw the bucket re-created: it takes no key until `holdOffMs()` later. */
  private recreatedAt: number | undefined;
  /** The longest lease duration this member has seen stored (its own at least). */
  private longestLeaseMs: number;
  /** `holder/leaseMs` of the last lease judged by a stored duration other than this member's (logged once). */
  private foreignLease: string | undefined;
  private run: { abort: AbortController; done: Promise<void> } | undefined;
  private watcher: { stop(): void } | undefined;
  private wakePending = false;
  private waker: (() => void) | undefined;
  private troubleStreak = 0;
  private otherHolder: string | undefined;
  private resumedOwn = false;
  private readonly waiters = new Set<Waiter>();
  private readonly lostCallbacks: ((reason: string) => void)[] = [];
  /** Placement prefers this member for the lease (default: yes; a group without placement has one member per link). */
  private eligible = true;
  /** Since when (own clock) the key has been free or expired while this member was not eligible. */
  private vacantSince: number | undefined;
  /** A renewal attempt failed since the last success: the next success is late. */
  private renewalMissed = false;
  private ownerSince: string | undefined;
  private releasing: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(options: LeaseOptions) {
    this.opts = compileLeaseOptions(options);
    this.now = this.opts.now;
    this.longestLeaseMs = this.opts.leaseMs;
    this.logger = options.logger.child({ bucket: this.opts.bucket, key: this.opts.key, owner: this.opts.owner });
  }

  get state(): LeaseState {
    return this.current;
  }

  /**
   * The last acquisition took back a key that still named this member: nobody else owned the lease since
   * this member lost it (every other write changes the owner), so what it held is still its own.
   */
  get resumed(): boolean {
    return this.resumedOwn;
  }

  /** This member's id (what the key names while it owns the lease). */
  get member(): string {
    return this.opts.owner;
  }

  /** The lease key in the group bucket. */
  get key(): string {
    return this.opts.key;
  }

  /** Another member the key named when this one last read it (undefined: none, or not read yet). */
  get holder(): string | undefined {
    return this.otherHolder;
  }

  /** Wall time this member last became owner (informational, for status); undefined when not owner. */
  get since(): string | undefined {
    return this.current === "owner" ? this.ownerSince : undefined;
  }

  /**
   * Whether group placement wants this member to own the lease. An ineligible contender still watches
   * the key (so its expiry clock runs) but takes it only when it stays free or expired for a further
   * leaseMs: a group whose members disagree for a while never leaves a link without an owner.
   */
  setEligible(eligible: boolean): void {
    if (eligible === this.eligible) return;
    this.eligible = eligible;
    this.vacantSince = undefined;
    if (eligible) this.wake();
  }

  get isEligible(): boolean {
    return this.eligible;
  }

  /** The KV revision at which this member acquired the lease; kept while `owner` and `lost`, else undefined. */
  get epoch(): number | undefined {
    return this.heldEpoch;
  }

  /**
   * The incarnation (creation time, ms) of the bucket the epoch is a revision of; set with `epoch`. The
   * guard's fence compares it before the epoch: a new bucket's revisions start again at 1.
   */
  get incarnation(): number | undefined {
    return this.heldEpoch === undefined ? undefined : this.heldIncarnation;
  }

  /**
   * True only while this member owns the lease and its own deadline has not passed. No I/O: call it
   * before every publish batch, commit and ack. A process resumed after a pause longer than the lease
   * sees false here before anything else runs.
   */
  valid(): boolean {
    return this.current === "owner" && this.now() < this.deadline;
  }

  /** Starts contending in the background. A no-op while running; throws INTERNAL after `stop()`. */
  start(): void {
    if (this.stopping) throw new RelayError(ErrorCodes.INTERNAL, `lease ${this.opts.key}: start() after stop()`);
    if (this.run) return;
    const abort = new AbortController();
    this.setState("contending");
    const done = this.loop(abort.signal).catch((err: unknown) => this.fail(err));
    this.run = { abort, done };
  }

  /**
   * Resolves with the epoch once this member is owner (at once if it is). Rejects with `signal.reason`
   * when `signal` aborts, and with an AbortError when the lease stops first.
   */
  acquired(signal?: AbortSignal): Promise<number> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    if (this.valid() && this.heldEpoch !== undefined) return Promise.resolve(this.heldEpoch);
    if (this.stopping) return Promise.reject(stoppedError());
    return new Promise<number>((resolve, reject) => {
      const onAbort = () => waiter.reject(signal?.reason);
      const settle = () => {
        this.waiters.delete(waiter);
        signal?.removeEventListener("abort", onAbort);
      };
      const waiter: Waiter = {
        resolve: (epoch) => (settle(), resolve(epoch)),
        reject: (err) => (settle(), reject(err as Error)),
      };
      this.waiters.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** `cb` runs once per involuntary loss (deadline passed, or the key was taken or deleted); not on release/stop. */
  onLost(cb: (reason: string) => void): void {
    this.lostCallbacks.push(cb);
  }

  /**
   * Gives the lease up: stops contending (state `idle` until `start()`), fences at once (`valid()` false),
   * then deletes the key by CAS on our revision so a successor acquires at once. Idempotent; never
   * rejects (a failed delete only means successors wait for expiry).
   */
  release(reason: "released" | "handed-over" = "released"): Promise<void> {
    this.releasing ??= this.doRelease(reason).finally(() => (this.releasing = undefined));
    return this.releasing;
  }

  /**
   * Stops the loop and, unless `release: false` (leave the key to expire, as a crash would), releases.
   * Rejects pending `acquired()` calls. Idempotent; `closed()` resolves after.
   */
  stop(opts: { release?: boolean } = {}): Promise<void> {
    this.stopping ??= this.doStop(opts.release ?? true);
    return this.stopping;
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  private async doStop(release: boolean): Promise<void> {
    if (release) await this.release();
    else {
      this.fence();
      await this.halt();
      this.forget();
    }
    this.setState("stopped");
    for (const w of [...this.waiters]) w.reject(stoppedError());
    this.resolveClosed();
  }

  private async doRelease(reason: "released" | "handed-over"): Promise<void> {
    this.fence();
    await this.halt(); // lets an in-flight write finish, so `revision` is the latest we wrote
    const revision = this.revision;
    if (this.current === "owner") this.opts.onTransition?.(reason);
    if (this.current !== "stopped") this.setState("idle", reason);
    this.forget();
    if (revision === 0 || !this.kv) return;
    try {
      await this.kv.delete(this.opts.key, { previousSeq: revision });
      this.logger.info({ revision }, "lease released");
    } catch (err) {
      // A conflict means someone wrote after us: there is nothing of ours left to release.
      const conflict = isCasConflict(err);
      this.logger[conflict ? "debug" : "warn"]({ revision, err: toRelayError(err).message }, "lease release did not delete the key");
    }
  }

  /** Ends the background loop and the watch, waiting for the loop to return. */
  private async halt(): Promise<void> {
    const run = this.run;
    this.watcher?.stop();
    this.watcher = undefined;
    if (!run) return;
    run.abort.abort();
    await run.done;
    this.run = undefined;
  }

  /** Makes `valid()` false until a new acquisition (synchronously: before any I/O of a release). */
  private fence(): void {
    this.deadline = -Infinity;
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
  }

  /** Forgets what we held, once the loop has ended. */
  private forget(): void {
    this.revision = 0;
    this.heldEpoch = undefined;
    this.heldIncarnation = undefined;
  }

  private async loop(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(Math.min(100, this.opts.pollMs), this.opts.pollMs);
    while (!signal.aborted) {
      try {
        const kv = await this.bucket();
        this.watch(kv, signal);
        if (this.current === "lost") {
          this.heldEpoch = undefined;
          this.setState("contending");
        }
        if (this.current === "owner") {
          await this.renewOnce(kv, signal);
        } else if (!(await this.contendOnce(kv, signal))) {
          await this.nap(this.contendWaitMs(), signal);
        }
        backoff.reset();
      } catch (err) {
        if (signal.aborted) break;
        // The bucket is gone (deleted, or an R1 bucket lost): the next step opens it again, creating it.
        if (isBucketGone(err)) this.dropBucket();
        this.trouble(err);
        // An owner retries on its renewal schedule (renewOnce moved nextRenewAt); others back off.
        if (this.current !== "owner") await this.nap(backoff.next(), signal);
      }
    }
  }

  /** One contender step: read the key, take it if absent, released, ours, or unchanged for leaseMs. */
  private async contendOnce(kv: KV, signal: AbortSignal): Promise<boolean> {
    const entry = await kv.get(this.opts.key);
    const seenAt = this.now(); // after the reply: the revision was written before this instant
    this.recovered();
    if (signal.aborted) return false;
    const named = entry?.operation === "PUT" ? readValue(entry)?.owner : undefined;
    this.otherHolder = named !== undefined && named !== this.opts.owner ? named : undefined;
    if (!entry || entry.operation !== "PUT") {
      if (!this.mayTake(seenAt)) return false;
      return this.tryAcquire(kv, entry?.revision ?? 0, this.why(entry ? "lease was released" : "lease key absent"), signal);
    }
    const value = readValue(entry);
    const holder = value?.owner ?? "?";
    if (this.observed?.revision !== entry.revision) {
      this.observed = { revision: entry.revision, at: seenAt, leaseMs: this.storedLeaseMs(value) };
      this.vacantSince = undefined;
      this.logger.debug({ revision: entry.revision, holder, leaseMs: this.observed.leaseMs }, "lease held by another member");
      if (holder !== this.opts.owner) this.judgedBy(holder, this.observed.leaseMs);
    }
    if (holder === this.opts.owner) {
      // Only this process writes its own id, and it is not owner now: the entry is an ownership it lost.
      if (!this.mayTake(seenAt)) return false;
      return this.tryAcquire(kv, entry.revision, this.why("lease still names this member"), signal, true);
    }
    const unchangedMs = seenAt - this.observed.at;
    if (unchangedMs < this.observed.leaseMs || !this.mayTake(seenAt)) return false;
    return this.tryAcquire(kv, entry.revision, this.why(`lease of ${holder} unchanged for ${Math.round(unchangedMs)}ms (its lease: ${this.observed.leaseMs}ms)`), signal);
  }

  /** Until the next contender step: the next poll, or the moment the observed lease would expire if sooner. */
  private contendWaitMs(): number {
    if (this.recreatedAt !== undefined) {
      const holdOffLeft = this.recreatedAt + this.holdOffMs() - this.now();
      return Math.max(1, Math.min(this.opts.pollMs, holdOffLeft + 1));
    }
    const seen = this.observed;
    if (!seen || !this.eligible) return this.opts.pollMs;
    const expiresIn = seen.at + seen.leaseMs - this.now();
    return Math.max(1, Math.min(this.opts.pollMs, expiresIn + 1));
  }

  /**
   * A free or expired lease: taken by an eligible member at once, by another after a further leaseMs;
   * by none while the bucket was just re-created (see `noteIncarnation`).
   */
  private mayTake(seenAt: number): boolean {
    if (this.recreatedAt !== undefined) {
      if (seenAt - this.recreatedAt < this.holdOffMs()) return false;
      this.recreatedAt = undefined;
    }
    if (this.eligible) return true;
    this.vacantSince ??= seenAt;
    return seenAt - this.vacantSince >= this.opts.leaseMs;
  }

  private why(reason: string): string {
    return this.eligible ? reason : `${reason}; no preferred member took it for ${this.opts.leaseMs}ms`;
  }

  private async tryAcquire(kv: KV, lastRevision: number, why: string, signal: AbortSignal, resumes = false): Promise<boolean> {
    // The revision is an epoch of the bucket's incarnation of the moment: read it before and after the
    // write. Equal, the write went to that bucket; a bucket re-created meanwhile is not acquired in.
    const incarnation = await this.readIncarnation(kv);
    if (this.noteIncarnation(incarnation) || signal.aborted) return false;
    const sentAt = this.now();
    let revision: number;
    try {
      revision =
        lastRevision === 0
          ? await kv.create(this.opts.key, this.encode())
          : await kv.update(this.opts.key, this.encode(), lastRevision, this.opts.requestTimeoutMs);
    } catch (err) {
      if (!isCasConflict(err)) throw err;
      this.logger.debug({ lastRevision }, "lost an acquisition race");
      await this.nap(Math.min(50, this.opts.pollMs), signal);
      return false;
    }
    this.revision = revision; // even when stopping: release() must delete what we just wrote
    this.observed = undefined;
    if (this.noteIncarnation(await this.readIncarnation(kv))) return false;
    if (signal.aborted) return false;
    this.heldEpoch = revision;
    this.heldIncarnation = incarnation;
    this.extend(sentAt);
    this.otherHolder = undefined;
    this.resumedOwn = resumes;
    this.vacantSince = undefined;
    this.renewalMissed = false;
    this.ownerSince = new Date().toISOString();
    this.opts.onTransition?.("acquired");
    this.setState("owner", why);
    for (const w of [...this.waiters]) w.resolve(revision);
    return true;
  }

  /** One owner step: wait for the renewal time, then CAS our revision forward. */
  private async renewOnce(kv: KV, signal: AbortSignal): Promise<void> {
    const wait = this.nextRenewAt - this.now();
    if (wait > 0) await this.nap(wait, signal);
    if (signal.aborted || this.current !== "owner") return;
    const sentAt = this.now();
    if (sentAt >= this.deadline) return this.lose("lease deadline passed before a renewal succeeded");
    const epoch = this.heldEpoch;
    // Until this one succeeds, retry soon (several attempts fit before the deadline).
    this.nextRenewAt = sentAt + Math.max(this.opts.renewMs / 4, 10);
    let revision: number;
    try {
      revision = await kv.update(this.opts.key, this.encode(epoch), this.revision, this.opts.requestTimeoutMs);
    } catch (err) {
      if (this.current !== "owner" || this.heldEpoch !== epoch) return; // lost meanwhile
      if (isCasConflict(err)) return this.afterConflict(kv, epoch);
      this.renewalMissed = true;
      throw err;
    }
    this.revision = revision; // ours even if the deadline passed meanwhile: a release must delete it
    this.recovered();
    if (signal.aborted || this.current !== "owner" || this.heldEpoch !== epoch) return;
    if (this.renewalMissed) {
      this.renewalMissed = false;
      this.opts.onTransition?.("renewed-late");
    }
    this.extend(sentAt);
  }

  /**
   * A renewal's CAS failed: either someone else wrote the key (lose at once), or an earlier renewal of
   * ours landed after it timed out (the key still names us with our epoch: carry on from there).
   */
  private async afterConflict(kv: KV, epoch: number | undefined): Promise<void> {
    let entry: KvEntry | null;
    try {
      entry = await kv.get(this.opts.key);
    } catch (err) {
      return this.lose(`renewal conflicted and the key is unreadable: ${toRelayError(err).message}`);
    }
    if (this.current !== "owner" || this.heldEpoch !== epoch) return;
    const value = entry?.operation === "PUT" ? readValue(entry) : undefined;
    if (entry && value?.owner === this.opts.owner && (value.epoch ?? entry.revision) === epoch) {
      this.logger.info({ revision: entry.revision }, "an earlier renewal landed after its request timed out; renewing from it");
      this.revision = entry.revision;
      this.nextRenewAt = this.now();
      return;
    }
    this.lose(!entry || entry.operation !== "PUT" ? "lease key was deleted" : `lease taken by ${value?.owner ?? "?"}`);
  }

  /**
   * A successful write sent at `sentAt` (local monotonic ms) keeps us valid until sentAt + leaseMs −
   * margin: the leaseMs every write of ours stores (`encode`), so never past what contenders judge by.
   */
  private extend(sentAt: number): void {
    this.deadline = sentAt + this.opts.leaseMs - this.opts.marginMs;
    this.nextRenewAt = sentAt + this.opts.renewMs;
    this.armDeadline();
  }

  /** Turns the state to `lost` promptly when the deadline passes, even while a renewal hangs. */
  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(
      () => {
        if (this.current !== "owner") return;
        if (this.now() >= this.deadline) this.lose("lease deadline passed without a successful renewal");
        else this.armDeadline();
      },
      Math.max(0, this.deadline - this.now()),
    );
    this.deadlineTimer.unref();
  }

  private lose(reason: string): void {
    if (this.current !== "owner") return;
    this.deadline = -Infinity;
    clearTimeout(this.deadlineTimer);
    this.opts.onTransition?.("lost");
    this.setState("lost", reason);
    for (const cb of this.lostCallbacks) {
      try {
        cb(reason);
      } catch (err) {
        this.logger.error({ err: toRelayError(err).message }, "onLost callback threw");
      }
    }
    this.wake();
  }

  /** The loop itself failed (a bug): give up ownership, reject waiters, stay idle. */
  private fail(err: unknown): void {
    const relayErr = toRelayError(err);
    this.logger.error({ code: relayErr.code, err: relayErr.message }, "lease loop failed");
    this.lose(`lease loop failed: ${relayErr.message}`);
    this.fence();
    this.forget();
    this.run = undefined;
    this.setState("idle", "loop failed");
    for (const w of [...this.waiters]) w.reject(relayErr);
  }

  private async bucket(): Promise<KV> {
    if (this.kv) return this.kv;
    const kv = await openGroupBucket({
      nc: this.opts.nc,
      domain: this.opts.domain,
      bucket: this.opts.bucket,
      timeoutMs: this.opts.requestTimeoutMs,
      replicas: this.opts.replicas,
    });
    this.noteIncarnation(await this.readIncarnation(kv));
    this.kv = kv;
    return kv;
  }

  /** Forgets the opened bucket (it is gone): the next step opens it again, and the watch starts over. */
  private dropBucket(): void {
    if (!this.kv) return;
    this.kv = undefined;
    this.watcher?.stop();
    this.watcher = undefined;
    this.logger.warn({ state: this.current }, "the group bucket is gone: opening it again (created when missing)");
  }

  private async readIncarnation(kv: KV): Promise<number> {
    try {
      return await bucketIncarnation(kv);
    } catch (err) {
      if (isBucketGone(err)) this.dropBucket();
      throw err;
    }
  }

  /**
   * The bucket's incarnation as just read. Another than the one this member knew: the bucket was
   * deleted and created again, so its revisions (epochs) start over. An owner stops at once; nobody
   * takes a key in it until the longest lease seen has passed (an owner of the old bucket that has not
   * noticed stops by its own deadline first). Returns whether it changed.
   */
  private noteIncarnation(incarnation: number): boolean {
    const known = this.knownIncarnation;
    this.knownIncarnation = incarnation;
    if (known === undefined || known === incarnation) return false;
    this.recreatedAt = this.now();
    this.observed = undefined;
    this.logger.warn(
      { was: new Date(known).toISOString(), now: new Date(incarnation).toISOString(), holdOffMs: this.holdOffMs() },
      "the group bucket was re-created: its revisions start over; no lease is taken in it for the longest lease seen",
    );
    this.lose("the group bucket was re-created");
    return true;
  }

  private holdOffMs(): number {
    return this.longestLeaseMs;
  }

  /** The lease duration a value stored (its writer's `group.lease`); this member's own when it has none. */
  private storedLeaseMs(value: LeaseValue | undefined): number {
    const ms = value?.leaseMs;
    const stored = typeof ms === "number" && Number.isFinite(ms) && ms > 0 ? ms : this.opts.leaseMs;
    this.longestLeaseMs = Math.max(this.longestLeaseMs, stored);
    return stored;
  }

  /** Logs (once per holder and duration) a lease judged by a stored duration other than this member's. */
  private judgedBy(holder: string, leaseMs: number): void {
    if (leaseMs === this.opts.leaseMs) return;
    const which = `${holder}/${leaseMs}`;
    if (this.foreignLease === which) return;
    this.foreignLease = which;
    this.logger.warn(
      { holder, storedLeaseMs: leaseMs, leaseMs: this.opts.leaseMs },
      `the lease of ${holder} is judged by the duration it stored (${leaseMs} ms), not this member's group.lease (${this.opts.leaseMs} ms): the group's members disagree on group.lease`,
    );
  }

  /**
   * Watches the key for deletes: a contender acquires a released lease at once instead of at its next
   * poll, and an owner whose key was deleted learns it at once. Best effort: polling stays the fallback.
   */
  private watch(kv: KV, signal: AbortSignal): void {
    if (this.watcher || signal.aborted || this.opts.nc.isClosed()) return;
    let iter: QueuedIterator<KvWatchEntry> | undefined;
    let stopped = false;
    const handle = {
      stop: () => {
        stopped = true;
        iter?.stop();
      },
    };
    this.watcher = handle;
    const run = async () => {
      iter = await kv.watch({ key: this.opts.key, include: KvWatchInclude.UpdatesOnly });
      if (stopped) return iter.stop();
      for await (const e of iter) {
        if (e.operation !== "PUT") this.wake();
        else this.sawRenewal(e);
      }
    };
    run()
      .catch((err: unknown) => this.logger.debug({ err: toRelayError(err).message }, "lease watch ended"))
      .finally(() => {
        if (this.watcher === handle) this.watcher = undefined; // the next loop step starts a new one
      });
  }

  /**
   * A write of the key seen through the watch, as it happens: a contender's expiry clock for that
   * revision starts now rather than at its next read, and it wakes when the lease would expire.
   * Receiving a write is after the owner sent it, so the owner's own deadline still comes first.
   */
  private sawRenewal(e: KvWatchEntry): void {
    if (this.current === "owner" || this.observed?.revision === e.revision) return;
    const named = readValue(e)?.owner;
    if (named === this.opts.owner) return; // our own write (an acquisition the loop is finishing)
    this.observed = { revision: e.revision, at: this.now(), leaseMs: this.storedLeaseMs(readValue(e)) };
    this.vacantSince = undefined;
    if (named !== undefined) this.otherHolder = named;
  }

  /** Sleeps `ms`; ends early on abort and on `wake()` (a wake while awake ends the next nap at once). */
  private async nap(ms: number, signal: AbortSignal): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return;
    }
    const ac = new AbortController();
    const onAbort = () => ac.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    this.waker = onAbort;
    try {
      await sleep(ms, ac.signal);
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.waker = undefined;
    }
  }

  private wake(): void {
    if (this.waker) this.waker();
    else this.wakePending = true;
  }

  private trouble(err: unknown): void {
    const relayErr = toRelayError(err, ErrorCodes.JETSTREAM_API);
    this.troubleStreak++;
    const level = this.troubleStreak === 1 ? "warn" : "debug";
    this.logger[level]({ code: relayErr.code, err: relayErr.message, state: this.current, attempts: this.troubleStreak }, "lease KV request failed");
  }

  private recovered(): void {
    if (this.troubleStreak === 0) return;
    this.logger.info({ attempts: this.troubleStreak }, "lease KV reachable again");
    this.troubleStreak = 0;
  }

  private setState(next: LeaseState, reason?: string): void {
    if (next === this.current) return;
    const from = this.current;
    this.current = next;
    const level = next === "lost" ? "warn" : "info";
    this.logger[level]({ from, to: next, epoch: this.heldEpoch, ...(reason ? { reason } : {}) }, `lease ${next}`);
  }

  /** The value of a write: every write stores this member's lease duration, which its deadline follows (`extend`). */
  private encode(epoch?: number): string {
    const value: LeaseValue = {
      owner: this.opts.owner,
      ...(epoch !== undefined ? { epoch } : {}),
      renewedAt: new Date().toISOString(),
      leaseMs: this.opts.leaseMs,
      renewMs: this.opts.renewMs,
    };
    return JSON.stringify(value);
  }
}

function readValue(entry: KvEntry): LeaseValue | undefined {
  try {
    const v = entry.json<Partial<LeaseValue>>();
    return typeof v?.owner === "string" ? (v as LeaseValue) : undefined;
  } catch {
    return undefined;
  }
}

function isCasConflict(err: unknown): boolean {
  return (
    isApiCode(err, JetStreamApiCodes.StreamWrongLastSequence) || isApiCode(err, JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

function stoppedError(): Error {
  return new DOMException("lease stopped", "AbortError");
}
