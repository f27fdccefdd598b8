import type { Logger } from "pino";
import type { LinkConfig, MaxRate } from "../config/types.js";
import { ErrorCodes, toRelayError } from "../errors.js";
import type { RelayError } from "../errors.js";
import type { PlacedUnit } from "../group/coordinator.js";
import type { LinkControlValue } from "../group/link-control.js";
import { sleep } from "../lifecycle/backoff.js";
import { JetStreamPublisher } from "../nats/publisher.js";
import { RoundTripMeter } from "../nats/round-trips.js";
import { SourceAcks } from "../nats/source-acks.js";
import type { LinkState } from "../observability/metrics.js";
import { BacklogProbe, type BacklogReading } from "./backlog.js";
import { BacklogPoll } from "./backlog-poll.js";
import { CheckpointWriter } from "./checkpoint.js";
import { ConsumeLoop } from "./consume-loop.js";
import { Destination } from "./destination.js";
import { DestinationCheck } from "./destination-check.js";
import { DestinationWatch } from "./destination-watch.js";
import { GuardWatch } from "./guard-watch.js";
import { LinkStateMachine } from "./link-state.js";
import { linkStatus, ownershipOf } from "./link-status.js";
import type { LinkStatus } from "./link-status.js";
import { LinkHealth } from "./link-health.js";
import { LinkWatch } from "./link-watch.js";
import { LinkWindow, RTT_WAIT_MS } from "./link-window.js";
import { OperatorPause } from "./operator-pause.js";
import { Ownership } from "./ownership.js";
import { Pipeline } from "./pipeline.js";
import { RateCap } from "./rate-cap.js";
import { CatchUpLog } from "./progress-log.js";
import { ResyncRunner } from "./resync-runner.js";
import { SourceInspector } from "./source-inspector.js";
import { SourceStream } from "./source-stream.js";
import { StallWatch } from "./stall-watch.js";
import type { GatedWriter } from "../nats/write-gate.js";
import { LinkAudit } from "../audit/link-audit.js";
import type { LinkDeps } from "./link-deps.js";
export type { LinkOwnership, LinkStatus } from "./link-status.js";

/**
 * One directed link (DESIGN §2): a durable pull consumer on the source stream feeding a Pipeline that
 * publishes to the destination. Lifecycle: `start()` once, `stop()` (idempotent, drains), `closed()`.
 * Either side disconnecting, restarting or losing its stream leader is survived: the consume loop
 * re-creates what it needs with backoff and the pipeline retries publishes in order.
 *
 * This class is the link's life: it wires its parts, starts and stops them, and derives its state from
 * their troubles. The message path is the consume loop (consume-loop.ts) feeding the pipeline; who owns
 * the link is ownership.ts; what the source lost is source-inspector.ts; the destination's fitness is
 * destination-check.ts; resyncs are resync-runner.ts; connection and consumer events are link-watch.ts.
 */
