import type { KV, KvEntry, KvWatchEntry } from "@nats-io/kv";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { Backoff } from "../lifecycle/backoff.js";
import { bucketGoneAfter } from "./bucket.js";
import { LeaseBucket } from "./lease-bucket.js";
import { ContenderView } from "./lease-contender.js";
import { OwnerDeadline } from "./lease-deadline.js";
import { LeaseMode } from "./lease-mode.js";
import { afterRefusedRenewal, encodeLeaseValue, isCasConflict, readLeaseValue as readValue, writeLeaseMs } from "./lease-value.js";
import { KvTrouble } from "./lease-trouble.js";
import { AcquireWaiters, LostListeners, stoppedError } from "./lease-waiters.js";
import { Napper, watchLeaseKey } from "./lease-wakeup.js";
import { compileLeaseOptions } from "./types.js";
import type { CompiledLeaseOptions, LeaseOptions, LeaseState } from "./types.js";

export type { LeaseOptions, LeaseState, LeaseValue } from "./types.js";

/**
 * One link's ownership lease (DESIGN §9): a key in a JetStream KV bucket, acquired and renewed by CAS on
 * its revision. Exactly one member is `owner` at a time; `valid()` fences it by its own monotonic clock.
 *
 * - Acquire: `create` when the key is absent, `update` on the revision of a delete tombstone, or `update`
 *   on a revision this member has seen unchanged for the lease duration *stored in it* (its writer's
 *   `leaseMs`; this member's own for values without one) by its own clock (never by the stored wall
 *   time). The acquiring write's revision is the lease revision; renewals keep it.
 * - Owner deadline: the local time a successful write was *sent* + the leaseMs that write stored −
 *   renewMs/2. A contender can only take over that leaseMs after it *received* the last revision, which
 *   is after that send: the two intervals never overlap, whatever the wall clocks say, and whatever
 *   `group.lease` each member runs with.
 * - Member mode (lease-mode.ts): while this member's session is valid, a write stores it and the owner
 *   is valid only while that session is too; the session's writes (one per member) renew it, the key is
 *   rewritten only every half of the long lease it stores; a contender takes it once the session is over.
 * - Incarnation: the bucket's creation time. A bucket deleted and created again restarts its revisions,
 *   so the lease revision is only meaningful with it (the guard's fence compares it first). A member
 *   that sees the bucket re-created under it stops owning at once and takes no key in the new bucket
 *   until the longest lease it has seen has passed (an owner that has not noticed yet has stopped by
 *   then); nor, first seeing it younger than group.lease, until it is that old (lease-bucket.ts).
 *
 * Lifecycle: `start()`, `release()` (back to idle; `start()` again to rejoin), idempotent `stop()`,
 * `closed()`.
 *
 * This class is the state machine and its reads and writes of the key; its parts live beside it: the
 * contender's expiry judgement (lease-contender.ts), the owner's deadline and renewal schedule
 * (lease-deadline.ts), the stored value (lease-value.ts), the group bucket and its incarnation
 * (lease-bucket.ts), the loop's naps and the key watch (lease-wakeup.ts), the callers waiting for
 * ownership (lease-waiters.ts) and the KV failure streak (lease-trouble.ts).
 */
export class LinkLease {
  private readonly opts: CompiledLeaseOptions;
  private readonly logger: Logger;
  private readonly now: () => number;
  private current: LeaseState = "idle";
  private readonly bucket: LeaseBucket;
  /** Revision of our last successful write (0: none known); what a renewal or release CASes on. */
  private revision = 0;
  /** The lease revision held (the revision of the write that acquired the lease). */
  private heldRevision: number | undefined;
  /** `valid()` is `owner && now() < deadline`. */
  private readonly deadline: OwnerDeadline;
  /** What this member knows of the lease while it does not hold it. */
  private readonly contender: ContenderView;
  /** The incarnation (creation time) of the bucket of the held lease. */
  private heldIncarnation: number | undefined;
  private run: { abort: AbortController; done: Promise<void> } | undefined;
  private watcher: { stop(): void } | undefined;
  private readonly napper: Napper;
  private readonly trouble: KvTrouble;
  private otherHolder: string | undefined;
  private resumedOwn = false;
  private readonly waiters = new AcquireWaiters();
  private readonly lostCallbacks = new LostListeners();
  private readonly mode: LeaseMode;
  private readonly unsubscribe: () => void;
  /** A renewal attempt failed since the last success: the next success is late. */
  private renewalMissed = false;
  private ownerSince: string | undefined;
  private releasing: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(options: LeaseOptions) {
    this.opts = compileLeaseOptions(options);
    this.napper = new Napper(options.ticks);
    this.now = this.opts.now;
    this.logger = options.logger.child({ bucket: this.opts.bucket, key: this.opts.key, owner: this.opts.owner });
    this.deadline = new OwnerDeadline(
      this.opts,
      () => this.current === "owner",
      () => this.lose("lease deadline passed without a successful renewal"),
    );
    this.contender = new ContenderView(this.opts, this.logger);
    this.trouble = new KvTrouble(this.logger);
    this.bucket = new LeaseBucket(this.opts, this.logger, {
      state: () => this.current,
      dropped: () => {
        this.watcher?.stop();
        this.watcher = undefined;
        this.opts.keyWatches?.restart();
      },
      recreated: (known, incarnation) => this.bucketRecreated(known, incarnation),
      young: (ageMs) => this.contender.youngBucket(this.now(), ageMs),
    });
    this.mode = new LeaseMode(this.opts.sessions);
    // The session ended or lapsed: an owner in member mode stops at its next step (now).
    this.unsubscribe = this.mode.onChange(() => this.mode.member && this.napper.wake());
  }

