import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { markerKey } from "../guard/marker.js";
import { GUARD_UNSAFE_REASONS } from "../guard/types.js";
import type { Guard, GuardMarkerEntry, GuardSafety } from "../guard/types.js";
import type { LinkLease } from "../group/lease.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { isApiCode } from "../nats/durable-consumer.js";
import type { RelayMetrics } from "../observability/metrics.js";

/** How often the guard's settings are checked again while the link runs (and after every reconnect). */
const GUARD_SAFETY_CHECK_MS = 60_000;

/** The link's troubles this watch raises and clears. */
export type GuardTrouble = "guard" | "guard-state" | "guard-unsafe";

export interface GuardWatchDeps {
  readonly guard: Guard;
  readonly config: LinkConfig;
  readonly lease: LinkLease;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  /** The source's JetStream manager, once the link has one (the consumer's ack floor is the link's history). */
  jsm(): JetStreamManager | undefined;
  /** This relay works the link now (it owns the lease and is not standing by): polls read the marker then. */
  working(): boolean;
  /** The highest source seq the pipeline saw stored in the destination, acked or not. */
  highestStoredSourceSeq(): number;
  readonly events: {
    trouble(kind: GuardTrouble, err: RelayError): void;
    clear(kind: GuardTrouble): void;
    /** An error of the link's own (its last error, `relay_errors_total`) that is no trouble by itself. */
    error(err: RelayError): void;
    fail(err: RelayError): void;
    /** Nothing moved while the guard was not ok: the pipeline looks for work again. */
    resume(): void;
    /** Stop pulling: the consume loop waits for the guard (or runs a resync) before it pulls again. */
    stopPulling(): void;
    /** A resync is pending or running. */
    resyncUnderWay(): boolean;
    requestResync(): void;
  };
}

/**
 * The link's view of its guard: whether the guard's memory can be trusted, so that anything may be
 * published, committed or acked (`ok`). Two things are watched:
 *
 * - Loss detection, for a guard with a scope marker (the Redis guard): `unverified` until the link's
 *   marker entry has been read (at start and after every reconnect of the guard), `lost` when it is gone
 *   although the link has history (GUARD_STATE_LOST: paused until an operator resumes or resyncs).
 * - Settings: `relay_guard_unsafe{reason}` from the guard's checks at start and every minute; under
 *   `guard.strict` an unsafe finding pauses the link until it is fixed.
 * - The lease fence: a guard that keeps refusing the lease this relay holds (LEASE_FENCED while the
 *   lease is valid) leaves the link unable to commit: it is paused (not ready) with `relay_guard_fenced`
 *   1 until a call passes the fence.
 *
 * Lifecycle: `start()` once (it keeps trying in the background while the guard is unreachable; `ready`
 * resolves when it started), `poll()` on the link's poll, `stop` by the link's abort signal.
 */
export class GuardWatch {
  /** Resolves when the guard store is reachable (at once, unless it was down at start). */
  ready: Promise<void> = Promise.resolve();
  private state: "ok" | "unverified" | "lost" = "ok";
  private check: Promise<void> | undefined;
  private lostReason: string | undefined;
  /** A resync an operator asked for after a loss ran: the marker says `resynced` once written. */
  private resyncedAfterLoss = false;
  /** Under `guard.strict`: the last settings check found the guard unsafe (nothing moves). */
  private unsafe = false;
  private lastSafetyCheck = 0;
  private safetyCheck: Promise<void> | undefined;
  /** The link is paused because the guard refuses the lease it holds (see `watchFence`). */
  private fencedTrouble = false;

  constructor(private readonly deps: GuardWatchDeps) {
    if (deps.guard.readMarker) this.state = "unverified";
    if (deps.guard.kind !== "none") deps.metrics.guardFenced.set({ link: deps.config.name }, 0);
    deps.guard.onRestored?.(() => this.restored());
  }

  /** Messages may move: the guard's memory is there (or its loss accepted) and, under strict, its settings safe. */
  get ok(): boolean {
    return this.state === "ok" && !this.unsafe;
  }

