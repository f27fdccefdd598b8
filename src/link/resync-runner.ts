/**
 * The link's resyncs (DESIGN §4): requested by the gap and replay-age policies or by an operator after a
 * guard state loss, run by the consume loop before it consumes again, and only while this relay owns the
 * link: a resync the lease's loss cuts short leaves nothing behind.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import type { Delivery } from "../nats/delivery.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { LastResync, LinkResyncReason } from "./link-status.js";
import { ResyncLog } from "./progress-log.js";
import { runResync } from "./resync.js";
import type { ResyncReason } from "./resync.js";

/** What a resync needs of the pipeline. */
export interface ResyncPipeline {
  readonly size: number;
  push(msg: Delivery, snapshot?: string): void;
  drained(signal?: AbortSignal): Promise<void>;
}

export interface ResyncRunnerDeps {
  readonly link: string;
  readonly source: NatsConnection;
  /** JetStream domain of the source region, when it has one. */
  readonly domain: string | undefined;
  readonly pipeline: ResyncPipeline;
  readonly metrics: Pick<RelayMetrics, "resyncs" | "resyncsAbandoned">;
  readonly logger: Logger;
  /** A resync logs its progress this often (ms; 0: never). */
  readonly progressIntervalMs: number;
  /** The link stopping. */
  readonly signal: AbortSignal;
  /** The source's JetStream manager, once the link has one. */
  jsm(): JetStreamManager | undefined;
  /** The link's config as its cursor is created with. */
  cursorConfig(): LinkConfig;
  /** A signal that aborts when the link stops or the lease is lost (undefined: not owned now). */
  whileOwned(): AbortSignal | undefined;
  /** Drops what the pipeline holds (the owner relays it). */
  dropHeld(why: string): Promise<void>;
  readonly events: {
    /** Stop pulling: the consume loop runs the resync before it consumes again. */
    stopPulling(): void;
    /** Resyncing or not: the link's state follows. */
    refreshState(): void;
    /** The resync finished at `snapshotSeq`: live relaying continues after it. */
    resynced(snapshotSeq: number): void;
    /** A resync after a guard state loss finished (the guard's marker says so). */
    guardResynced(): Promise<void>;
  };
}

export class ResyncRunner {
  private pendingResync: LinkResyncReason | undefined;
  private resyncing = false;
  private lastResync: LastResync | undefined;

  constructor(private readonly deps: ResyncRunnerDeps) {}

  /** A resync was requested and has not run yet. */
  get pending(): LinkResyncReason | undefined {
    return this.pendingResync;
  }

  /** A resync is running now. */
  get running(): boolean {
    return this.resyncing;
  }

  get last(): LastResync | undefined {
    return this.lastResync;
  }

  /** Asks for a resync (once: a request while one is pending or running adds nothing). */
  request(reason: LinkResyncReason): void {
    if (this.pendingResync || this.resyncing) return;
    this.pendingResync = reason;
    this.deps.events.stopPulling(); // the consume loop runs the resync before it consumes again
  }

  /**
   * Runs a resync while this relay owns the link; false when the lease was lost before or during it.
   * Then nothing of it stays: the snapshot messages it held are dropped (they were never acked
   * anywhere), the durable is not moved, and whoever owns the link next inspects the cursor afresh
   * (a resync still needed is requested again, with a new snapshot point).
   */
  async run(reason: LinkResyncReason): Promise<boolean> {
    const { pipeline, metrics, logger, events } = this.deps;
    const jsm = this.deps.jsm();
    const owned = this.deps.whileOwned();
    if (!jsm || !owned) {
      this.pendingResync = undefined;
      return !!jsm;
    }
    this.resyncing = true;
    events.refreshState();
    metrics.resyncs.inc({ link: this.deps.link, reason });
    try {
      await pipeline.drained(owned);
      if (owned.aborted) return this.resyncCut(reason, "before it started");
      const domain = this.deps.domain;
      const resyncLog = new ResyncLog(logger, this.deps.progressIntervalMs);
      const result = await runResync(
        {
          link: this.deps.cursorConfig(),
          source: this.deps.source,
          jsm,
          ...(domain ? { domain } : {}),
          push: (m, id) => pipeline.push(m, id),
          drained: () => pipeline.drained(owned),
          signal: owned,
          progress: (id, sent, remaining) => resyncLog.observe(id, sent, remaining),
        },
        // (runResync only names the resync after it.)
        reason as ResyncReason,
      );
      events.resynced(result.snapshotSeq);
      this.lastResync = { ...result, reason, at: new Date().toISOString() };
      logger.info({ resyncId: result.id, messages: result.messages, snapshotSeq: result.snapshotSeq, reason }, "resync done: continuing live");
      if (reason === "guard_state_lost") await events.guardResynced();
      return true;
    } catch (err) {
      if (!owned.aborted) throw err;
      return this.resyncCut(reason, "midway");
    } finally {
      this.pendingResync = undefined;
      this.resyncing = false;
      events.refreshState();
    }
  }

  private async resyncCut(reason: LinkResyncReason, when: string): Promise<false> {
    if (this.deps.signal.aborted) return false;
    this.deps.metrics.resyncsAbandoned.inc({ link: this.deps.link, reason });
    this.deps.logger.warn({ reason, held: this.deps.pipeline.size }, `resync abandoned ${when}: the link lease was lost (the next owner inspects the cursor again)`);
    await this.deps.dropHeld("a resync cut short by the lease's loss: its snapshot messages are not published late");
    return false;
  }
}
