import { jetstream, jetstreamManager, JetStreamApiCodes } from "@nats-io/jetstream";
import type { ConsumerMessages, JetStreamManager, JsMsg, StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig, RegionConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import type { Guard } from "../guard/types.js";
import type { PlacedUnit } from "../group/coordinator.js";
import type { LinkLease } from "../group/lease.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { withDeadline } from "../lifecycle/deadline.js";
import { toDelivery } from "../nats/delivery.js";
import type { Delivery } from "../nats/delivery.js";
import { classifyJsError, isApiCode } from "../nats/durable-consumer.js";
import type { SourceRef } from "../nats/destination-markers.js";
import { JetStreamPublisher } from "../nats/publisher.js";
import { SourceAcks } from "../nats/source-acks.js";
import type { LinkState, RelayMetrics } from "../observability/metrics.js";
import { BacklogProbe } from "./backlog.js";
import { StallWatch } from "./stall-watch.js";
import { LinkWindow } from "./link-window.js";
import type { WindowStatus } from "./link-window.js";
import type { StallStep } from "./stall-watch.js";
import type { GatedWriter, WriteGate, WriteGates } from "../nats/write-gate.js";
import { CatchUpLog, ResyncLog } from "./progress-log.js";
import { positionCursor } from "./cursor.js";
import { Destination } from "./destination.js";
import { DestinationWatch } from "./destination-watch.js";
import type { BacklogReading } from "./backlog.js";
import { GapDetector } from "./gap.js";
import { GuardWatch } from "./guard-watch.js";
import type { Gap } from "./gap.js";
import { LinkStateMachine } from "./link-state.js";
import { runResync } from "./resync.js";
import type { ResyncReason, ResyncResult } from "./resync.js";
import { Pipeline } from "./pipeline.js";
import { transformPattern } from "../protocol/subjects.js";

export interface LinkDeps {
  readonly config: LinkConfig;
  /** Every link of the mesh: needed to suppress redundant paths. */
  readonly links: readonly LinkConfig[];
  readonly sourceRegion: RegionConfig;
  readonly source: NatsConnection;
  readonly dest: NatsConnection;
  /** JetStream domain of the destination region, when it has one. */
  readonly destDomain?: string;
  /** The link's ownership in the region's group: only the owner consumes, publishes, commits and acks. */
  readonly lease: LinkLease;
  readonly guard: Guard;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** How often backlog and state are refreshed (ms). */
  readonly pollIntervalMs?: number;
  /** The relay's clock (ms since the epoch; default Date.now). Backlog ages are measured on the source's. */
  readonly clock?: () => number;
  /** Ownership checked again when bytes leave (write-gate.ts); absent: only when they are issued. */
  readonly writeGates?: WriteGates;
  /** A catching-up or resyncing link logs its progress this often (ms; 0: never; default 10 s). */
  readonly progressIntervalMs?: number;
}

export interface LinkStatus {
  readonly name: string;
  readonly from: string;
  readonly to: string;
  readonly state: LinkState;
  readonly stateSince: string;
  readonly stateReason?: string;
  readonly guard: Guard["kind"];
  readonly inFlight: number;
  /** Corrections since the relay started, by kind. */
  readonly corrections: Readonly<Record<string, number>>;
  /** Messages finished since the relay started, by outcome: relayed, duplicate, stale, loop, dead_lettered. */
  readonly messages?: Readonly<Record<string, number>>;
  readonly backlog?: BacklogReading;
  readonly lastError?: { readonly code: string; readonly message: string; readonly at: string };
  readonly stateHistory: readonly { readonly state: LinkState; readonly at: string; readonly reason?: string }[];
  /** Lost source ranges reported so far (the last 10). */
  readonly gaps: readonly Gap[];
  readonly lastResync?: ResyncResult & { readonly reason: LinkResyncReason; readonly at: string };
  /** Who owns the link in the region's group (absent on a link that never started). */
  readonly ownership?: LinkOwnership;
  /** The pull window: its size, what limits it, the round trip and the rate (link-window.ts). */
  readonly window?: WindowStatus;
}

export interface LinkOwnership {
  /** The member holding the lease, as this relay last saw it (undefined: nobody, or not known yet). */
  readonly owner?: string;
  /** This relay is the owner. */
  readonly self: boolean;
  /** The KV revision at which this relay acquired the lease (when it is the owner). */
  readonly epoch?: number;
  /** Since when this relay owns it (when it is the owner). */
  readonly since?: string;
  /** Group placement wants this relay to own the link. */
  readonly preferred: boolean;
  /** The lease key in the group bucket. */
  readonly key: string;
}

/** Lifetime of one pull request (ms). */
const PULL_EXPIRES_MS = 5_000;
const IDLE_HEARTBEAT_MS = 1_000;

/**
 * `refused`: the destination answers but will not store (full, or a refusal for the whole link): paused.
 * `guard-state`: the guard lost its memory (GUARD_STATE_LOST): paused until an operator resumes.
 * `guard-unsafe`: under `guard.strict`, a settings check found the guard's Redis unsafe: paused until it is not.
 */
type Trouble = "source" | "dest" | "guard" | "refused" | "guard-state" | "guard-unsafe" | "stalled";

/** A resync after a guard state loss is the operator's choice (`guard resume --resync`). */
type LinkResyncReason = ResyncReason | "guard_state_lost";

/**
 * One directed link (DESIGN §2): a durable pull consumer on the source stream feeding a Pipeline that
 * publishes to the destination. Lifecycle: `start()` once, `stop()` (idempotent, drains), `closed()`.
 * Either side disconnecting, restarting or losing its stream leader is survived: the consume loop
 * re-creates what it needs with backoff and the pipeline retries publishes in order.
 */
export class Link {
  readonly name: string;
  private readonly state: LinkStateMachine;
  private readonly pipeline: Pipeline;
  private readonly publisher: JetStreamPublisher;
  private readonly abort = new AbortController();
  private readonly troubles = new Set<Trouble>();
  private readonly logger: Logger;
  private readonly probe: BacklogProbe;
  private jsm: JetStreamManager | undefined;
  private readonly destination: Destination;
  /** The source stream as last read (its creation time is the incarnation in derived ids and markers). */
  private sourceInfo: StreamInfo | undefined;
  private destinationKnown = false;
  /** Announces changes to the destination stream while the link runs; each holds publishing until it is read again. */
  private readonly destinationWatch: DestinationWatch;
  /** Changes announced so far: a read that began before the latest one does not end the hold. */
  private destinationChanges = 0;
  private recheck: Promise<void> | undefined;
  /** The destination connection is up (a reconnect after trouble does not clear it by itself). */
  private destConnected = true;
  /** The consumer sequence of the last delivery taken (when the cursor was placed: what the consumer had delivered). */
  private lastConsumerSeq = 0;
  /** Deliveries were lost: the loop drains the pipeline and moves the cursor back before consuming again. */
  private recoverLost = false;
  /** Waiting for the lease: another relay of the group owns the link. */
  private standby = false;
  /** Just took the link over from another relay (from standby, or from waiting for the lease): at work at once. */
  private tookOver = false;
  /** Aborted when the lease is lost: a wait that only makes sense while this relay owns the link ends. */
  private ownedTerm = new AbortController();
  /** Placement moved the link to another member: the loop drains and releases the lease (why). */
  private handoverReason: string | undefined;
  private gapDetector: GapDetector;
  private readonly catchUpLog: CatchUpLog;
  private readonly gaps: Gap[] = [];
  private highestSeen = 0;
  /** The pull window (link-window.ts): the consumer's MaxAckPending, sized to the round trip. */
  private readonly window: LinkWindow;
  /** Stall by progress (stall-watch.ts), and the reason the link is `stalled` now. */
  private readonly stallWatch: StallWatch;
  private stallReason: string | undefined;
  /** The source connection was dropped as stale (a silent path): handled when it is back. */
  private silentSource = false;
  /** Deliveries received (progress for the stall watch). */
  private delivered = 0;
  private readonly destGate: WriteGate | undefined;
  private readonly sourceGate: WriteGate | undefined;
  /** This link as its connections' write gates know it. */
  private readonly gated: GatedWriter;
  /** The clock offset last warned about (ms), while it is 2 s or more. */
  private clockOffsetLogged: number | undefined;
  private pendingResync: LinkResyncReason | undefined;
  private resyncing = false;
  private lastResync: LinkStatus["lastResync"];
  private messages: ConsumerMessages | undefined;
  private lastError: LinkStatus["lastError"];
  private backlog: BacklogReading | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
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
    this.destGate = deps.writeGates?.of(deps.dest, `${deps.config.to.region} (publishes)`);
    this.sourceGate = deps.writeGates?.of(deps.source, `${deps.config.from.region} (acks)`);
    this.gated = writer;
    this.publisher = new JetStreamPublisher(deps.dest, config.publishTimeoutMs, this.destGate && (() => this.destGate?.wrote(writer)));
    this.destination = new Destination(config, deps.dest, deps.destDomain, () => this.sourceRef());
    this.pipeline = new Pipeline({
      link: config,
      links: deps.links,
      guard: deps.guard,
      acks: new SourceAcks(deps.source, this.sourceGate && (() => this.sourceGate?.wrote(writer))),
      metrics: deps.metrics,
      logger: this.logger,
      markers: this.destination.markers(),
      owns: () => deps.lease.valid() && this.guardWatch.ok,
      epoch: () => deps.lease.epoch,
      incarnation: () => deps.lease.incarnation,
      events: {
        publishTrouble: (err) => this.trouble(err.code === ErrorCodes.DESTINATION_FULL || err.code === ErrorCodes.PUBLISH_REJECTED ? "refused" : "dest", err),
        guardTrouble: (err) => this.trouble("guard", err),
        healthy: () => this.clear("dest", "guard", "refused"),
        halt: (err) => this.fail(err),
        destinationRestarted: (detail) => this.destinationWatch.restarted(detail),
      },
    });
    this.destinationWatch = new DestinationWatch({
      nc: deps.dest,
      link: config.name,
      stream: config.to.stream,
      metrics: deps.metrics,
      logger: this.logger,
      changed: () => this.destinationChanged(),
    });
    this.gapDetector = new GapDetector(config.from.filterSubject !== undefined);
    this.catchUpLog = new CatchUpLog(this.logger, deps.progressIntervalMs ?? 10_000);
    deps.lease.onLost((reason) => this.leaseLost(reason));
    this.guardWatch = new GuardWatch({
      guard: deps.guard,
      config,
      lease: deps.lease,
      metrics: deps.metrics,
      logger: this.logger,
      signal: this.abort.signal,
      jsm: () => this.jsm,
      working: () => deps.lease.valid() && !this.standby,
      highestStoredSourceSeq: () => this.pipeline.highestStoredSourceSeq,
      events: {
        trouble: (kind, err) => this.trouble(kind, err),
        clear: (kind) => this.clear(kind),
        error: (err) => {
          this.noteError(err);
          deps.metrics.errors.inc({ link: this.name, code: err.code });
        },
        fail: (err) => this.fail(err),
        resume: () => this.pipeline.resume(),
        stopPulling: () => this.messages?.stop(),
        resyncUnderWay: () => this.pendingResync !== undefined || this.resyncing,
        requestResync: () => this.requestResync("guard_state_lost"),
      },
    });
    this.window = new LinkWindow({ config, source: deps.source, jsm: () => this.jsm, metrics: deps.metrics, logger: this.logger });
    this.stallWatch = new StallWatch({
      stallAfterMs: config.stallAfterMs,
      filtered: config.from.filterSubject !== undefined,
      logger: this.logger,
      counted: (step) => deps.metrics.linkStalls.inc({ link: this.name, step }),
      heal: (step) => this.healStall(step),
      changed: (reason) => {
        if (reason === undefined) {
          if (this.stallReason !== undefined && this.troubles.has("stalled")) this.clear("stalled");
          this.stallReason = undefined;
          return;
        }
        this.stallReason = reason;
        this.trouble("stalled", new RelayError(ErrorCodes.SOURCE_STALLED, reason));
      },
    });
    this.probe = new BacklogProbe(config, () => this.jsm, () => this.pipeline.oldestSourceMs, deps.clock);
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
    this.watchConnection(this.deps.source, "source");
    this.watchConnection(this.deps.dest, "dest");
    this.running = this.consumeLoop().catch((err: unknown) => this.fail(toRelayError(err)));
    this.schedulePoll();
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
    const c = this.deps.config;
    // The latest of the link's own errors (source, lease) and the pipeline's (publish, guard, bad messages).
    const own = this.lastError;
    const piped = this.pipeline.lastError;
    const lastError = own && piped ? (piped.at > own.at ? piped : own) : (own ?? piped);
    return {
      name: c.name,
      from: `${c.from.region}/${c.from.stream}`,
      to: `${c.to.region}/${c.to.stream}`,
      state: this.state.state,
      stateSince: new Date(this.state.sinceMs).toISOString(),
      ...(this.state.reason ? { stateReason: this.state.reason } : {}),
      guard: this.deps.guard.kind,
      inFlight: this.pipeline.size,
      corrections: { ...this.pipeline.corrections },
      messages: { ...this.pipeline.outcomes },
      ...(this.backlog ? { backlog: this.backlog } : {}),
      ...(lastError ? { lastError } : {}),
      stateHistory: [...this.state.history],
      gaps: [...this.gaps],
      ...(this.lastResync ? { lastResync: this.lastResync } : {}),
      ownership: this.ownership(),
      window: this.window.status(),
    };
  }

  /** What the source says of its message sizes: the average it holds, and the largest it allows. */
  private sourceSizes(): { avgMessageBytes?: number; maxMessageBytes?: number } {
    const state = this.sourceInfo?.state;
    const maxMsgSize = this.sourceInfo?.config.max_msg_size ?? -1;
    const largest = maxMsgSize > 0 ? maxMsgSize : this.deps.source.info?.max_payload;
    return {
      ...(state && state.messages > 0 ? { avgMessageBytes: state.bytes / state.messages } : {}),
      ...(largest !== undefined ? { maxMessageBytes: largest } : {}),
    };
  }

  /** The link's config as its cursor is created with: the window as MaxAckPending. */
  private cursorConfig(): LinkConfig {
    return { ...this.deps.config, inFlight: this.window.maxAckPending };
  }

  private ownership(): LinkOwnership {
    const lease = this.deps.lease;
    const self = lease.valid();
    const owner = self ? lease.member : lease.holder;
    const epoch = self ? lease.epoch : undefined;
    const since = self ? lease.since : undefined;
    return {
      ...(owner !== undefined ? { owner } : {}),
      self,
      ...(epoch !== undefined ? { epoch } : {}),
      ...(since !== undefined ? { since } : {}),
      preferred: lease.isEligible,
      key: lease.key,
    };
  }

  /**
   * Group placement: whether this relay should own the link. A relay that owns it and is no longer
   * preferred hands it over: it stops pulling, finishes what it holds (publish → ack) and releases the
   * lease, so the preferred member takes it at once and starts where this one left off. Never overlap.
   */
  setPreferred(preferred: boolean, reason: string): void {
    const lease = this.deps.lease;
    lease.setEligible(preferred);
    if (preferred) {
      if (this.handoverReason !== undefined) this.logger.info({ reason }, "handover cancelled: placement wants this relay to keep the link");
      this.handoverReason = undefined;
      return;
    }
    if (!lease.valid() || this.handoverReason !== undefined || this.abort.signal.aborted) return;
    this.handoverReason = reason;
    this.logger.info({ reason, inFlight: this.pipeline.size }, "handing the link over: stop pulling, finish what is in flight, then release the lease");
    this.messages?.stop();
  }

  /** The handover's second half, in the consume loop once the pull stopped. */
  private async handOver(): Promise<void> {
    const reason = this.handoverReason;
    // Nothing new is pulled: the pipeline only shrinks, unless the destination is down (then it waits).
    // A lease lost meanwhile ends the wait: the pipeline no longer publishes, and what it holds is kept
    // or dropped by the standby that follows, whoever owns the link next.
    while (this.pipeline.size > 0 && this.handoverReason !== undefined && this.deps.lease.valid() && !this.abort.signal.aborted && !this.guardWatch.lost) {
      await this.pipeline.drained(AbortSignal.any([this.abort.signal, AbortSignal.timeout(1_000)]));
    }
    if (this.handoverReason === undefined || this.abort.signal.aborted) return;
    // A lost guard state holds everything: the next owner finds the marker gone too and waits for the operator.
    if (this.guardWatch.lost) await this.dropHeld("the guard lost its state: handed over as it is");
    this.handoverReason = undefined;
    if (!this.deps.lease.valid()) return; // lost meanwhile: nothing to hand over
    await this.acksSent();
    await this.deps.lease.release("handed-over");
    this.logger.info({ reason }, "link handed over: everything this relay held is acked and the lease released");
    this.deps.lease.start();
  }

  private async doStop(signal?: AbortSignal): Promise<void> {
    this.abort.abort();
    this.destinationWatch.stop();
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.messages?.stop();
    await this.running;
    // A failed link's messages will not move, nor those of a relay without the lease: nothing to wait for
    // (they stay unacked for the next owner).
    if (this.state.state !== "failed" && this.deps.lease.valid() && !this.guardWatch.lost) await this.pipeline.drained(signal);
    if (this.pipeline.size > 0) this.logger.warn({ left: this.pipeline.size }, "grace period over: leaving messages unacked");
    await this.pipeline.abandon();
    this.publisher.close();
    await this.deps.guard.stop();
    // Last: everything this relay held is acked or left for the next owner, which may start at once.
    await this.acksSent();
    await this.deps.lease.stop();
    this.state.set("stopped", "relay stopping");
    this.resolveClosed();
  }

  private async consumeLoop(): Promise<void> {
    const { config, source } = this.deps;
    const backoff = new Backoff(250, 5_000);
    const domain = this.deps.sourceRegion.domain;
    const js = jetstream(source, domain ? { domain } : {});
    await this.guardWatch.ready;
    while (!this.abort.signal.aborted && this.state.state !== "failed") {
      if (this.handoverReason !== undefined) await this.handOver();
      if (!(await this.holdLease())) return;
      try {
        this.jsm ??= await jetstreamManager(source, domain ? { domain, checkAPI: false } : { checkAPI: false });
        await this.readSource(this.jsm);
        if (!this.guardWatch.verified) {
          // Not a message moves before the guard's memory is known to be there (or a loss accepted).
          await this.guardWatch.verify("start");
          if (!this.guardWatch.verified) {
            await sleep(this.deps.pollIntervalMs ?? 1_000, this.abort.signal);
            continue;
          }
        }
        await this.refreshDestination();
        if ((this.state.state as LinkState) === "failed" || this.abort.signal.aborted) return;
        // Whatever the pipeline holds is finished before the cursor is placed, however long that takes
        // (nothing else can move meanwhile): only an empty pipeline can tell which of the consumer's
        // ack-pending messages nobody holds any more — deliveries dropped when the pull stopped, lost
        // on the wire, or taken by an ex-owner's late pull. The server would redeliver those after
        // their ack wait, behind newer messages; placing the cursor with nothing held moves it back
        // to the ack floor instead, so they go first (ordered recovery).
        if (this.pipeline.size > 0 && !(await this.drainWhileOwned())) continue;
        // The last cumulative ack is at the server before the consumer's ack-pending count is read.
        await withDeadline(source.flush(), config.publishTimeoutMs, "source flush", this.abort.signal);
        // The cursor carries the window as its MaxAckPending (nothing is held now: no byte bound).
        this.window.placed(this.sourceSizes());
        const position = await positionCursor(
          { link: this.cursorConfig(), jsm: this.jsm, dest: this.deps.dest, logger: this.logger, signal: this.abort.signal, ...(this.deps.destDomain ? { destDomain: this.deps.destDomain } : {}) },
          this.sourceRef(),
          true,
        );
        if (position.created || position.repositioned) this.pipeline.cursorMoved();
        // The next delivery must be the one after what the consumer has delivered (1 for a new or
        // moved cursor): anything later means deliveries went elsewhere, and they go first.
        this.lastConsumerSeq = position.info.delivered.consumer_seq;
        this.recoverLost = false;
        if (position.repositioned) this.pipeline.setStoredInDestination(position.stored, position.storedUpTo, position.heldUpTo);
        if (position.startSeq !== undefined) this.highestSeen = Math.max(this.highestSeen, position.startSeq - 1);
        // Where the next first delivery follows: holes the consumer jumps over from there are gaps.
        this.gapDetector.placed(position.startSeq !== undefined ? position.startSeq - 1 : position.created ? undefined : position.info.delivered.stream_seq);
        // Before consuming: once delivery resumes, the server skips deleted messages without a trace.
        // (A consumer created from the start of the stream has no cursor to compare yet.)
        if (!position.created || position.startSeq !== undefined) {
          const reading = await this.probe.read();
          this.observeClock(reading.clockOffsetMs);
          this.inspect(reading);
        }
        // A resync the lease's loss cut short moved nothing: back to waiting for the lease.
        if (this.pendingResync && !(await this.resync(this.pendingResync))) continue;
        if ((this.state.state as LinkState) === "failed" || this.abort.signal.aborted) return;
        const consumer = await js.consumers.get(config.from.stream, config.durableName);
        if (this.abort.signal.aborted) return;
        if (this.handoverReason !== undefined) continue; // placement moved the link meanwhile
        const messages = await consumer.consume({
          ...this.window.pullOptions(),
          // Pull requests expire after 5 s (heartbeats every 2.5 s): a pull left on a consumer leader
          // that died is replaced within seconds, not the client's default 30 s.
          expires: PULL_EXPIRES_MS,
          // A heartbeat a second while no message comes: two missed and the link says `stalled`
          // within seconds of a silent path (the connection's PINGs then leave it).
          idle_heartbeat: IDLE_HEARTBEAT_MS,
          callback: (m: JsMsg) => this.onMessage(m),
        });
        this.messages = messages;
        backoff.reset();
        this.clear("source");
        this.watchConsumer(messages).catch((err: unknown) => this.logger.debug({ err: toRelayError(err).message }, "consumer status watcher ended"));
        await messages.closed();
      } catch (err) {
        if (this.abort.signal.aborted) return;
        const relayErr = classifyJsError(err, `link ${config.name}: source ${config.from.region}/${config.from.stream}`);
        if (relayErr.code === ErrorCodes.CONFIG_INVALID) throw relayErr;
        this.trouble("source", relayErr);
        await sleep(backoff.next(), this.abort.signal);
      }
    }
  }

  /**
   * A jump in the consumer's delivery sequence: deliveries were lost on the way (a consumer leader that
   * died with messages on the wire). The server holds them as ack-pending and would redeliver them only
   * after the ack wait, behind newer ones. So this delivery is not taken, the pull stops, the pipeline
   * finishes what it holds, and the loop moves the cursor back to the ack floor: the lost ones go first.
   */
  private deliveriesLost(d: Delivery): boolean {
    if (this.recoverLost) return true; // stopping: the rest comes again after the cursor moves
    const last = this.lastConsumerSeq;
    this.lastConsumerSeq = d.consumerSequence;
    if (d.consumerSequence <= last) {
      // A new consumer leader that had not learnt everything the old one delivered: it delivers those
      // messages again, as first deliveries. The pipeline acks the ones it finished without a publish.
      this.logger.warn(
        { consumerSeq: d.consumerSequence, lastConsumerSeq: last, sourceSeq: d.streamSequence },
        "the source consumer delivers again from an earlier point (its leader changed): messages already relayed are acked, not published again",
      );
    }
    if (d.consumerSequence <= last + 1) return false;
    this.recoverLost = true;
    this.logger.warn(
      { lostFrom: last + 1, lostTo: d.consumerSequence - 1, afterSourceSeq: this.highestSeen, sourceSeq: d.streamSequence },
      "deliveries lost on the way from the source: finishing what is held, then moving the cursor back so they go first",
    );
    this.messages?.stop();
    return true;
  }

  /**
   * Whether the link should be moving now if the source has messages for it: it owns the link, is not
   * resyncing or throttled, nothing holds it back (guard, destination, a refused message: troubles of
   * their own) and the relay holds nothing (a full pipeline waits for its destination, not its source).
   */
  private stallEligible(): boolean {
    if (this.standby || !this.deps.lease.valid() || this.resyncing || this.window.throttled || !this.messages) return false;
    if (this.pipeline.size > 0) return false;
    for (const t of this.troubles) if (t !== "stalled") return false;
    return true;
  }

  /**
   * Back on another source server after a silent path. The server still counts the old connection as
   * a client (it PINGs it only every few minutes) and keeps serving the pull requests it left: up to a
   * window of deliveries go into the silence for as long as those requests live, ahead of the new
   * ones. Re-creating the consumer ends them at once; the new one starts after what the destination
   * holds, once what this relay held is finished (ordered recovery).
   */
  private leftSilentSource(): void {
    if (!this.deps.lease.valid() || this.standby || this.resyncing) return;
    this.logger.warn("the source connection went silent and was replaced: re-creating the consumer so requests left on the silent one deliver nothing");
    this.healStall("consumer").catch((err: unknown) =>
      this.logger.warn({ err: toRelayError(err).message }, "could not re-create the consumer after a silent path (it is replaced when its pulls expire)"),
    );
  }

  /** One healing step for a stalled link (stall-watch.ts decides which and when). */
  private async healStall(step: StallStep): Promise<void> {
    const { config } = this.deps;
    if (step === "pull") {
      this.messages?.stop(); // the consume loop pulls again
      return;
    }
    if (step === "consumer") {
      // Deleted, the loop places a new cursor from what the destination holds (ordered recovery).
      const jsm = this.jsm;
      if (!jsm) return;
      await jsm.consumers.delete(config.from.stream, config.durableName);
      this.messages?.stop();
      return;
    }
    await this.deps.source.reconnect();
  }

  /**
   * Waits until this relay owns the link (at once when no other relay of the group does); false when
   * the link stops meanwhile. A new owner then places the cursor with ordered recovery, so a takeover
   * relays what the previous owner held first.
   */
  private async holdLease(): Promise<boolean> {
    const { lease } = this.deps;
    if (lease.valid()) return true;
    this.standby = true;
    this.refreshState();
    // Another relay took the link while this one waited: what this one holds is that relay's now.
    const watch = setInterval(() => {
      if (lease.holder !== undefined && this.pipeline.size > 0) void this.dropHeld(`relay ${lease.holder} owns the link now`);
    }, 500);
    try {
      const epoch = await lease.acquired(this.abort.signal);
      if (!lease.resumed && this.pipeline.size > 0) await this.dropHeld("another relay owned the link meanwhile");
      this.pipeline.resume(); // what it kept (a lease taken back) publishes, commits and acks again
      this.logger.info({ epoch, resumed: lease.resumed }, "link lease acquired: this relay owns the link");
      // Taken from another relay (not its own lease back): at work at once, whatever the last reading said.
      this.tookOver = !lease.resumed;
      return true;
    } catch {
      return false; // stopping
    } finally {
      clearInterval(watch);
      this.standby = false;
      this.refreshState();
    }
  }

  /**
   * The lease is gone (not renewed in time: the destination region was unreachable, or this process was
   * paused). The pipeline stopped publishing, committing and acking already (it checks the lease first).
   * What it holds is kept while nobody else owns the link: when this relay takes back a lease that still
   * names it, it goes on in order (publishes it sent before may still land, and only a pipeline that
   * keeps its order can follow them); when another relay took over, it is dropped for that relay.
   */
  private leaseLost(reason: string): void {
    if (this.abort.signal.aborted) return;
    this.logger.warn({ reason, inFlight: this.pipeline.size }, "link lease lost: this relay stops working the link until it owns it again");
    // Bytes of this link still queued (a slow path, or a pause between issuing and writing) stay here.
    this.destGate?.lapsed(this.gated);
    this.sourceGate?.lapsed(this.gated);
    this.messages?.stop();
    this.ownedTerm.abort();
    this.stallWatch.reset();
  }

  /**
   * Before the lease goes: the acks this relay sent (the last cumulative one is sent as the pipeline
   * empties) have left the client and reached the source server (a PING answered after them). The next
   * owner may delete and re-create the durable under the same name; an ack of ours arriving after that
   * would move the new consumer's floor to our delivery sequence and freeze it. Bounded by the publish
   * timeout: a source that does not answer gets no ack from us either.
   */
  private async acksSent(): Promise<void> {
    // Also the publishes sent: the lease has its own connection, so its release must not overtake them.
    await Promise.all([
      withDeadline(this.deps.source.flush(), this.deps.config.publishTimeoutMs, "source flush").catch((err: unknown) =>
        this.logger.warn({ err: toRelayError(err).message }, "could not confirm the last acks reached the source before releasing the lease"),
      ),
      withDeadline(this.deps.dest.flush(), this.deps.config.publishTimeoutMs, "destination flush").catch((err: unknown) =>
        this.logger.warn({ err: toRelayError(err).message }, "could not confirm the last publishes reached the destination before releasing the lease"),
      ),
    ]);
  }

  /**
   * Waits until the pipeline is empty while this relay owns the link; false when the lease was lost or
   * the link stops first (the loop then waits for the lease, and drops or keeps what it holds).
   */
  private async drainWhileOwned(): Promise<boolean> {
    const owned = this.whileOwned();
    if (!owned) return false;
    this.logger.info({ inFlight: this.pipeline.size }, "finishing what the pipeline holds before placing the cursor");
    await this.pipeline.drained(owned);
    return this.pipeline.size === 0;
  }

  /**
   * A signal that aborts when the link stops or this relay's lease is lost (undefined: not owned now).
   * A wait for the pipeline to empty must end with the lease: without it nothing publishes.
   */
  private whileOwned(): AbortSignal | undefined {
    if (!this.deps.lease.valid()) return undefined;
    if (this.ownedTerm.signal.aborted) this.ownedTerm = new AbortController();
    return AbortSignal.any([this.abort.signal, this.ownedTerm.signal]);
  }

  private async dropHeld(why: string): Promise<void> {
    if (this.pipeline.size === 0) return;
    this.logger.warn({ inFlight: this.pipeline.size, why }, "dropping what this relay held: the owner relays it");
    await this.pipeline.abandon().catch((err: unknown) => this.logger.warn({ err: toRelayError(err).message }, "could not drop the pipeline"));
  }

  /**
   * Reads the source stream. Its creation time is its incarnation: a stream deleted and recreated under
   * the same name restarts at seq 1, so derived ids and destination markers carry it, and gap tracking
   * starts over.
   */
  private async readSource(jsm: JetStreamManager): Promise<void> {
    const info = await jsm.streams.info(this.deps.config.from.stream);
    const before = this.sourceInfo ? createdMs(this.sourceInfo) : undefined;
    this.sourceInfo = info;
    const now = createdMs(info);
    this.pipeline.setIncarnation(now);
    if (before !== undefined && now !== before) {
      this.logger.warn({ stream: info.config.name, created: info.created }, "the source stream was recreated: a new incarnation starts at seq 1");
      this.highestSeen = 0;
      this.gapDetector = new GapDetector(this.deps.config.from.filterSubject !== undefined);
    }
  }

  private sourceRef(): SourceRef {
    const { config } = this.deps;
    const created = this.sourceInfo ? createdMs(this.sourceInfo) : undefined;
    const filter = config.from.filterSubject;
    return {
      region: config.from.region,
      stream: config.from.stream,
      ...(created !== undefined ? { createdMs: created } : {}),
      // A filtered link (or a partition) counts only its own subjects' markers.
      ...(filter !== undefined ? { subjects: transformPattern(filter, config.to.transform) } : {}),
    };
  }

  /**
   * Reads the destination stream's limits and checks its subjects and retention. A missing stream holds
   * messages in the pipeline (retried by the poll timer); a stream that does not bind the link's subjects,
   * or does not keep what it acknowledges (interest, work queue), fails the link.
   */
  private async refreshDestination(): Promise<void> {
    const changes = this.destinationChanges;
    const held = this.pipeline.destinationHeld;
    try {
      const facts = await this.destination.facts(this.sourceInfo);
      // Changed again while it was read (the recheck reads again), or stopping: this reading decides nothing.
      if (changes !== this.destinationChanges || this.abort.signal.aborted) return;
      this.pipeline.setDestination(facts);
      if (held) this.logger.info({ stream: facts.stream }, "destination read again after a change: it binds the link's subjects and keeps what it acknowledges; publishing resumes");
      if (!this.destinationKnown && this.pipeline.size === 0) this.clear("dest");
      this.destinationKnown = true;
    } catch (err) {
      const relayErr = toRelayError(err, ErrorCodes.JETSTREAM_API);
      this.deps.metrics.errors.inc({ link: this.name, code: relayErr.code });
      if (relayErr.code === ErrorCodes.DESTINATION_MISMATCH || relayErr.code === ErrorCodes.DESTINATION_RETENTION) return this.fail(relayErr);
      this.trouble("dest", relayErr);
    }
  }

  /** The destination changed while the link runs (DestinationWatch): hold publishing and read it again. */
  private destinationChanged(): void {
    if (this.abort.signal.aborted) return;
    this.destinationChanges++;
    this.pipeline.holdDestination();
    void this.recheckDestination();
  }

  /** Reads the destination until a reading began after the latest change; one at a time. */
  private recheckDestination(): Promise<void> {
    this.recheck ??= (async () => {
      try {
        let seen: number;
        do {
          seen = this.destinationChanges;
          await this.refreshDestination();
        } while (seen !== this.destinationChanges && !this.abort.signal.aborted);
      } finally {
        this.recheck = undefined;
      }
    })();
    return this.recheck;
  }

  private onMessage(m: JsMsg): void {
    if (!this.deps.lease.valid()) {
      // An ex-owner's pull (a process woken from a pause before its lease timer fired): it takes
      // nothing. The delivery stays ack-pending at the source; the owner sees the gap in the
      // consumer's sequence and moves the cursor back, so it goes first.
      this.messages?.stop();
      return;
    }
    if (this.state.state === "failed") return; // halted (a gap, onGap halt): nothing after it is taken
    this.delivered++;
    if (this.troubles.has("source")) this.clear("source");
    if (this.troubles.has("stalled") && this.stallWatch.stalled === undefined) this.clear("stalled");
    try {
      const delivery = toDelivery(m);
      if (this.deliveriesLost(delivery)) return;
      const gap = this.gapDetector.delivered(delivery.streamSequence, delivery.deliveryCount === 1);
      if (gap && !this.gapFound(gap)) return;
      if (delivery.streamSequence > this.highestSeen) this.highestSeen = delivery.streamSequence;
      this.pipeline.push(delivery);
      this.window.receive(m.data.length);
      this.window.holding(this.pipeline.size, this.pipeline.bytes);
    } catch (err) {
      this.fail(toRelayError(err)); // a bug: stop rather than ack something we did not handle
    }
  }

  /** Consumer notifications: a consumer or stream that vanished is re-created by the loop. */
  private async watchConsumer(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (s.type === "consumer_deleted" || s.type === "consumer_not_found" || s.type === "stream_not_found") {
        this.trouble("source", new RelayError(ErrorCodes.STREAM_NOT_FOUND, `source ${s.type.replace(/_/g, " ")}`));
        messages.stop();
      } else if (s.type === "heartbeats_missed" && s.count >= 2) {
        // The pull hears nothing, not even the server's heartbeats: the path may carry nothing while
        // the connection stays open (its PINGs find that out within seconds, and it reconnects).
        this.stallReason = `no delivery and no heartbeat from the source (${s.count} heartbeats missed): the path to it may be silent`;
        this.trouble("stalled", new RelayError(ErrorCodes.SOURCE_STALLED, this.stallReason));
      }
    }
  }

  private watchConnection(nc: NatsConnection, side: "source" | "dest"): void {
    void (async () => {
      for await (const s of nc.status()) {
        if (this.abort.signal.aborted) return;
        // The client dropped a connection whose PINGs went unanswered: the path to that server went
        // silent (or the server hung), with the connection still open on the server's side.
        if (s.type === "staleConnection" && side === "source") this.silentSource = true;
        if (s.type === "disconnect") {
          if (side === "dest") this.destConnected = false;
          this.trouble(side, new RelayError(ErrorCodes.NATS_CONNECT, `${side} region disconnected`));
        }
        if (s.type === "reconnect" && side === "source" && this.silentSource) {
          this.silentSource = false;
          this.leftSilentSource();
        }
        if (s.type === "reconnect" && side === "dest") {
          this.destConnected = true;
          this.destinationWatch.reconnected(); // changes announced while it was away were lost
        }
        // With messages waiting, the first PubAck (pipeline.healthy) says the destination is back;
        // a reconnect alone does not (its stream may still be electing a leader).
        if (s.type === "reconnect" && side === "dest" && this.pipeline.size === 0) this.clear("dest");
      }
    })().catch((err: unknown) => this.logger.warn({ err: toRelayError(err).message }, "status watcher ended"));
  }

  private schedulePoll(): void {
    if (this.abort.signal.aborted) return;
    this.pollTimer = setTimeout(() => {
      this.probe
        .read()
        .then(async (reading) => {
          // A reading that comes back after stop() writes nothing: a removed link's series stay gone.
          if (this.abort.signal.aborted) return;
          // Unknown, or changed and not readable yet (deleted): read again every poll.
          if (!this.destinationKnown || this.pipeline.destinationHeld) await this.recheckDestination();
          if (this.abort.signal.aborted) return;
          this.pipeline.keepAlive();
          this.deps.metrics.inFlightBytes.set({ link: this.name }, this.pipeline.bytes);
          this.window.holding(this.pipeline.size, this.pipeline.bytes);
          this.backlog = reading;
          const labels = { link: this.name };
          this.deps.metrics.backlogMessages.set(labels, reading.messages);
          this.deps.metrics.backlogAge.set(labels, reading.ageSeconds);
          this.observeClock(reading.clockOffsetMs);
          if (this.troubles.has("source")) this.clear("source");
          this.stallWatch.observe(reading, this.delivered, this.stallEligible());
          if (!this.standby && this.deps.lease.valid() && !this.resyncing) {
            this.window.observe({
              held: this.pipeline.size,
              heldBytes: this.pipeline.bytes,
              // Published and waiting for the PubAck, or all of it while the destination fails or refuses.
              awaitingDestination: this.troubles.has("dest") || this.troubles.has("refused") ? this.pipeline.size : this.publisher.inFlight,
              sourcePending: reading.pending,
            });
          }
          // Missed heartbeats said stalled: the source answers again and has nothing for the link.
          if (this.troubles.has("stalled") && this.stallWatch.stalled === undefined && reading.pending === 0) this.clear("stalled");
          // Connected again with nothing left to publish: no PubAck will come to say so.
          if (this.troubles.has("dest") && this.destConnected && this.destinationKnown && this.pipeline.size === 0) this.clear("dest");
          // A refusal is about a message held; with none held (published since, or dropped for another
          // owner), nothing is refused now.
          if (this.troubles.has("refused") && this.pipeline.size === 0) this.clear("refused");
          // Only the owner acts on a reading: a standby's would be queued and run, stale, when it takes over.
          if (!this.resyncing && !this.standby && this.deps.lease.valid()) this.inspect(reading);
          this.refreshState();
          this.catchUpLog.observe(this.state.state, reading);
        })
        .catch((err: unknown) => {
          // The consumer's deletion is not always announced to a running pull (no pull request open at
          // that moment); the probe sees it within a second, and the loop places a new cursor.
          if (isApiCode(err, JetStreamApiCodes.ConsumerNotFound) && this.messages && !this.resyncing) {
            this.trouble("source", new RelayError(ErrorCodes.STREAM_NOT_FOUND, `source consumer ${this.deps.config.durableName} not found`));
            this.messages.stop();
          }
          this.logger.debug({ err: toRelayError(err).message }, "backlog probe failed");
        })
        .finally(() => {
          this.guardWatch.poll();
          this.pipeline.resume();
          // A relay in standby has no consumer to read: its state follows the lease (who holds it).
          if (this.standby) this.refreshState();
          this.schedulePoll();
        });
    }, this.deps.pollIntervalMs ?? 1_000);
    this.pollTimer.unref();
  }

  /** The link's own last error (shown in /status beside the pipeline's). */
  private noteError(err: RelayError): void {
    this.lastError = { code: err.code, message: err.message, at: new Date().toISOString() };
  }

  private trouble(kind: Trouble, err: RelayError): void {
    this.noteError(err);
    // The pipeline counts its own publish and guard errors; the link counts the source side's.
    if (kind === "source") this.deps.metrics.errors.inc({ link: this.name, code: err.code });
    if (!this.troubles.has(kind)) this.logger.warn({ side: kind, code: err.code, err: err.message }, "link trouble");
    this.troubles.add(kind);
    this.refreshState();
  }

  private clear(...kinds: Trouble[]): void {
    for (const k of kinds) this.troubles.delete(k);
    this.refreshState();
  }

  /** The state follows from the troubles and the backlog; `failed`/`stopped` are final. */
  private refreshState(): void {
    if (this.abort.signal.aborted) return;
    const reason = this.lastError?.message;
    if (this.standby) {
      const holder = this.deps.lease.holder;
      if (holder !== undefined) return this.state.set("standby", `relay ${holder} owns the link (group lease)`);
      if (!this.deps.lease.isEligible) return this.state.set("standby", "placed on another relay of the group: waiting for it to take the lease");
      // Nobody else owns it: this relay is on its way to (re)take it, e.g. after the region was unreachable.
      return this.state.set(this.state.state === "starting" ? "starting" : "recovering", "waiting for the link lease");
    }
    if (this.resyncing) return this.state.set("resyncing", `resync after ${this.pendingResync ?? "request"}`);
    if (this.troubles.has("guard-state")) return this.state.set("paused", this.guardWatch.lossReason ?? reason);
    if (this.troubles.has("guard") || this.troubles.has("refused") || this.troubles.has("guard-unsafe")) return this.state.set("paused", reason);
    if (this.troubles.has("stalled")) return this.state.set("stalled", this.stallReason ?? reason);
    if (this.troubles.size > 0) return this.state.set("recovering", reason);
    // Just took the link over: at work at once, whatever the last backlog reading (from before) said.
    if (this.tookOver || this.state.state === "standby") {
      this.tookOver = false;
      return this.state.set("catching-up", "this relay owns the link now");
    }
    if (!this.backlog) return;
    this.state.set(this.backlog.pending > this.deps.config.inFlight ? "catching-up" : "live");
  }

  /**
   * Reads the cursor against the source: reports a retention gap (never in silence) and applies the
   * link's `onGap` policy; a backlog older than `maxReplayAge` takes the resync path too.
   */
  private inspect(reading: BacklogReading): void {
    const { config } = this.deps;
    const gap = this.gapDetector.check({ ...reading, highestSeen: this.highestSeen });
    if (gap && !this.gapFound(gap)) return;
    const maxAge = config.maxReplayAgeMs;
    if (maxAge !== undefined && reading.ageSeconds * 1000 > maxAge && reading.pending > 0) {
      this.logger.warn({ backlogAgeSeconds: reading.ageSeconds, maxReplayAgeMs: maxAge }, "backlog older than maxReplayAge: resyncing instead of replaying");
      this.requestResync("max_replay_age");
    }
  }

  /**
   * A lost range, found by a reading or in the deliveries: reported (never in silence) and the link's
   * `onGap` policy applied. False when the link halts: then nothing after the gap is taken.
   */
  private gapFound(gap: Gap): boolean {
    const { config } = this.deps;
    this.gaps.push(gap);
    if (this.gaps.length > 10) this.gaps.shift();
    this.deps.metrics.gapMessages.inc({ link: this.name }, gap.count);
    this.logger.warn(
      { fromSeq: gap.fromSeq, toSeq: gap.toSeq, count: gap.count, exact: gap.exact, policy: config.onGap },
      `the source deleted ${gap.exact ? "" : "up to "}${gap.count} messages the link had not relayed (source seq ${gap.fromSeq}-${gap.toSeq}; retention, or a delete or purge)`,
    );
    if (config.onGap === "halt") {
      this.fail(new RelayError(ErrorCodes.SOURCE_GAP, `source seq ${gap.fromSeq}-${gap.toSeq} (${gap.count} messages) deleted before they were relayed; onGap is halt`));
      return false;
    }
    if (config.onGap === "resync") this.requestResync("gap");
    return true;
  }

  /** The relay's clock against the source region's (measured by the backlog probe): a gauge, and a warning when it is off by 2 s or more. */
  private observeClock(offsetMs: number | undefined): void {
    if (offsetMs === undefined) return;
    this.deps.metrics.sourceClockOffset.set({ link: this.name }, offsetMs / 1000);
    const off = Math.abs(offsetMs) >= 2_000;
    if (off && (this.clockOffsetLogged === undefined || Math.abs(offsetMs - this.clockOffsetLogged) >= 1_000)) {
      this.clockOffsetLogged = offsetMs;
      this.logger.warn(
        { clockOffsetSeconds: offsetMs / 1000, sourceRegion: this.deps.config.from.region },
        `this relay's clock is ${Math.abs(offsetMs / 1000).toFixed(1)} s ${offsetMs > 0 ? "ahead of" : "behind"} the source region's: backlog ages and maxReplayAge are measured on the source's clock`,
      );
    } else if (!off) this.clockOffsetLogged = undefined;
  }

  private requestResync(reason: LinkResyncReason): void {
    if (this.pendingResync || this.resyncing) return;
    this.pendingResync = reason;
    this.messages?.stop(); // the consume loop runs the resync before it consumes again
  }

  /**
   * Runs a resync while this relay owns the link; false when the lease was lost before or during it.
   * Then nothing of it stays: the snapshot messages it held are dropped (they were never acked
   * anywhere), the durable is not moved, and whoever owns the link next inspects the cursor afresh
   * (a resync still needed is requested again, with a new snapshot point).
   */
  private async resync(reason: LinkResyncReason): Promise<boolean> {
    const jsm = this.jsm;
    const owned = this.whileOwned();
    if (!jsm || !owned) {
      this.pendingResync = undefined;
      return !!jsm;
    }
    this.resyncing = true;
    this.refreshState();
    this.deps.metrics.resyncs.inc({ link: this.name, reason });
    try {
      await this.pipeline.drained(owned);
      if (owned.aborted) return this.resyncCut(reason, "before it started");
      const domain = this.deps.sourceRegion.domain;
      const resyncLog = new ResyncLog(this.logger, this.deps.progressIntervalMs ?? 10_000);
      const result = await runResync(
        {
          link: this.cursorConfig(),
          source: this.deps.source,
          jsm,
          ...(domain ? { domain } : {}),
          push: (m, id) => this.pipeline.push(m, id),
          drained: () => this.pipeline.drained(owned),
          signal: owned,
          progress: (id, sent, remaining) => resyncLog.observe(id, sent, remaining),
        },
        // (runResync only names the resync after it.)
        reason as ResyncReason,
      );
      this.gapDetector.skipTo(result.snapshotSeq);
      this.highestSeen = Math.max(this.highestSeen, result.snapshotSeq);
      this.lastResync = { ...result, reason, at: new Date().toISOString() };
      this.logger.info({ resyncId: result.id, messages: result.messages, snapshotSeq: result.snapshotSeq, reason }, "resync done: continuing live");
      if (reason === "guard_state_lost") await this.guardWatch.resynced();
      return true;
    } catch (err) {
      if (!owned.aborted) throw err;
      return this.resyncCut(reason, "midway");
    } finally {
      this.pendingResync = undefined;
      this.resyncing = false;
      this.refreshState();
    }
  }

  private async resyncCut(reason: LinkResyncReason, when: string): Promise<false> {
    if (this.abort.signal.aborted) return false;
    this.deps.metrics.resyncsAbandoned.inc({ link: this.name, reason });
    this.logger.warn({ reason, held: this.pipeline.size }, `resync abandoned ${when}: the link lease was lost (the next owner inspects the cursor again)`);
    await this.dropHeld("a resync cut short by the lease's loss: its snapshot messages are not published late");
    return false;
  }

  private fail(err: RelayError): void {
    this.pipeline.flushAcks(); // finished messages waiting for a cumulative ack get it while the lease holds
    this.noteError(err);
    this.logger.error({ code: err.code, err: err.message }, "link failed");
    this.state.set("failed", err.message);
    this.abort.abort();
    this.destinationWatch.stop();
    this.messages?.stop();
    // Another relay of the group may take the link over (a failure of this process's own making, such
    // as a lost region, is not its); one that fails the same way reports it too. First what was already
    // published gets its PubAck, commit and ack (the lease is checked before each).
    this.releaseAfterFailure().catch((e: unknown) => this.logger.warn({ err: toRelayError(e).message }, "could not release the link lease"));
  }

  private async releaseAfterFailure(): Promise<void> {
    const until = Date.now() + 2 * this.deps.config.publishTimeoutMs;
    while (this.pipeline.unsettled > 0 && Date.now() < until) await sleep(50);
    await this.acksSent();
    await this.deps.lease.stop();
  }
}

/** A stream's creation time in ms since the epoch (its incarnation); undefined if the server did not say. */
function createdMs(info: StreamInfo): number | undefined {
  const ms = Date.parse(info.created);
  return Number.isNaN(ms) ? undefined : ms;
}