  /** The guard's memory is known to be there (or its loss accepted). */
  get verified(): boolean {
    return this.state === "ok";
  }

  get lost(): boolean {
    return this.state === "lost";
  }

  /** Why the link is paused when the guard lost its state (the operator's instructions). */
  get lossReason(): string | undefined {
    return this.lostReason;
  }

  /** Starts the guard; when it is unreachable, keeps trying in the background (`ready`) with the link paused. */
  async start(): Promise<void> {
    const { guard, signal, events } = this.deps;
    const backoff = new Backoff(250, 5_000);
    const first = await guard.start().then(
      () => undefined,
      (err: unknown) => toRelayError(err, ErrorCodes.GUARD_UNAVAILABLE),
    );
    if (!first) return this.started();
    if (!first.isRetryable()) throw first;
    events.trouble("guard", first);
    events.error(first);
    // Keep trying in the background: the link stays paused, nothing is consumed meanwhile.
    this.ready = (async () => {
      for (;;) {
        await sleep(backoff.next(), signal);
        if (signal.aborted) return;
        try {
          await guard.start();
          events.clear("guard");
          return this.started();
        } catch (err) {
          const relayErr = toRelayError(err, ErrorCodes.GUARD_UNAVAILABLE);
          if (!relayErr.isRetryable()) return events.fail(relayErr);
          events.error(relayErr);
        }
      }
    })();
  }

  /** On every poll: the marker (cheap: one HGET) while this relay works the link, and the settings every minute. */
  poll(): void {
    if (this.deps.signal.aborted) return;
    this.watchFence();
    const guard = this.deps.guard;
    if (guard.readMarker && this.deps.jsm() && this.deps.working()) void this.verify("poll");
    if (guard.checkSafety && !this.safetyCheck && Date.now() - this.lastSafetyCheck >= GUARD_SAFETY_CHECK_MS) {
      const check = guard.checkSafety;
      this.lastSafetyCheck = Date.now();
      this.safetyCheck = check
        .call(guard)
        .then(
          (safety) => this.exportSafety(safety),
          (err: unknown) => this.deps.logger.debug({ err: toRelayError(err).message }, "guard settings check failed"),
        )
        .finally(() => (this.safetyCheck = undefined));
    }
  }

  /**
   * A link that holds a valid lease and whose claims and commits the guard refuses under that very
   * lease (LEASE_FENCED, at least twice in a row) cannot commit anything, and nothing tells it to stop
   * trying: a fence from a lease it does not know (another relay of the group working the link under a
   * newer lease, or one left behind by a bucket whose clock ran ahead). It is paused, and not ready,
   * with `relay_guard_fenced` 1, until a call passes the fence or the lease changes. An ex-owner's
   * refusals never count here: its lease is no longer valid.
   */
  private watchFence(): void {
    const { guard, lease, metrics, config, logger, events } = this.deps;
    const fence = guard.fenced;
    const stuck =
      fence !== undefined && fence.refusals >= 2 && lease.valid() && fence.leaseRevision === lease.leaseRevision && fence.incarnation === lease.incarnation;
    if (stuck === this.fencedTrouble) return;
    this.fencedTrouble = stuck;
    metrics.guardFenced.set({ link: config.name }, stuck ? 1 : 0);
    if (fence !== undefined && stuck) {
      const message =
        `fenced (LEASE_FENCED) although this relay holds the link's lease: it commits and acks nothing while the guard ` +
        `refuses it (${fence.refusals} refusals since ${new Date(fence.since).toISOString()}; ${fence.error.message})`;
      logger.error({ code: ErrorCodes.LEASE_FENCED, leaseRevision: fence.leaseRevision, incarnation: fence.incarnation, refusals: fence.refusals }, message);
      events.trouble("guard", new RelayError(ErrorCodes.LEASE_FENCED, message));
    } else {
      logger.info({ leaseRevision: lease.leaseRevision }, "the guard no longer refuses this relay's lease");
      events.clear("guard");
      events.resume();
    }
  }