export class Link {
  readonly name: string;
  private readonly state: LinkStateMachine;
  private readonly pipeline: Pipeline;
  private readonly publisher: JetStreamPublisher;
  private readonly abort = new AbortController();
  /** Troubles, the link's own last error, and the state that follows. */
  private readonly health: LinkHealth;
  private readonly logger: Logger;
  private readonly probe: BacklogProbe;
  /** The source stream as last read (its creation time is the incarnation in derived ids and markers). */
  private readonly sourceStream: SourceStream;
  /** Announces changes to the destination stream while the link runs; each holds publishing until it is read again. */
  private readonly destinationWatch: DestinationWatch;
  private readonly destinationCheck: DestinationCheck;
  /** Standby, takeover, handover and the lease's loss. */
  private readonly ownership: Ownership;
  /** Gaps, maxReplayAge and the source's clock. */
  private readonly inspector: SourceInspector;
  private readonly resyncs: ResyncRunner;
  private readonly watch: LinkWatch;
  /** The message path: cursor placement and deliveries into the pipeline. */
  private readonly loop: ConsumeLoop;
  private readonly catchUpLog: CatchUpLog;
  /** The pull window (link-window.ts): the consumer's MaxAckPending, sized to the round trip. */
  private readonly window: LinkWindow;
  /** Stall by progress (stall-watch.ts). */
  private readonly stallWatch: StallWatch;
  private backlog: BacklogReading | undefined;
  private readonly poll: BacklogPoll;
  /** An operator's pause (operator-pause.ts): the group's control key for the link. */
  private readonly operator: OperatorPause;
  /** The rate cap between the consume loop and the pipeline (rate-cap.ts). */
  private readonly rate: RateCap;
  /** The link's position in the group bucket (checkpoint.ts) and the owner's audit of its delivery (audit/). */
  private readonly checkpoint: CheckpointWriter | undefined;
  private readonly audit: LinkAudit | undefined;
  private running: Promise<void> | undefined;
  /** Whether the guard's memory can be trusted (loss detection, settings under strict): nothing moves unless it is ok. */
  private readonly guardWatch: GuardWatch;
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(private readonly deps: LinkDeps) {
    const { config } = deps;
    this.name = config.name;
    this.logger = deps.logger; // bound to the link by its creator
    this.state = new LinkStateMachine(config.name, deps.metrics, this.logger);
    // Publishes and acks leave only while the lease still holds at the moment they are written.
    const writer: GatedWriter = { name: config.name, owns: () => deps.lease.valid() };
    const destGate = deps.writeGates?.of(deps.dest, `${deps.config.to.region} (publishes)`);
    const sourceGate = deps.writeGates?.of(deps.source, `${deps.config.from.region} (acks)`);
    this.publisher = new JetStreamPublisher(deps.dest, config.publishTimeoutMs, destGate && (() => destGate.wrote(writer)));
    this.sourceStream = new SourceStream({
      config,
      logger: this.logger,
      maxPayload: () => deps.source.info?.max_payload,
      incarnation: (createdMs) => this.pipeline.setIncarnation(createdMs),
      recreated: () => this.inspector.recreated(),
    });
    const destination = new Destination(config, deps.dest, deps.destDomain, () => this.sourceStream.ref(), deps.links);
    const acks = new SourceAcks(deps.source, sourceGate && (() => sourceGate.wrote(writer)));
    this.pipeline = new Pipeline({
      link: config,
      links: deps.links,
      guard: deps.guard,
      acks,
      metrics: deps.metrics,
      logger: this.logger,
      markers: destination.markers(),
      owns: () => deps.lease.valid() && this.guardWatch.ok,
      leaseRevision: () => deps.lease.leaseRevision,
      incarnation: () => deps.lease.incarnation,
      events: {
        publishTrouble: (err) => this.health.trouble(err.code === ErrorCodes.DESTINATION_FULL || err.code === ErrorCodes.PUBLISH_REJECTED ? "refused" : "dest", err),
        guardTrouble: (err) => this.health.trouble("guard", err),
        healthy: () => this.health.clear("dest", "guard", "refused"),
        halt: (err) => this.fail(err),
        destinationRestarted: (detail) => this.destinationWatch.restarted(detail),
      },
    });
    this.destinationCheck = new DestinationCheck({
      link: config.name,
      facts: (sourceInfo) => destination.facts(sourceInfo),
      sourceInfo: () => this.sourceStream.info,
      pipeline: this.pipeline,
      metrics: deps.metrics,
      logger: this.logger,
      signal: this.abort.signal,
      events: { trouble: (err) => this.health.trouble("dest", err), clear: () => this.health.clear("dest"), fail: (err) => this.fail(err) },
    });
    this.destinationWatch = new DestinationWatch({
      nc: deps.dest,
      link: config.name,
      stream: config.to.stream,
      metrics: deps.metrics,
      logger: this.logger,
      changed: () => this.destinationCheck.changed(),
    });
    this.inspector = new SourceInspector({
      config,
      metrics: deps.metrics,
      logger: this.logger,
      fail: (err) => this.fail(err),
      requestResync: (reason) => this.resyncs.request(reason),
      sourceVersion: () => deps.source.info?.version,
    });
    this.catchUpLog = new CatchUpLog(this.logger, deps.progressIntervalMs ?? 10_000);
    this.ownership = new Ownership({
      lease: deps.lease,
      pipeline: this.pipeline,
      source: deps.source,
      dest: deps.dest,
      publishTimeoutMs: config.publishTimeoutMs,
      logger: this.logger,
      signal: this.abort.signal,
      guardLost: () => this.guardWatch.lost,
      events: {
        stopPulling: () => this.loop.stopPulling(),
        refreshState: () => this.health.refresh(),
        lapseWrites: () => [destGate, sourceGate].forEach((gate) => gate?.lapsed(writer)),
        resetStall: () => this.stallWatch.reset(),
        tookOver: () => this.inspector.tenureEnded(),
      },
    });
    deps.lease.onLost((reason) => this.ownership.leaseLost(reason));
    this.guardWatch = new GuardWatch({
      guard: deps.guard,
      config,
      lease: deps.lease,
      metrics: deps.metrics,
      logger: this.logger,
      signal: this.abort.signal,
      jsm: () => this.loop.jsm,
      working: () => deps.lease.valid() && !this.ownership.standby,
      highestStoredSourceSeq: () => this.pipeline.highestStoredSourceSeq,
      events: {
        trouble: (kind, err) => this.health.trouble(kind, err),
        clear: (kind) => this.health.clear(kind),
        error: (err) => {
          this.health.noteError(err);
          deps.metrics.errors.inc({ link: this.name, code: err.code });
        },
        fail: (err) => this.fail(err),
        resume: () => this.pipeline.resume(),
        stopPulling: () => this.loop.stopPulling(),
        resyncUnderWay: () => this.resyncs.pending !== undefined || this.resyncs.running,
        requestResync: () => this.resyncs.request("guard_state_lost"),
      },
    });
    this.resyncs = new ResyncRunner({
      link: config.name,
      source: deps.source,
      domain: deps.sourceRegion.domain,
      pipeline: this.pipeline,
      metrics: deps.metrics,
      logger: this.logger,
      progressIntervalMs: deps.progressIntervalMs ?? 10_000,
      signal: this.abort.signal,
      jsm: () => this.loop.jsm,
      cursorConfig: () => this.cursorConfig(),
      whileOwned: () => this.ownership.whileOwned(),
      dropHeld: (why) => this.ownership.dropHeld(why),
      events: {
        stopPulling: () => this.loop.stopPulling(),
        refreshState: () => this.health.refresh(),
        resynced: (snapshotSeq) => this.inspector.resynced(snapshotSeq),
        guardResynced: () => this.guardWatch.resynced(),
      },
    });
    this.rate = new RateCap({
      link: config.name,
      batchSize: config.batchSize,
      ackWaitMs: config.ackWaitMs,
      maxRate: config.maxRate,
      metrics: deps.metrics,
      logger: this.logger,
      admit: (delivery) => this.pipeline.push(delivery),
      mayAdmit: () => deps.lease.valid() && !this.abort.signal.aborted && this.state.state !== "failed",
      working: (reply) => acks.working(reply),
    });
    const roundTrip = deps.roundTrips?.of(deps.source) ?? new RoundTripMeter(deps.source, RTT_WAIT_MS);
    this.window = new LinkWindow({ config, roundTrip, jsm: () => this.loop.jsm, metrics: deps.metrics, logger: this.logger, rate: this.rate, signal: this.abort.signal, owns: () => deps.lease.valid() && !this.ownership.standby });
    this.stallWatch = new StallWatch({
      stallAfterMs: config.stallAfterMs,
      filtered: config.from.filterSubject !== undefined,
      logger: this.logger,
      counted: (step) => deps.metrics.linkStalls.inc({ link: this.name, step }),
      heal: (step) => this.loop.heal(step),
      changed: (reason) => {
        if (reason === undefined) return this.health.stallEnded();
        this.health.stalled(reason);
      },
    });
    this.operator = new OperatorPause({
      link: config.name,
      metrics: deps.metrics,
      logger: this.logger,
      awaitControl: deps.awaitControl ?? false,
      events: {
        paused: (reason) => {
          this.stallWatch.reset();
          this.health.operatorPaused(reason);
          this.loop.stopPulling();
        },
        resumed: () => this.health.operatorResumed(),
      },
    });
    this.probe = new BacklogProbe(config, () => this.loop.jsm, () => this.pipeline.oldestSourceMs, deps.clock);
    this.watch = new LinkWatch({
      logger: this.logger,
      signal: this.abort.signal,
      held: () => this.pipeline.size,
      working: () => deps.lease.valid() && !this.ownership.standby && !this.resyncs.running,
      recreateConsumer: () => this.loop.heal("consumer"),
      events: {
        trouble: (kind, err) => this.health.trouble(kind, err),
        clear: (kind) => this.health.clear(kind),
        stalled: (reason) => this.health.stalled(reason),
        destReconnected: () => this.destinationWatch.reconnected(),
        destUp: (up) => this.pipeline.setPublisher(up ? this.publisher : undefined),
      },
    });
    this.loop = new ConsumeLoop({
      config,
      source: deps.source,
      sourceDomain: deps.sourceRegion.domain,
      dest: deps.dest,
      destDomain: deps.destDomain,
      logger: this.logger,
      signal: this.abort.signal,
      pollIntervalMs: deps.pollIntervalMs ?? 1_000,
      pipeline: this.pipeline,
      ownership: this.ownership,
      guard: this.guardWatch,
      sourceStream: this.sourceStream,
      destination: this.destinationCheck,
      window: this.window,
      probe: this.probe,
      inspector: this.inspector,
      resync: this.resyncs,
      watch: this.watch,
      metrics: deps.metrics,
      operator: this.operator,
      rate: this.rate,
      ...(deps.positions ? { positions: deps.positions } : {}),
      owns: () => deps.lease.valid(),
      failed: () => this.state.state === "failed",
      cursorConfig: () => this.cursorConfig(),
      events: {
        trouble: (err) => this.health.trouble("source", err),
        consuming: () => this.health.clear("source"),
        delivering: () => {
          if (this.health.has("source")) this.health.clear("source");
          if (this.health.has("stalled") && this.stallWatch.stalled === undefined) this.health.clear("stalled");
        },
        fail: (err) => this.fail(err),
        placed: (from) => deps.metrics.cursorPlacements.inc({ link: this.name, from }),
      },
    });
    const view = {
      jsm: () => this.loop.jsm,
      sourceCreatedMs: () => this.sourceStream.ref().createdMs,
      working: () => deps.lease.valid() && !this.ownership.standby && !this.resyncs.running && this.state.state !== "failed",
      progress: () => this.pipeline.highestStoredSourceSeq,
      activity: () => this.loop.activity,
    };
    this.checkpoint = deps.positions && new CheckpointWriter(deps, deps.positions, view);
    this.audit = deps.positions && new LinkAudit({ ...deps, sourceDomain: deps.sourceRegion.domain, positions: deps.positions, link: view });
    this.health = new LinkHealth({
      link: config.name,
      inFlight: config.inFlight,
      state: this.state,
      metrics: deps.metrics,
      logger: this.logger,
      signal: this.abort.signal,
      lease: deps.lease,
      ownership: this.ownership,
      resync: this.resyncs,
      guardLossReason: () => this.guardWatch.lossReason,
      backlog: () => this.backlog,
    });
    this.poll = new BacklogPoll({
      config,
      metrics: deps.metrics,
      logger: this.logger,
      signal: this.abort.signal,
      intervalMs: deps.pollIntervalMs ?? 1_000,
      ticks: deps.ticks,
      lease: deps.lease,
      probe: this.probe,
      ...(deps.streamListings ? { listing: deps.streamListings.of(deps.source, deps.sourceRegion.domain) } : {}),
      destinationCheck: this.destinationCheck,
      pipeline: this.pipeline,
      window: this.window,
      inspector: this.inspector,
      health: this.health,
      stallWatch: this.stallWatch,
      loop: this.loop,
      ownership: this.ownership,
      resyncs: this.resyncs,
      publisher: this.publisher,
      watch: this.watch,
      catchUpLog: this.catchUpLog,
      guardWatch: this.guardWatch,
      state: () => this.state.state,
      reading: (reading) => (this.backlog = reading),
    });
  }

