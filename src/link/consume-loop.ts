/**
 * The link's message path from the source: a loop that, while this relay owns the link, places the
 * durable cursor (ordered recovery), pulls through the window and feeds each delivery to the pipeline in
 * source order; re-created with backoff after any trouble on the source side.
 */
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerMessages, JetStreamManager, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, toRelayError } from "../errors.js";
import type { RelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { withDeadline } from "../lifecycle/deadline.js";
import { toDelivery } from "../nats/delivery.js";
import type { Delivery } from "../nats/delivery.js";
import type { RelayMetrics } from "../observability/metrics.js";
import { classifyJsError } from "../nats/durable-consumer.js";
import type { BacklogProbe } from "./backlog.js";
import { healConsumer } from "./consumer-heal.js";
import { destSubjectsOf, positionCursor } from "./cursor.js";
import type { HealedConsumer, Placement } from "./cursor.js";
import type { PositionStore } from "../group/link-position.js";
import { DeliveryOrder } from "./delivery-order.js";
import { LinkStart } from "./start-at.js";
import type { DestinationCheck } from "./destination-check.js";
import type { GuardWatch } from "./guard-watch.js";
import type { LinkWatch } from "./link-watch.js";
import type { LinkWindow } from "./link-window.js";
import type { OperatorPause } from "./operator-pause.js";
import type { Ownership } from "./ownership.js";
import type { RateCap } from "./rate-cap.js";
import type { ResyncRunner } from "./resync-runner.js";
import type { SourceInspector } from "./source-inspector.js";
import { SkipRecovery } from "./skip-recovery.js";
import type { SourceStream } from "./source-stream.js";
import type { StallStep } from "./stall-watch.js";

/** Lifetime of one pull request (ms). */
const PULL_EXPIRES_MS = 5_000;
const IDLE_HEARTBEAT_MS = 1_000;

/** What the loop needs of the pipeline. */
export interface DeliverySink {
  readonly size: number;
  readonly bytes: number;
  push(msg: Delivery): void;
  cursorMoved(): void;
  setStoredInDestination(stored: ReadonlyMap<number, number>, upToSourceSeq: number, heldUpToSourceSeq: number): void;
}

export interface ConsumeLoopDeps {
  readonly config: LinkConfig;
  readonly source: NatsConnection;
  /** JetStream domain of the source region, when it has one. */
  readonly sourceDomain: string | undefined;
  readonly dest: NatsConnection;
  /** JetStream domain of the destination region, when it has one. */
  readonly destDomain: string | undefined;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  /** How long to wait before asking an unverified guard again (ms). */
  readonly pollIntervalMs: number;
  readonly pipeline: DeliverySink;
  readonly ownership: Pick<Ownership, "handingOver" | "handOver" | "holdLease" | "drainWhileOwned">;
  readonly guard: Pick<GuardWatch, "ready" | "verified" | "verify">;
  readonly sourceStream: Pick<SourceStream, "read" | "ref" | "sizes" | "info">;
  readonly destination: Pick<DestinationCheck, "refresh">;
  readonly window: Pick<LinkWindow, "placed" | "pullOptions" | "receive" | "holding">;
  readonly probe: Pick<BacklogProbe, "read">;
  readonly inspector: Pick<SourceInspector, "placed" | "delivered" | "gone" | "observeClock" | "inspect" | "highestSeen" | "needsReference">;
  readonly resync: Pick<ResyncRunner, "pending" | "run">;
  readonly watch: Pick<LinkWatch, "watchConsumer">;
  readonly metrics: Pick<RelayMetrics, "skipsReadBack">;
  /** An operator's pause (operator-pause.ts): nothing is pulled while it holds. */
  readonly operator?: Pick<OperatorPause, "holding" | "changed">;
  /** The rate cap (rate-cap.ts): deliveries go to the pipeline through it, in order, at the capped rate. */
  readonly rate: Pick<RateCap, "offer" | "clear">;
  /** The link's checkpoint and an operator's explicit start (group/link-position.ts). */
  readonly positions?: PositionStore;
  /** Destination messages a scan without a checkpoint reads at most (default cursor.ts MAX_SCAN). */
  readonly maxScan?: number;
  /** This relay holds the link's lease. */
  owns(): boolean;
  /** The link failed (final): nothing more is taken. */
  failed(): boolean;
  /** The link's config as its cursor is created with (the window as MaxAckPending). */
  cursorConfig(): LinkConfig;
  readonly events: {
    /** The source side is in trouble (retried with backoff). */
    trouble(err: RelayError): void;
    /** The pull runs: no trouble on the source side. */
    consuming(): void;
    /** A delivery arrived: the source answers. */
    delivering(): void;
    fail(err: RelayError): void;
    /** A consumer that was gone was created again, placed by `from` (or could not be: `unknown`). */
    placed(from: Placement | "unknown"): void;
  };
}

export class ConsumeLoop {
  private manager: JetStreamManager | undefined;
  private messages: ConsumerMessages | undefined;
  private deliveries = 0;
  /** Cursors placed (a pass of the loop that reached its consumer). */
  private placements = 0;
  private readonly order: DeliveryOrder;
  /** Where the link first started in this process (startAt), for a consumer lost before it has a record. */
  private readonly start = new LinkStart();
  /** The consumer a heal deleted, as it was: the next placement starts at its ack floor + 1. */
  private healed: HealedConsumer | undefined;
  /** What the consumer jumped over, read back before it is taken for a loss (skip-recovery.ts). */
  private readonly skips: SkipRecovery;

  constructor(private readonly deps: ConsumeLoopDeps) {
    this.order = new DeliveryOrder({ logger: deps.logger, highestSeen: () => deps.inspector.highestSeen, stopPulling: () => this.stopPulling() });
    this.skips = new SkipRecovery({
      config: deps.config,
      logger: deps.logger,
      signal: deps.signal,
      metrics: deps.metrics,
      jsm: () => this.manager,
      owns: () => deps.owns() && !deps.failed(),
      room: () => deps.pipeline.size < deps.config.inFlight,
      take: (d) => this.take(d),
      gone: (fromSeq, toSeq) => deps.inspector.gone(fromSeq, toSeq),
      fail: (err) => deps.events.fail(err),
    });
  }

  /** The source's JetStream manager, once the loop has one. */
  get jsm(): JetStreamManager | undefined {
    return this.manager;
  }

  /** A pull was started (at some point: it may have stopped since). */
  get pulled(): boolean {
    return this.messages !== undefined;
  }

  /** Deliveries received (progress for the stall watch). */
  get delivered(): number {
    return this.deliveries;
  }

  /** Grows with every delivery and every cursor placed (the checkpoint's sign that the position may have moved). */
  get activity(): number {
    return this.deliveries + this.placements;
  }

  /** Stops the current pull: the loop acts on whatever asked for it before it pulls again. */
  stopPulling(): void {
    this.messages?.stop();
  }

  async run(): Promise<void> {
    const { config, source, signal, ownership, guard, pipeline, window, inspector, resync, events } = this.deps;
    const backoff = new Backoff(250, 5_000);
    const domain = this.deps.sourceDomain;
    const js = jetstream(source, domain ? { domain } : {});
    await guard.ready;
    while (!signal.aborted && !this.deps.failed()) {
      // The pull ended: a read-back under way finishes first (the server no longer holds what it reads
      // for redelivery); what waited for it and what the rate cap held stay unacked, and the cursor
      // placed below puts them first.
      await this.skips.settled();
      this.deps.rate.clear();
      if (ownership.handingOver) await ownership.handOver();
      if (!(await ownership.holdLease())) return;
      // Paused by an operator (or not known yet): what the pipeline holds finishes by itself; nothing
      // more is pulled, so the rest stays in the source consumer. Resumed, the loop pulls at once.
      if (this.deps.operator?.holding) {
        await this.deps.operator.changed(AbortSignal.any([signal, AbortSignal.timeout(this.deps.pollIntervalMs)]));
        continue;
      }
      try {
        this.manager ??= await jetstreamManager(source, domain ? { domain, checkAPI: false } : { checkAPI: false });
        const readFrom = performance.now();
        await this.deps.sourceStream.read(this.manager);
        const readMs = performance.now() - readFrom;
        if (!guard.verified) {
          // Not a message moves before the guard's memory is known to be there (or a loss accepted).
          await guard.verify("start");
          if (!guard.verified) {
            await sleep(this.deps.pollIntervalMs, signal);
            continue;
          }
        }
        await this.deps.destination.refresh();
        if (this.deps.failed() || signal.aborted) return;
        // Whatever the pipeline holds is finished before the cursor is placed, however long that takes
        // (nothing else can move meanwhile): only an empty pipeline can tell which of the consumer's
        // ack-pending messages nobody holds any more — deliveries dropped when the pull stopped, lost
        // on the wire, or taken by an ex-owner's late pull. The server would redeliver those after
        // their ack wait, behind newer messages; placing the cursor with nothing held moves it back
        // to the ack floor instead, so they go first (ordered recovery).
        if (pipeline.size > 0 && !(await ownership.drainWhileOwned())) continue;
        // The last cumulative ack is at the server before the consumer's ack-pending count is read.
        const flushedFrom = performance.now();
        await withDeadline(source.flush(), config.publishTimeoutMs, "source flush", signal);
        // The cursor carries the window as its MaxAckPending (nothing is held now: no byte bound). The
        // flush (a PING and its PONG) and the stream read each took at least a round trip: the shorter
        // tells a link across a WAN where to start (two, so one stall of this process is not a WAN).
        window.placed(this.deps.sourceStream.sizes(), Math.min(readMs, performance.now() - flushedFrom));
        const healed = this.healed;
        const position = await positionCursor(
          {
            link: this.deps.cursorConfig(),
            jsm: this.manager,
            dest: this.deps.dest,
            logger: this.deps.logger,
            signal,
            start: this.start,
            ...(this.deps.destDomain ? { destDomain: this.deps.destDomain } : {}),
            ...(this.deps.positions ? { positions: this.deps.positions } : {}),
            ...(this.deps.maxScan ? { maxScan: this.deps.maxScan } : {}),
            ...(healed ? { healed } : {}),
            destSubjects: destSubjectsOf(config, this.deps.sourceStream.info) ?? [],
          },
          this.deps.sourceStream.ref(),
          true,
        );
        if (this.healed === healed) this.healed = undefined;
        if (position.placedBy) events.placed(position.placedBy);
        if (position.created || position.repositioned) pipeline.cursorMoved();
        // The next delivery must be the one after what the consumer has delivered (1 for a new or
        // moved cursor): anything later means deliveries went elsewhere, and they go first.
        this.order.placed(position.info.delivered.consumer_seq);
        this.placements++;
        if (position.repositioned) pipeline.setStoredInDestination(position.stored, position.storedUpTo, position.heldUpTo);
        const checkpoint = inspector.needsReference ? await this.deps.positions?.checkpoint().catch(() => undefined) : undefined;
        const skipped = inspector.placed({
          startSeq: position.startSeq,
          created: position.created,
          deliveredStreamSeq: position.info.delivered.stream_seq,
          skippedTo: position.skippedTo,
          // What the consumer will not deliver again (deliveries it forgot made the cursor move back).
          ackFloor: position.startSeq !== undefined ? position.startSeq - 1 : position.info.ack_floor.stream_seq,
          checkpointSeq: checkpoint && checkpoint.sourceCreatedMs === this.deps.sourceStream.ref().createdMs ? checkpoint.sourceSeq : undefined,
        });
        // The server moved the ack floor over messages this relay was never delivered: what the stream
        // still holds of them goes first.
        if (skipped) await this.skips.readBack(skipped.fromSeq, skipped.toSeq).catch((err: unknown) => events.fail(toRelayError(err)));
        if (this.deps.failed() || signal.aborted) return;
        // Before consuming: once delivery resumes, the server skips deleted messages without a trace.
        // (A consumer created from the start of the stream, or at startAt new or a time, has no cursor
        // to compare yet: its first delivery sets it.)
        if (!position.created || position.startSeq !== undefined) {
          const reading = await this.deps.probe.read();
          inspector.observeClock(reading.clockOffsetMs);
          inspector.inspect(reading);
        }
        // A resync the lease's loss cut short moved nothing: back to waiting for the lease.
        const pendingResync = resync.pending;
        if (pendingResync && !(await resync.run(pendingResync))) continue;
        if (this.deps.failed() || signal.aborted) return;
        const consumer = await js.consumers.get(config.from.stream, config.durableName);
        if (signal.aborted) return;
        if (ownership.handingOver) continue; // placement moved the link meanwhile
        if (this.deps.operator?.holding) continue; // paused while the cursor was placed
        const messages = await consumer.consume({
          ...window.pullOptions(),
          // Pull requests expire after 5 s (heartbeats every 2.5 s): a pull left on a consumer leader
          // that died is replaced within seconds, not the client's default 30 s.
          expires: PULL_EXPIRES_MS,
          // A heartbeat a second while no message comes: two missed and the link says `stalled`
          // within seconds of a silent path (the connection's PINGs then leave it).
          idle_heartbeat: IDLE_HEARTBEAT_MS,
          // Heartbeats missing, the client pulls again at once, every heartbeat, rather than asking
          // for the consumer's info first: that waits on the consumer's leader, and a hung leader made
          // each try wait out its timeout (5 s) and a backoff (2.5-7.5 s), so the flow resumed up to
          // 12.5 s after a new leader was elected. A pull reaches whichever node leads. A consumer that
          // vanished is still found: pulls waiting on it end with 409 (consumer_deleted), and the
          // backlog poll reads its info (at rest: once its stream's consumer count changed; backlog-poll.ts).
          bind: true,
          callback: (m: JsMsg) => this.onMessage(m),
        });
        this.messages = messages;
        // Paused, or placement moved the link, while the pull started.
        if (this.deps.operator?.holding || ownership.handingOver) messages.stop();
        backoff.reset();
        events.consuming();
        this.deps.watch.watchConsumer(messages).catch((err: unknown) => this.deps.logger.debug({ err: toRelayError(err).message }, "consumer status watcher ended"));
        await messages.closed();
      } catch (err) {
        if (signal.aborted) return;
        const relayErr = classifyJsError(err, `link ${config.name}: source ${config.from.region}/${config.from.stream}`);
        if (relayErr.code === ErrorCodes.CONFIG_INVALID) throw relayErr;
        if (relayErr.code === ErrorCodes.POSITION_UNKNOWN) {
          // Not retried: the position will not become known by itself (DESIGN §11).
          events.placed("unknown");
          events.fail(relayErr);
          return;
        }
        events.trouble(relayErr);
        await sleep(backoff.next(), signal);
      }
    }
  }

  /** One healing step for a stalled link (stall-watch.ts decides which and when). */
  async heal(step: StallStep): Promise<void> {
    const { config } = this.deps;
    if (step === "pull") {
      this.messages?.stop(); // the consume loop pulls again
      return;
    }
    if (step === "consumer") {
      // Rewound to its ack floor + 1 (consumer-heal.ts): the position the relay knows, never thrown away
      // with the consumer (a scan of a busy destination may not reach the link's last record).
      const jsm = this.manager;
      if (!jsm) return;
      const heal = await healConsumer(jsm, config, this.deps.sourceStream.ref().createdMs, this.deps.logger);
      if (!heal.reset) this.healed = heal.healed;
      this.messages?.stop();
      return;
    }
    await this.deps.source.reconnect();
  }

  private onMessage(m: JsMsg): void {
    if (!this.deps.owns()) {
      // An ex-owner's pull (a process woken from a pause before its lease timer fired): it takes
      // nothing. The delivery stays ack-pending at the source; the owner sees the gap in the
      // consumer's sequence and moves the cursor back, so it goes first.
      this.messages?.stop();
      return;
    }
    if (this.deps.failed()) return; // halted (a gap, onGap halt): nothing after it is taken
    if (this.deps.operator?.holding) {
      // Paused: a delivery of the pull being stopped is not taken. It stays ack-pending at the source
      // and goes first when the link resumes (the cursor is placed again with nothing held).
      this.messages?.stop();
      return;
    }
    this.deliveries++;
    this.deps.events.delivering();
    try {
      const delivery = toDelivery(m);
      if (this.order.deliveriesLost(delivery)) return;
      this.intake(delivery, false);
    } catch (err) {
      this.deps.events.fail(toRelayError(err)); // a bug: stop rather than ack something we did not handle
    }
  }

  /**
   * A delivery in source order: inspected for a jump over what the source lost (unless `inspected`),
   * then taken; one that comes while a jump is read back waits for it.
   */
  private intake(delivery: Delivery, inspected: boolean): void {
    if (this.skips.holding) {
      this.skips.offer(delivery);
      return;
    }
    if (!inspected) {
      const verdict = this.deps.inspector.delivered(delivery.streamSequence, delivery.deliveryCount === 1);
      if (verdict === "halt") return;
      if (verdict !== "take") {
        this.skips.hold(verdict.fromSeq, verdict.toSeq, delivery, (queued) => {
          queued.forEach((d, i) => {
            if (!this.deps.failed()) this.intake(d, i === 0);
          });
        });
        return;
      }
    }
    this.take(delivery);
  }

  /** Into the pipeline now, or once the rate cap allows. */
  private take(delivery: Delivery): void {
    const { pipeline, window } = this.deps;
    this.deps.rate.offer(delivery);
    // The delivery's copy: the client's `data` getter makes a new view of its buffer on every read.
    window.receive(delivery.data.length, delivery.pending, pipeline.size);
    window.holding(pipeline.size, pipeline.bytes);
  }
}