  /** Reads the marker (one check at a time; callers share the one in flight). */
  verify(why: "start" | "poll" | "reconnect"): Promise<void> {
    this.check ??= this.runCheck(why).finally(() => (this.check = undefined));
    return this.check;
  }

  /** The link finished the full resync an operator asked for after a loss: the marker says so. */
  async resynced(): Promise<void> {
    this.resyncedAfterLoss = true;
    await this.markResynced();
  }

  /** The guard started (or started again): its settings findings become `relay_guard_unsafe`. */
  private started(): void {
    this.lastSafetyCheck = Date.now();
    this.exportSafety(this.deps.guard.safety);
  }

  private exportSafety(safety: GuardSafety | undefined): void {
    if (!safety) return;
    const { metrics, config, events } = this.deps;
    // Every reason's series, 0 when fine, so an alert has a series to compare with.
    for (const reason of GUARD_UNSAFE_REASONS) {
      metrics.guardUnsafe.set({ link: config.name, reason }, safety.unsafe.includes(reason) ? 1 : 0);
    }
    if (!config.guard?.strict) return;
    // Under strict a setting found unsafe while running pauses the link, as it would refuse to start.
    const unsafe = safety.findings.find((f) => f.level === "unsafe");
    if (unsafe) {
      this.unsafe = true;
      const code = unsafe.reason === "replication" ? ErrorCodes.GUARD_UNAVAILABLE : ErrorCodes.GUARD_NOT_DURABLE;
      events.trouble("guard-unsafe", new RelayError(code, `guard Redis unsafe: ${unsafe.detail} (guard.strict is set: the link pauses until it is not)`));
    } else if (this.unsafe) {
      this.unsafe = false;
      events.clear("guard-unsafe");
      events.resume();
    }
  }

  /**
   * The guard's connection is back after an outage: the Redis it reached may have restarted empty or
   * be a replica promoted without the data. Held (synchronously, before any reply on the new connection
   * is read) until the marker has been read again; the settings are checked again too.
   */
  private restored(): void {
    if (this.deps.signal.aborted) return;
    if (this.state === "ok") this.state = "unverified";
    this.lastSafetyCheck = 0;
    if (this.deps.jsm()) void this.verify("reconnect");
  }

  private async runCheck(why: "start" | "poll" | "reconnect"): Promise<void> {
    const { guard, logger, lease } = this.deps;
    if (!guard.readMarker || !guard.writeMarker) return;
    try {
      const entry = await guard.readMarker();
      if (entry) return this.markerFound(entry);
      // Gone: nothing moves until it is known whether this link has a history to lose.
      if (this.state === "ok") this.state = "unverified";
      const ackFloor = await this.consumerAckFloor();
      if (ackFloor === undefined) return; // could not tell: the next check asks again (held meanwhile)
      // History: what the consumer acked, or what this process saw stored and has not acked yet (the
      // marker went while a batch waited for its commit: held now, its ack would never come).
      const history = Math.max(ackFloor, this.deps.highestStoredSourceSeq());
      if (history > 0) return this.markLost(history, why);
      const written = await guard.writeMarker("joined", { ifAbsent: true });
      // Not written: an entry appeared meanwhile (an operator's); the next check reads it.
      if (!written) return;
      logger.info({ key: markerKey(this.scope), fence: lease.key }, "guard scope marker written: the link has no history yet, so its guard had nothing to lose");
      this.markOk();
    } catch (err) {
      // Redis unreachable: claims fail too and the pipeline pauses the link; the state stays (held when unverified).
      logger.debug({ err: toRelayError(err).message, why }, "guard marker check failed");
    }
  }

