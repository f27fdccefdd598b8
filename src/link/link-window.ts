import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig, MaxRate } from "../config/types.js";
import { toRelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { isApiCode } from "../nats/durable-consumer.js";
import type { RoundTripMeter } from "../nats/round-trips.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { RateCap } from "./rate-cap.js";
import { WAN_RTT_MS, WINDOW_LIMITS, WindowController } from "./window-controller.js";
import type { WindowDecision, WindowLimit } from "./window-controller.js";
import type { ProbeOutcome } from "./window-probe.js";

/** How often the round trip to the source is measured (one PING per connection), and how long a measurement may take. */
const RTT_EVERY_MS = 5_000;
export const RTT_WAIT_MS = 2_000;
/** The path's own round trip is the lowest measured within this span (a backlog queues PINGs behind messages). */
const PATH_RTT_SPAN_MS = 60_000;

/**
 * Where a link's window starts. A guarded link waits for its guard (limit "relay"), so it would not
 * grow: it starts at its cap, where the fixed window used to be. So does a link whose source is across
 * a WAN (`rttMs`, the round trip measured as the cursor is placed, ≥ WAN_RTT_MS): slow start costs a
 * round trip per doubling there, and a backlog across 200 ms spent its first second on it. Others start
 * at two batches and grow while the round trip holds them (slow start, up to LAN_START within a region;
 * rate × RTT × HEADROOM each poll): two batches carry 1,000,000 msgs/s over 1 ms. A window larger than
 * the link needs is not free: every message it holds lives through young-generation GCs, which copy
 * it, and is then promoted. On loopback, a backlog started at 4,096 spent 1.1 s of 5.8 s of relay CPU
 * in scavenges and peaked at 210-240 MB; at two batches 0.7 s and 180-200 MB, at the same rate.
 * The memory is bounded by inFlightBytes whatever the window.
 */
export function initialWindow(
  link: Pick<LinkConfig, "guard" | "inFlight" | "batchSize">,
  rttMs?: number,
): number {
  if (link.guard || (rttMs !== undefined && rttMs >= WAN_RTT_MS)) return link.inFlight;
  return Math.min(link.inFlight, 2 * link.batchSize);
}

/** The window as `/status` shows it. */
export interface WindowStatus {
  /** Messages the source may have delivered and not had acked (the consumer's MaxAckPending, as the server has it). */
  readonly messages: number;
  /** The window asked of the server and not taken yet (its update is being retried). */
  readonly pending?: number;
  /** What holds the link now: rtt, bytes cap, messages cap, destination, relay, idle (or bytes held: inFlightBytes reached). */
  readonly limit: WindowLimit | "bytes held";
  /** The largest window the caps allow now. */
  readonly cap: number;
  readonly rttMs?: number;
  readonly ratePerSec: number;
  /** The window the measured rate needs over the measured round trip (rate × RTT × 2). */
  readonly neededForRtt?: number;
  /** The link's rate cap (maxRate, per second), and the seconds it has held the link so far. */
  readonly maxRate?: MaxRate;
  readonly rateCappedSeconds?: number;
}

export interface LinkWindowDeps {
  readonly config: LinkConfig;
  /** The round trip of the connection to the source, shared by the links on it (round-trips.ts). */
  readonly roundTrip: Pick<RoundTripMeter, "latest">;
  readonly jsm: () => JetStreamManager | undefined;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** The rate cap feeding the window (rate-cap.ts): what it holds counts as held, and its cap is a ceiling. */
  readonly rate: Pick<
    RateCap,
    "maxRate" | "size" | "bytes" | "heldSince" | "heldWithin" | "set" | "cappedSeconds"
  >;
  /** The link stops: a MaxAckPending update being retried gives up. */
  readonly signal?: AbortSignal;
  /**
   * Whether this relay places the link's cursor now (lease valid, not standby): a failed MaxAckPending
   * update is retried only while it does (a new owner's placement carries its own window). Default: always.
   */
  readonly owns?: () => boolean;
}

/** Backoff of a MaxAckPending update the server refused (a consumer leader election, a timeout). */
const UPDATE_RETRY_BASE_MS = 100;
const UPDATE_RETRY_MAX_MS = 5_000;

/**
 * A link's pull window, sized by the window controller (window-controller.ts) and applied as the source
 * consumer's MaxAckPending: the server delivers no more than that many unacked messages, so the window
 * is what may be on the wire plus what the relay holds. The client keeps pulls outstanding up to
 * `inFlight` (the cap), so no batch waits a round trip for the one before it; the window grows while
 * the round trip limits the link and stops at `inFlight` or at `inFlightBytes` over the measured
 * average message size. `inFlightBytes` is also the hard bound on what the relay holds: reached, the
 * window drops to what is held (nothing more is delivered) until half of it is acked.
 *
 * Observed once per poll: the delivery counters, what the relay holds and what of it waits for the
 * destination, the source's backlog and (every 5 s) the round trip; a decision that moves the window
 * by 25 % or more updates the consumer. An update the server refuses (during a consumer leader
 * election, say) is retried with backoff, always with the latest window, until the server has it: the
 * window is recorded as applied, and shown by `/status` and `relay_pull_window_messages`, only once
 * the server took it.
 */
export class LinkWindow {
  private controller: WindowController;
  private delivered = 0;
  private deliveredBytes = 0;
  private rttMs: number | undefined;
  private rttAt = -Infinity;
  /**
   * The lowest round trip measured within PATH_RTT_SPAN_MS (kept until a lower one, or until it is
   * older than that): the path without the queues. On loopback under a backlog a PING waits behind the
   * messages in the socket buffers and reads 10–80 ms; slow start judges LAN or WAN by this one, and
   * whether a round came at the round trip's pace.
   */
  private pathRtt: { readonly ms: number; readonly at: number } | undefined;
  private ratePerSec = 0;
  private neededForRtt: number | undefined;
  private cap: number;
  /** inFlightBytes reached: MaxAckPending is what the relay holds until half is acked. */
  private held = false;
  /** What the consumer's MaxAckPending is now: as the cursor was placed, or as the last update the server took. */
  private applied: number;
  /** The MaxAckPending the link wants (a cursor placed now gets it); updates run until `applied` is this. */
  private wanted: number;
  /** Why `wanted` was set last (logged when the server takes it). */
  private reason: { fields: Record<string, unknown>; msg: string } = { fields: {}, msg: "" };
  /** An update loop is running (one at a time; it always sends the latest `wanted`). */
  private updating = false;
  private observedAt = performance.now();
  /** The event loop's busy time at the last observation: the share since then tells a relay at its CPU limit. */
  private elu = performance.eventLoopUtilization();
  /** The fewest messages held at a delivery since the last observation (the controller's `minHeld`). */
  private minHeld = Infinity;
  /** The most held at a delivery since the last observation (the controller's `maxHeld`). */
  private maxHeld = 0;
  /** The destination's 429 answers counted at the last poll (see `observe`). */
  private pushedBackSeen = 0;
  /**
   * Slow start's round: deliveries since it began and the fewest held at any of them. The first round
   * after the cursor is placed only starts the clock (it began with nothing held).
   */
  private round = { delivered: 0, minHeld: Infinity, first: true, startedAt: 0 };
  /** What the window's gauges show now. */
  private readonly exported: { limit?: string; rttMs?: number | undefined } = {};

  constructor(private readonly deps: LinkWindowDeps) {
    const { config } = deps;
    this.controller = this.newController({});
    this.cap = config.inFlight;
    this.applied = this.controller.window;
    this.wanted = this.applied;
    deps.metrics.pullWindow.set({ link: config.name }, this.controller.window);
  }

  /** The consume options: pulls outstanding up to the cap, refilled a batch at a time. */
  pullOptions(): { max_messages: number; threshold_messages?: number } {
    const { inFlight, batchSize } = this.deps.config;
    const threshold = inFlight - batchSize;
    return threshold > 0
      ? { max_messages: inFlight, threshold_messages: threshold }
      : { max_messages: inFlight };
  }

  /** The MaxAckPending a cursor placed now gets (the window, or what is held while the byte bound holds). */
  get maxAckPending(): number {
    return this.wanted;
  }

  /** inFlightBytes reached, or the rate cap holds the link (or did within the last second). */
  get throttled(): boolean {
    return this.held || this.deps.rate.heldWithin(1_000);
  }

  /**
   * A new rate cap (a reload): the gate and the window's ceiling take it at once; `owner`: the consumer's
   * MaxAckPending follows now (else when this relay places the cursor).
   */
  setMaxRate(maxRate: MaxRate | undefined, owner: boolean): void {
    this.deps.rate.set(maxRate);
    const window = this.controller.setMaxRate(maxRate);
    this.deps.logger.info({ maxRate: maxRate ?? "none", window }, "rate cap changed");
    if (owner && !this.held)
      this.set(window, { maxRate, limit: this.controller.limit }, "pull window resized to the new rate cap");
  }

  /**
   * A delivery arrived, with `sourcePending` more waiting behind it at the source and `held` messages
   * in the relay's pipeline. A window's worth of them ends a round of slow start (`roundTrip`).
   */
  receive(bytes: number, sourcePending: number, held: number): void {
    this.delivered++;
    this.deliveredBytes += bytes;
    if (held < this.minHeld) this.minHeld = held;
    if (held > this.maxHeld) this.maxHeld = held;
    const round = this.round;
    if (held < round.minHeld) round.minHeld = held;
    if (++round.delivered < this.controller.window) return;
    const first = round.first;
    const now = performance.now();
    this.round = { delivered: 0, minHeld: Infinity, first: false, startedAt: now };
    if (first || this.throttled) return;
    const decision = this.controller.roundTrip(
      round.minHeld,
      sourcePending,
      this.pathRtt?.ms,
      now - round.startedAt,
    );
    if (decision?.changed) {
      this.exportLimit(decision.limit);
      this.set(
        decision.window,
        {
          limit: decision.limit,
          minHeld: round.minHeld,
          sourcePending,
          rttMs: this.rttMs,
          pathRttMs: this.pathRtt?.ms,
          cap: decision.cap,
        },
        "pull window doubled: the relay did not hold most of it through a round trip's deliveries (slow start)",
      );
    }
  }

  /**
   * The cursor is about to be placed with `maxAckPending` (a new or read durable carries it). Until the
   * link has measured its own messages, the window's bytes cap comes from what the source says of its
   * sizes: the stream's average message, else the largest it allows (so a window of large messages
   * does not start beyond inFlightBytes). `rttMs`: a round trip to the source timed just before (a
   * flush), which tells a link across a WAN to start at its cap (initialWindow) and stands in until
   * the next PING measures it.
   */
  placed(sizes: { avgMessageBytes?: number; maxMessageBytes?: number } = {}, rttMs?: number): void {
    this.held = false;
    this.round = { delivered: 0, minHeld: Infinity, first: true, startedAt: 0 };
    if (rttMs !== undefined && Number.isFinite(rttMs) && rttMs >= 0 && this.rttMs === undefined)
      this.noteRtt(rttMs);
    if (this.delivered === 0) this.controller = this.newController(sizes);
    // The cursor carries it: an update still being retried ends when it sees `applied` is `wanted`.
    this.applied = this.controller.window;
    this.wanted = this.applied;
    this.deps.metrics.pullWindow.set({ link: this.deps.config.name }, this.applied);
    // `/status` shows the limit and the round trip from here on: so do the metrics.
    this.exportLimit(this.controller.limit);
    this.exportRtt();
  }

  private newController(sizes: { avgMessageBytes?: number; maxMessageBytes?: number }): WindowController {
    const { config } = this.deps;
    return new WindowController({
      capMessages: config.inFlight,
      capBytes: config.inFlightBytes,
      batchSize: config.batchSize,
      initial: initialWindow(config, this.rttMs),
      ...(this.deps.rate.maxRate !== undefined ? { maxRate: this.deps.rate.maxRate } : {}),
      ...(sizes.avgMessageBytes !== undefined && sizes.avgMessageBytes > 0
        ? { avgMessageBytes: sizes.avgMessageBytes }
        : {}),
      ...(sizes.maxMessageBytes !== undefined && sizes.maxMessageBytes > 0
        ? { maxMessageBytes: sizes.maxMessageBytes }
        : {}),
    });
  }

  /**
   * The relay's holdings changed: the byte bound (inFlightBytes) is checked at every delivery and poll.
   * Reached, MaxAckPending drops to what is held; below half, it returns to the window.
   */
  holding(pipelineSize: number, pipelineBytes: number): void {
    // What the rate cap holds is held too (received, not acked).
    const size = pipelineSize + this.deps.rate.size;
    const bytes = pipelineBytes + this.deps.rate.bytes;
    const bound = this.deps.config.inFlightBytes;
    if (!this.held && bytes >= bound) {
      this.held = true;
      this.set(
        Math.max(1, size),
        { bytes, inFlightBytes: bound },
        "in-flight bytes at the bound: the source delivers no more until half is acked",
      );
    } else if (this.held && bytes < bound / 2) {
      this.held = false;
      this.set(
        this.controller.window,
        { bytes, inFlightBytes: bound },
        "in-flight bytes below half the bound: delivery resumes",
      );
    }
  }

  /** One poll: sizes the window from what the link did since the last one (owner only). */
  observe(now: {
    held: number;
    heldBytes: number;
    awaitingDestination: number;
    sourcePending: number;
    /**
     * 429 answers from the destination so far (cumulative): more than at the last poll shrinks the window
     * now; fewer means the count started again (a new pipeline), and any of it is new.
     */
    pushedBack?: number;
  }): void {
    const n = now.pushedBack;
    const pushedBack = n !== undefined && (n > this.pushedBackSeen || (n < this.pushedBackSeen && n > 0));
    if (now.pushedBack !== undefined) this.pushedBackSeen = now.pushedBack;
    this.measureRtt();
    const since = this.observedAt;
    this.observedAt = performance.now();
    const elu = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(elu, this.elu).utilization;
    this.elu = elu;
    const decision = this.controller.observe({
      busy,
      rateCapped: this.deps.rate.heldSince(since),
      pushedBack,
      nowMs: performance.now(),
      rttMs: this.rttMs,
      delivered: this.delivered,
      deliveredBytes: this.deliveredBytes,
      held: now.held,
      minHeld: Math.min(this.minHeld, now.held),
      maxHeld: Math.max(this.maxHeld, now.held),
      heldBytes: now.heldBytes,
      awaitingDestination: now.awaitingDestination,
      sourcePending: now.sourcePending,
    });
    this.minHeld = Infinity;
    this.maxHeld = 0;
    this.ratePerSec = decision.ratePerSec;
    this.neededForRtt = decision.neededForRtt;
    this.cap = decision.cap;
    // Exported when they change: a series set is a label hash and an object each (a thousand links poll).
    this.exportLimit(decision.limit);
    this.exportRtt();
    if (decision.probe !== undefined) this.probed(decision, decision.probe);
    if (!decision.changed || this.held) return;
    this.set(
      decision.window,
      {
        limit: decision.limit,
        ratePerSec: Math.round(decision.ratePerSec),
        rttMs: this.rttMs,
        neededForRtt: decision.neededForRtt,
        cap: decision.cap,
        ...(decision.probe !== undefined ? { probe: decision.probe } : {}),
      },
      "pull window resized",
    );
  }

  /** A probe of a larger window (window-probe.ts): counted, and logged when it ends. */
  private probed(decision: WindowDecision, outcome: ProbeOutcome): void {
    this.deps.metrics.pullWindowProbes.inc({ link: this.deps.config.name, outcome });
    if (outcome === "started") return; // "pull window resized" says so
    this.deps.logger.info(
      { limit: decision.limit, maxAckPending: decision.window, ratePerSec: Math.round(decision.ratePerSec) },
      outcome === "kept"
        ? "pull window probe kept: the larger window moved more (the window, not the relay or the destination, held the link)"
        : "pull window probe undone: the larger window moved no more",
    );
  }

  private exportRtt(): void {
    if (this.rttMs !== undefined && this.rttMs !== this.exported.rttMs)
      this.deps.metrics.sourceRtt.set({ link: this.deps.config.name }, this.rttMs / 1000);
    this.exported.rttMs = this.rttMs;
  }

  private exportLimit(limit: WindowLimit): void {
    if (limit === this.exported.limit) return;
    const link = this.deps.config.name;
    for (const l of WINDOW_LIMITS) this.deps.metrics.windowLimit.set({ link, limit: l }, l === limit ? 1 : 0);
    this.exported.limit = limit;
  }

  status(): WindowStatus {
    return {
      messages: this.applied,
      ...(this.wanted !== this.applied ? { pending: this.wanted } : {}),
      limit: this.held ? "bytes held" : this.controller.limit,
      cap: this.cap,
      ...(this.rttMs !== undefined ? { rttMs: Math.round(this.rttMs * 10) / 10 } : {}),
      ratePerSec: Math.round(this.ratePerSec),
      ...(this.neededForRtt !== undefined ? { neededForRtt: this.neededForRtt } : {}),
      ...(this.deps.rate.maxRate !== undefined
        ? {
            maxRate: this.deps.rate.maxRate,
            rateCappedSeconds: Math.round(this.deps.rate.cappedSeconds * 10) / 10,
          }
        : {}),
    };
  }

  private measureRtt(): void {
    const now = performance.now();
    if (now - this.rttAt < RTT_EVERY_MS) return;
    this.rttAt = now;
    this.deps.roundTrip.latest(RTT_EVERY_MS).then(
      (ms) => this.noteRtt(ms),
      () => undefined, // kept: a lost PING is the connection watchdog's business
    );
  }

  private noteRtt(ms: number): void {
    this.rttMs = ms;
    const now = performance.now();
    const path = this.pathRtt;
    if (path === undefined || ms <= path.ms || now - path.at > PATH_RTT_SPAN_MS)
      this.pathRtt = { ms, at: now };
  }

  /**
   * Sets the consumer's MaxAckPending: one update at a time, the latest window wins, a refused update
   * is retried with backoff while this relay places the cursor and the link runs.
   */
  private set(max: number, fields: Record<string, unknown>, msg: string): void {
    if (max === this.wanted) return;
    this.wanted = max;
    this.reason = { fields, msg };
    if (this.updating) return; // the running loop sends it next
    this.update().catch((err: unknown) => {
      // update() catches the server's refusals itself: this is a bug, logged rather than left floating.
      this.deps.logger.error({ err: toRelayError(err).message }, "MaxAckPending update loop failed");
    });
  }

  private async update(): Promise<void> {
    const { config, logger, metrics, signal } = this.deps;
    const link = config.name;
    const backoff = new Backoff(UPDATE_RETRY_BASE_MS, UPDATE_RETRY_MAX_MS);
    this.updating = true;
    try {
      while (this.wanted !== this.applied) {
        if (signal?.aborted || !(this.deps.owns?.() ?? true)) return;
        const jsm = this.deps.jsm();
        const max = this.wanted;
        if (!jsm) {
          // No consumer yet: the placement creates it with the window.
          this.apply(max);
          return;
        }
        const { fields, msg } = this.reason;
        try {
          await jsm.consumers.update(config.from.stream, config.durableName, { max_ack_pending: max });
          this.apply(max);
          backoff.reset();
          logger.info({ ...fields, maxAckPending: max }, msg);
        } catch (err) {
          metrics.pullWindowUpdateFailures.inc({ link });
          const retryMs = backoff.next();
          logger.warn(
            {
              ...fields,
              maxAckPending: max,
              serverMaxAckPending: this.applied,
              attempt: backoff.attempts,
              retryMs,
              err: toRelayError(err).message,
            },
            "could not change the consumer's MaxAckPending: retrying",
          );
          // Gone (deleted, or its stream): the placement that re-creates it carries the window.
          if (
            isApiCode(err, JetStreamApiCodes.ConsumerNotFound) ||
            isApiCode(err, JetStreamApiCodes.StreamNotFound)
          )
            return;
          await sleep(retryMs, signal);
        }
      }
    } finally {
      this.updating = false;
    }
  }

  /** The server has `max` as the consumer's MaxAckPending. */
  private apply(max: number): void {
    this.applied = max;
    this.deps.metrics.pullWindow.set({ link: this.deps.config.name }, max);
  }
}