  get state(): LeaseState {
    return this.current;
  }

  /** The last acquisition took back a key still naming this member: nobody else owned it since (what it held is still its own). */
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
    if (this.contender.setEligible(eligible) && eligible) this.napper.wake();
  }

  get isEligible(): boolean {
    return this.contender.eligible;
  }

  /** How the lease is renewed while owned: `member` (by this member's session, lease-mode.ts) or `key`. */
  get renewal(): "member" | "key" {
    return this.mode.member ? "member" : "key";
  }

  /** The KV revision of the write that acquired the lease (renewals keep it; once called the epoch); kept while `owner` and `lost`. */
  get leaseRevision(): number | undefined {
    return this.heldRevision;
  }

  /** The creation time (ms) of the bucket `leaseRevision` is of: the guard's fence compares it first (a new bucket starts at 1). */
  get incarnation(): number | undefined {
    return this.heldRevision === undefined ? undefined : this.heldIncarnation;
  }

  /** Owner, its deadline ahead and (member mode) its session holding. No I/O: call it before every publish, commit and ack. */
  valid(): boolean {
    return this.current === "owner" && this.deadline.ahead() && this.mode.holds();
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
   * Resolves with the lease revision once this member is owner (at once if it is). Rejects with
   * `signal.reason` when `signal` aborts, and with an AbortError when the lease stops first.
   */
  acquired(signal?: AbortSignal): Promise<number> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    if (this.valid() && this.heldRevision !== undefined) return Promise.resolve(this.heldRevision);
    if (this.stopping) return Promise.reject(stoppedError());
    return this.waiters.wait(signal);
  }

  /** `cb` runs once per involuntary loss (deadline passed, or the key was taken or deleted); not on release/stop. */
  onLost(cb: (reason: string) => void): void {
    this.lostCallbacks.add(cb);
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

  /** Stops the loop and releases (unless `release: false`: left to expire, as a crash would); rejects `acquired()` calls. Idempotent. */
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
    this.unsubscribe();
    this.waiters.rejectAll(stoppedError());
    this.resolveClosed();
  }

  private async doRelease(reason: "released" | "handed-over"): Promise<void> {
    this.fence();
    await this.halt(); // lets an in-flight write finish, so `revision` is the latest we wrote
    const revision = this.revision;
    if (this.current === "owner") this.opts.onTransition?.(reason);
    if (this.current !== "stopped") this.setState("idle", reason);
    this.forget();
    const kv = this.bucket.opened;
    if (revision === 0 || !kv) return;
    try {
      await kv.delete(this.opts.key, { previousSeq: revision });
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
    this.deadline.clear();
  }

  /** Forgets what we held, once the loop has ended. */
  private forget(): void {
    this.revision = 0;
    this.heldRevision = undefined;
    this.heldIncarnation = undefined;
  }

  private async loop(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(Math.min(100, this.opts.pollMs), this.opts.pollMs);
    while (!signal.aborted) {
      try {
        const kv = await this.bucket.open();
        this.watch(kv, signal);
        if (this.current === "lost") {
          this.heldRevision = undefined;
          this.setState("contending");
        }
        if (this.current === "owner") {
          await this.renewOnce(kv, signal);
        } else if (!(await this.contendOnce(kv, signal))) {
          await this.napper.nap(this.contender.waitMs(), signal);
        }
        backoff.reset();
      } catch (err) {
        if (signal.aborted) break;
        // The bucket is gone (deleted, or an R1 bucket lost): the next step opens it again, creating it.
        // An election of its stream ("no responders", a timeout) is not: retried within the deadline.
        if (await bucketGoneAfter(this.bucket.opened, err)) this.bucket.drop();
        this.trouble.failed(err, this.current);
        // An owner retries on its renewal schedule (renewOnce moved nextRenewAt); others back off.
        if (this.current !== "owner") await this.napper.nap(backoff.next(), signal);
      }
    }
  }

  /** One contender step: read the key, take it if absent, released, ours, or unchanged for leaseMs. */
  private async contendOnce(kv: KV, signal: AbortSignal): Promise<boolean> {
    const entry = await kv.get(this.opts.key);
    const seenAt = this.now(); // after the reply: the revision was written before this instant
    this.trouble.recovered();
    if (signal.aborted) return false;
    const named = entry?.operation === "PUT" ? readValue(entry)?.owner : undefined;
    this.otherHolder = named !== undefined && named !== this.opts.owner ? named : undefined;
    const c = this.contender;
    if (!entry || entry.operation !== "PUT") {
      if (!c.mayTake(seenAt)) return false;
      return this.tryAcquire(kv, entry?.revision ?? 0, c.why(entry ? "lease was released" : "lease key absent"), signal);
    }
    const value = readValue(entry);
    const holder = value?.owner ?? "?";
    let seen = c.observed;
    if (seen?.revision !== entry.revision) {
      seen = c.observe(entry.revision, seenAt, value);
      this.logger.debug({ revision: entry.revision, holder, leaseMs: seen.leaseMs }, "lease held by another member");
      if (holder !== this.opts.owner && value?.session === undefined) c.judgedBy(holder, seen.leaseMs);
    }
    if (holder === this.opts.owner) {
      // Only this process writes its own id, and it is not owner now: the entry is an ownership it lost.
      if (!c.mayTake(seenAt)) return false;
      return this.tryAcquire(kv, entry.revision, c.why("lease still names this member"), signal, true);
    }
    // Member mode: taken once the holder's session is over (session-judge.ts), or as below.
    if (await this.mode.holderGone(holder, value)) {
      if (signal.aborted || !c.mayTake(this.now())) return false;
      return this.tryAcquire(kv, entry.revision, c.why(`the session of ${holder} is over`), signal);
    }
    const unchangedMs = seenAt - seen.at;
    if (unchangedMs < seen.leaseMs || !c.mayTake(seenAt)) return false;
    return this.tryAcquire(kv, entry.revision, c.why(`lease of ${holder} unchanged for ${Math.round(unchangedMs)}ms (its lease: ${seen.leaseMs}ms)`), signal);
  }

  private async tryAcquire(kv: KV, lastRevision: number, why: string, signal: AbortSignal, resumes = false): Promise<boolean> {
    // The revision becomes a lease revision of the bucket's incarnation of the moment: read that before
    // and after the write. Equal, the write went to that bucket; a bucket re-created meanwhile is not
    // acquired in.
    const incarnation = await this.bucket.readIncarnation(kv);
    if (this.bucket.noteIncarnation(incarnation) || signal.aborted) return false;
    const sentAt = this.now();
    // Member mode while this member's session is valid: the session renews the lease from now on.
    const session = this.mode.next();
    const value = encodeLeaseValue(this.opts, undefined, session);
    let revision: number;
    try {
      revision =
        lastRevision === 0
          ? await kv.create(this.opts.key, value)
          : await kv.update(this.opts.key, value, lastRevision, this.opts.requestTimeoutMs);
    } catch (err) {
      if (!isCasConflict(err)) throw err;
      this.logger.debug({ lastRevision }, "lost an acquisition race");
      await this.napper.nap(Math.min(50, this.opts.pollMs), signal);
      return false;
    }
    this.revision = revision; // even when stopping: release() must delete what we just wrote
    this.contender.observed = undefined;
    if (this.bucket.noteIncarnation(await this.bucket.readIncarnation(kv))) return false;
    if (signal.aborted) return false;
    this.heldRevision = revision;
    this.heldIncarnation = incarnation;
    this.mode.wrote(session);
    this.deadline.extend(sentAt, writeLeaseMs(this.opts, session));
    this.otherHolder = undefined;
    this.resumedOwn = resumes;
    this.contender.vacantSince = undefined;
    this.renewalMissed = false;
    this.ownerSince = new Date().toISOString();
    this.opts.onTransition?.("acquired");
    this.setState("owner", why);
    this.waiters.resolveAll(revision);
    return true;
  }

  /** One owner step: wait for the renewal time, then CAS our revision forward. */
  private async renewOnce(kv: KV, signal: AbortSignal): Promise<void> {
    const wait = this.deadline.renewalDueIn();
    // On the relay's shared grid (a quarter of a renewal): the links' renewals leave in one write.
    if (wait > 0) await this.napper.nap(wait, signal, this.opts.renewMs / 4);
    if (signal.aborted || this.current !== "owner") return;
    if (!this.mode.holds()) return this.lose("this member's session ended or lapsed (its member key was not renewed in time, or another member evicted it)");
    if (this.deadline.renewalDueIn() > 0) return; // woken early, nothing due
    const sentAt = this.now();
    if (sentAt >= this.deadline.at) return this.lose("lease deadline passed before a renewal succeeded");
    const leaseRevision = this.heldRevision;
    // Until this one succeeds, retry soon (several attempts fit before the deadline).
    this.deadline.retrySoon(sentAt);
    const session = this.mode.next();
    let revision: number;
    try {
      revision = await kv.update(this.opts.key, encodeLeaseValue(this.opts, leaseRevision, session), this.revision, this.opts.requestTimeoutMs);
    } catch (err) {
      if (this.current !== "owner" || this.heldRevision !== leaseRevision) return; // lost meanwhile
      if (isCasConflict(err)) return this.afterConflict(kv, leaseRevision);
      this.renewalMissed = true;
      throw err;
    }
    this.revision = revision; // ours even if the deadline passed meanwhile: a release must delete it
    this.trouble.recovered();
    if (signal.aborted || this.current !== "owner" || this.heldRevision !== leaseRevision) return;
    if (this.renewalMissed) {
      this.renewalMissed = false;
      this.opts.onTransition?.("renewed-late");
    }
    this.mode.wrote(session);
    this.deadline.extend(sentAt, writeLeaseMs(this.opts, session));
  }

  /**
   * A renewal's CAS failed: either someone else wrote the key (lose at once), or an earlier renewal of
   * ours landed after it timed out (the key still names us with our lease revision: carry on from
   * there).
   */
  private async afterConflict(kv: KV, leaseRevision: number | undefined): Promise<void> {
    let entry: KvEntry | null;
    try {
      entry = await kv.get(this.opts.key);
    } catch (err) {
      return this.lose(`renewal conflicted and the key is unreadable: ${toRelayError(err).message}`);
    }
    if (this.current !== "owner" || this.heldRevision !== leaseRevision) return;
    const landed = afterRefusedRenewal(entry, this.opts.owner, leaseRevision);
    if (typeof landed === "string") return this.lose(landed);
    this.logger.info({ revision: landed.revision }, "an earlier renewal landed after its request timed out; renewing from it");
    this.revision = landed.revision;
    this.mode.wrote(landed.session);
    this.deadline.renewNow();
  }

  private lose(reason: string): void {
    if (this.current !== "owner") return;
    this.deadline.clear();
    this.opts.onTransition?.("lost");
    this.setState("lost", reason);
    this.lostCallbacks.fire(reason, (err) => this.logger.error({ err: toRelayError(err).message }, "onLost callback threw"));
    this.napper.wake();
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
    this.waiters.rejectAll(relayErr);
  }

  /** The bucket was deleted and created again (its revisions start over): an owner stops at once (see ContenderView.recreated). */
  private bucketRecreated(known: number, incarnation: number): void {
    this.contender.recreated(this.now(), known, incarnation);
    this.lose("the group bucket was re-created");
  }

  /** Watches the key: a contender takes a released lease at once, an owner learns of a delete at once (best effort; polls stay). */
  private watch(kv: KV, signal: AbortSignal): void {
    if (this.watcher || signal.aborted || this.opts.nc.isClosed()) return;
    const handle = watchLeaseKey(kv, this.opts.key, this.logger, {
      onRemoved: () => this.checkNow(),
      onPut: (e) => this.sawRenewal(e),
      onEnd: () => {
        if (this.watcher === handle) this.watcher = undefined; // the next loop step starts a new one
      },
    }, this.opts.keyWatches);
    this.watcher = handle;
  }

  /**
   * A write of the key seen through the watch: a contender's expiry clock for that revision starts now
   * (receiving it is after its owner sent it, so the owner's own deadline still comes first).
   */
  private sawRenewal(e: KvWatchEntry): void {
    const named = readValue(e)?.owner;
    // Another member wrote the key an owner holds: its next renewal (a CAS) goes now and finds out.
    if (this.current === "owner" && named !== this.opts.owner) return this.checkNow();
    if (this.current === "owner" || this.contender.observed?.revision === e.revision) return;
    if (named === this.opts.owner) return; // our own write (an acquisition the loop is finishing)
    this.contender.observe(e.revision, this.now(), readValue(e));
    if (named !== undefined) this.otherHolder = named;
  }

  /** The key was deleted or written by another: an owner renews now (its CAS tells), a contender reads now. */
  private checkNow(): void {
    if (this.current === "owner") this.deadline.renewNow();
    this.napper.wake();
  }

  private setState(next: LeaseState, reason?: string): void {
    if (next === this.current) return;
    const from = this.current;
    this.current = next;
    const level = next === "lost" ? "warn" : "info";
    this.logger[level]({ from, to: next, leaseRevision: this.heldRevision, ...(reason ? { reason } : {}) }, `lease ${next}`);
  }
}