  /** The link as group placement drives it (its lease key is the unit). */
  get placed(): PlacedUnit {
    const lease = this.deps.lease;
    return {
      unit: lease.key,
      owner: () => (lease.valid() ? lease.member : lease.holder),
      setPreferred: (preferred, reason) => this.setPreferred(preferred, reason),
    };
  }

  get currentState(): LinkState {
    return this.state.state;
  }

  /**
   * Starts the guard and the consume loop; resolves once the loop runs (not when caught up). A guard
   * store that cannot be reached pauses the link until it can; one that refuses (`strict` without
   * persistence) rejects.
   */
  async start(): Promise<void> {
    if (this.running) return;
    if (this.deps.guard.kind === "none") {
      this.logger.info("no guard configured: duplicates beyond the destination's duplicate window are not suppressed");
    }
    await this.guardWatch.start();
    this.deps.lease.start();
    this.pipeline.setPublisher(this.publisher);
    this.destinationWatch.start();
    this.watch.watchConnection(this.deps.source, "source");
    this.watch.watchConnection(this.deps.dest, "dest");
    this.running = this.loop.run().catch((err: unknown) => this.fail(toRelayError(err)));
    this.poll.start();
    this.checkpoint?.start();
    this.audit?.start();
  }

  /**
   * Stops pulling, lets in-flight messages finish publish → commit → ack until `signal` aborts, then
   * releases what is left (it stays unacked at the source and is redelivered). Idempotent.
   */
  stop(signal?: AbortSignal): Promise<void> {
    this.stopping ??= this.doStop(signal);
    return this.stopping;
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  status(): LinkStatus {
    return linkStatus({
      config: this.deps.config,
      state: this.state,
      guard: this.deps.guard.kind,
      pipeline: this.pipeline,
      lastError: this.health.lastError,
      backlog: this.backlog,
      gaps: this.inspector.gaps,
      lastResync: this.resyncs.last,
      ownership: ownershipOf(this.deps.lease),
      window: this.window.status(),
      operatorPause: this.operator.pause,
      audit: this.audit?.status(),
    });
  }

  /**
   * Group placement: whether this relay should own the link. A relay that owns it and is no longer
   * preferred hands it over (ownership.ts). Never overlap.
   */
  setPreferred(preferred: boolean, reason: string): void {
    this.ownership.setPreferred(preferred, reason);
  }

  /** The group's control value for the link (group/link-control.ts): an operator's pause, or none. */
  setControl(value: LinkControlValue | undefined): void {
    this.operator.set(value);
  }

  /** A new rate cap (a reload that changes only `maxRate`): applied to the running link at once. */
  setMaxRate(maxRate: MaxRate | undefined): void {
    this.window.setMaxRate(maxRate, this.deps.lease.valid() && !this.ownership.standby);
  }

  /** The link's config as its cursor is created with: the window as MaxAckPending. */
  private cursorConfig(): LinkConfig {
    return { ...this.deps.config, inFlight: this.window.maxAckPending };
  }

  private async doStop(signal?: AbortSignal): Promise<void> {
    this.abort.abort();
    this.destinationWatch.stop();
    this.poll.stop();
    this.checkpoint?.stop();
    this.audit?.stop();
    this.loop.stopPulling();
    this.rate.clear(); // what the cap held stays unacked for the next owner
    await this.running;
    // A failed link's messages will not move, nor those of a relay without the lease: nothing to wait for
    // (they stay unacked for the next owner).
    if (this.state.state !== "failed" && this.deps.lease.valid() && !this.guardWatch.lost) await this.pipeline.drained(signal);
    if (this.pipeline.size > 0) this.logger.warn({ left: this.pipeline.size }, "grace period over: leaving messages unacked");
    await this.pipeline.abandon();
    this.publisher.close();
    await this.deps.guard.stop();
    // Last: everything this relay held is acked or left for the next owner, which may start at once.
    await this.ownership.acksSent();
    // Drained: nothing in flight, so the last checkpoint is exact (a consumer lost while the relay is
    // down is re-created where the link stopped, whatever fills the destination meanwhile).
    if (this.state.state !== "failed" && this.state.state !== "recovering" && this.deps.lease.valid() && !this.ownership.standby) await this.checkpoint?.final();
    await this.deps.lease.stop();
    this.state.set("stopped", "relay stopping");
    this.resolveClosed();
  }

  private fail(err: RelayError): void {
    this.pipeline.flushAcks(); // finished messages waiting for a cumulative ack get it while the lease holds
    this.health.noteError(err);
    this.logger.error({ code: err.code, err: err.message }, "link failed");
    this.state.set("failed", err.message);
    this.abort.abort();
    this.destinationWatch.stop();
    this.checkpoint?.stop();
    this.audit?.stop();
    this.loop.stopPulling();
    // Another relay of the group may take the link over (a failure of this process's own making, such
    // as a lost region, is not its); one that fails the same way reports it too. First what was already
    // published gets its PubAck, commit and ack (the lease is checked before each).
    this.releaseAfterFailure().catch((e: unknown) => this.logger.warn({ err: toRelayError(e).message }, "could not release the link lease"));
  }

  private async releaseAfterFailure(): Promise<void> {
    const until = Date.now() + 2 * this.deps.config.publishTimeoutMs;
    while (this.pipeline.unsettled > 0 && Date.now() < until) await sleep(50);
    await this.ownership.acksSent();
    await this.deps.lease.stop();
  }
}