  private markerFound(entry: GuardMarkerEntry): void {
    const { logger, events, config } = this.deps;
    if (entry.mark === "resync") {
      // The operator chose a full resync: relayed once this link has done it, then marked `resynced`.
      if (this.resyncedAfterLoss) void this.markResynced();
      else if (!events.resyncUnderWay()) {
        logger.warn({ requestedAt: entry.at }, "guard state loss: a full resync was requested; resyncing the link");
        events.requestResync();
      }
      return this.markOk();
    }
    if (this.state === "lost") {
      const idTtlMs = config.guard?.idTtlMs ?? 0;
      const until = new Date(Date.parse(entry.at) + idTtlMs);
      logger.warn(
        { mark: entry.mark, at: entry.at, idTtlMs, until: Number.isNaN(until.getTime()) ? undefined : until.toISOString() },
        "guard state loss accepted by an operator: relaying again. Until idTtl has passed since then, redeliveries of messages relayed before the loss are caught only by the destination's duplicate window, and versions start from what is relayed now",
      );
    }
    this.markOk();
  }

  private async markResynced(): Promise<void> {
    try {
      await this.deps.guard.writeMarker?.("resynced");
      this.resyncedAfterLoss = false;
      this.deps.logger.info({ key: markerKey(this.scope) }, "guard state loss: resync done, marker updated");
    } catch (err) {
      this.deps.logger.warn({ err: toRelayError(err).message }, "could not update the guard marker after the resync; trying again");
    }
  }

  private markOk(): void {
    if (this.state === "ok") return;
    const wasLost = this.state === "lost"; // only markLost raised the trouble (a lost state changes only here)
    this.state = "ok";
    this.lostReason = undefined;
    this.deps.metrics.guardStateLost.set({ link: this.deps.config.name }, 0);
    if (wasLost) this.deps.events.clear("guard-state");
    this.deps.events.resume();
  }

  private markLost(relayedUpTo: number, why: string): void {
    if (this.state === "lost") return;
    this.state = "lost";
    const { config, lease, metrics, logger, events } = this.deps;
    const key = markerKey(this.scope);
    const link = config.partition?.link ?? config.name;
    const message =
      `guard state lost: the scope marker ${key} has no entry for this link (${lease.key}), but its consumer ` +
      `${config.durableName} has relayed source messages up to seq ${relayedUpTo}: the guard's Redis no longer has what it remembered ` +
      `(flushed, restarted without its data, failed over to a replica that did not have it, or evicted; or it was written by a relay ` +
      `from before scope markers, and then nothing was lost). Nothing is relayed on this link until an operator runs ` +
      `\`jetstream-relay guard resume --config FILE --link ${link}\` (accept: until idTtl passes, only the destination's duplicate ` +
      `window catches redeliveries, and versions start over) or the same with --resync (a full resync of the link)`;
    this.lostReason = message;
    metrics.guardStateLost.set({ link: config.name }, 1);
    metrics.errors.inc({ link: config.name, code: ErrorCodes.GUARD_STATE_LOST });
    logger.error({ code: ErrorCodes.GUARD_STATE_LOST, key, fence: lease.key, relayedUpTo, why }, message);
    events.trouble("guard-state", new RelayError(ErrorCodes.GUARD_STATE_LOST, message));
    events.stopPulling(); // the consume loop waits for the operator before it pulls again
  }

  /** The ack floor (source seq) of the link's durable consumer: 0 when it has none; undefined when it cannot tell. */
  private async consumerAckFloor(): Promise<number | undefined> {
    const jsm = this.deps.jsm();
    if (!jsm) return undefined;
    const { config } = this.deps;
    try {
      const info = await jsm.consumers.info(config.from.stream, config.durableName);
      return info.ack_floor.stream_seq;
    } catch (err) {
      if (isApiCode(err, JetStreamApiCodes.ConsumerNotFound) || isApiCode(err, JetStreamApiCodes.StreamNotFound)) return 0;
      this.deps.logger.debug({ err: toRelayError(err).message }, "could not read the consumer for the guard marker check");
      return undefined;
    }
  }

  /** The guard's scope (as the relay names it: the destination region and stream). */
  private get scope(): string {
    return `${this.deps.config.to.region}:${this.deps.config.to.stream}`;
  }
}
