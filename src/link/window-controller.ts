/**
 * Sizes a link's pull window by itself, as TCP sizes its congestion window (and as native JetStream
 * sourcing keeps enough in flight), so a link across a 200–300 ms round trip is not held to one batch
 * per round trip.
 *
 * The window is the source consumer's MaxAckPending: the server delivers no more than that many unacked
 * messages, so the window covers what is on the wire (≈ rate × RTT, the bandwidth-delay product) plus
 * what the relay holds (received, not acked). A link whose window is smaller than rate × RTT moves one
 * window per round trip, whatever the source and destination could do.
 *
 * Once a second the caller reports cumulative counters; the controller takes the delivery rate from
 * them and decides, from where the window sits:
 *  - "rtt": the source has a backlog and the relay holds less than half the window (the rest is on the
 *    wire). While the window is below rate × RTT × HEADROOM (2) it doubles each observation (slow start:
 *    when the window is what limits, rate × RTT ≈ window, so doubling is what covers it; with part of it
 *    held in the relay it grows to rate × RTT × 2, at least ×1.25); once it covers that it stays. Without
 *    any RTT measured it grows on the backlog signal alone (as far as the caps).
 *  - "messages cap" / "bytes cap": growth (or a byte budget that got smaller) stopped at capMessages, or
 *    at capBytes over the *measured* average message size (an EWMA of delivered bytes per message; the
 *    worst-case max size only stands in before anything was delivered, if given). The bytes cap moves in
 *    steps of ≥ 10 %, so a converging average does not nudge MaxAckPending every second.
 *  - "destination": the relay holds at least half the window (now, and at every delivery since the
 *    last observation: `minHeld`) and at least half of that awaits the destination. After
 *    DESTINATION_PERSIST observations in a row (with a backlog) the window shrinks by SHRINK (×0.75), at
 *    most once per DESTINATION_PERSIST observations and not below rate × RTT × 2, so a slow or refusing
 *    destination does not keep a large window waiting past the ack wait. If the rate completed
 *    (delivered − held) falls after a shrink, the destination was merely far (latency-bound): the shrink
 *    is undone, and no shrink goes below that while the destination limits (no downward spiral).
 *  - "relay": the relay holds at least half the window (throughout) but little of it awaits the
 *    destination (guard, CPU), or its event loop was busy BUSY (90 %) of the time since the last
 *    observation: a larger window would only queue more inside.
 *  - In either of the two above, with a backlog and the loop not BUSY, a probe: the window is tried ×1.5
 *    for one observation and kept only if it moved more (window-probe.ts).
 *  - "rtt" too when the window filled at some delivery since the last observation (`maxHeld`), though
 *    the relay did not hold most of it throughout and its loop was not BUSY: under load a message's
 *    cycle (round trip, the relay's work, the PubAck, the ack) runs far longer at its peaks than the
 *    PING says, and what reached the source meanwhile waited there: the link's lag. It doubles (within
 *    a region up to LAN_START), backlog at the moment or not.
 *  - "idle": no backlog at the source (caught up). The window is kept (TCP keeps cwnd too): the next burst
 *    starts with it.
 *  - "rate cap": the link's maxRate (rate-cap.ts) held deliveries since the last observation: no growth
 *    (the link gets all the cap allows). The cap is also a ceiling: the window never exceeds what the
 *    cap needs, max(rate × 1 s, rate × RTT × HEADROOM) (bytes over the average message), so the first
 *    window is at most that burst and nothing waits behind the cap much longer than that.
 * Between observations the window also grows per round trip while the round trip limits (`roundTrip`:
 * slow start), so a backlog across 300 ms reaches the cap in a round or two, not in seconds; a round
 * that took much longer than the path's round trip was paced by something else, and does not grow it.
 * The window never goes below batchSize (one pull) nor above max(batchSize, caps). `changed` is true only
 * when the window moved by ≥ 25 % or reached/left a cap or the batchSize floor; smaller moves are not
 * taken at all, so `window` is always what the caller last applied (MaxAckPending updates stay rare).
 *
 * Pure: no timers, no I/O, no globals; all time comes from the samples.
 */
import type { MaxRate } from "../config/types.js";
import { WindowProbe } from "./window-probe.js";
import type { ProbeOutcome } from "./window-probe.js";

/** What holds a link's window where it is (see the module comment). */
export const WINDOW_LIMITS = ["rtt", "bytes cap", "messages cap", "destination", "relay", "idle", "rate cap"] as const;
export type WindowLimit = (typeof WINDOW_LIMITS)[number];

export interface WindowSample {
  /** Monotonic ms. */
  readonly nowMs: number;
  /** Round trip to the source server (nc.rtt()), undefined if unknown (the last known one is kept). */
  readonly rttMs: number | undefined;
  /** Cumulative deliveries received from the source. */
  readonly delivered: number;
  /** Cumulative bytes of those deliveries. */
  readonly deliveredBytes: number;
  /** Messages the relay holds now (received, not acked yet). */
  readonly held: number;
  /**
   * The fewest it held at any delivery since the previous observation (default: held). A window the
   * round trip limits arrives in bursts, one window per round trip: the relay holds most of it right
   * after a burst and little before the next, so a sample taken at a burst says nothing about who
   * limits. A relay (or destination) that limits holds most of the window all the time.
   */
  readonly minHeld?: number;
  /**
   * The most it held at any delivery since the previous observation (default: held). At FILLED of the
   * window the server had stopped delivering: whatever reached the source meanwhile waited for an ack.
   */
  readonly maxHeld?: number;
  readonly heldBytes: number;
  /** Of those, published and waiting for the destination's PubAck, or waiting to be published because the destination is slow/refusing. */
  readonly awaitingDestination: number;
  /** Messages waiting at the source (consumer num_pending). */
  readonly sourcePending: number;
  /** The link's rate cap held deliveries since the previous observation (rate-cap.ts). */
  readonly rateCapped?: boolean;
  /**
   * The destination answered 429 since the previous observation (its ingest queue was full): the window
   * shrinks now, as TCP's does on a loss, without waiting for the destination to hold it.
   */
  readonly pushedBack?: boolean;
  /**
   * The share of the time since the last sample the relay's event loop was busy (0-1): at BUSY or more
   * the relay is what limits, however little it holds (its CPU cannot take more; on loopback what it
   * has not read yet waits in the socket buffers, where it looks like a window on the wire).
   */
  readonly busy?: number;
}

export interface WindowDecision {
  readonly window: number;
  readonly limit: WindowLimit;
  /** The window moved (≥ 25 %, or onto/off a cap or the batchSize floor): apply it as MaxAckPending. */
  readonly changed: boolean;
  /** Deliveries per second since the previous observation (0 on the first one). */
  readonly ratePerSec: number;
  /** rate × RTT × HEADROOM: the window this rate needs over this round trip (undefined without an RTT). */
  readonly neededForRtt: number | undefined;
  /** The largest window allowed now: max(batchSize, min(capMessages, capBytes / avgMessageBytes)). */
  readonly cap: number;
  /** The measured average message size (EWMA), else the prior given; undefined when neither. */
  readonly avgMessageBytes: number | undefined;
  /** A probe of a larger window (window-probe.ts) started, was kept, or was undone at this observation. */
  readonly probe?: ProbeOutcome;
}

export interface WindowControllerOptions {
  /** The most messages the window may hold (MaxAckPending ceiling). */
  readonly capMessages: number;
  /** The most bytes the window may hold, divided by the measured average message size. */
  readonly capBytes: number;
  /** One pull; the window never goes below it. */
  readonly batchSize: number;
  /** The starting window (default 2 × batchSize), clamped to [batchSize, cap]. */
  readonly initial?: number;
  /** A prior for the average message size until deliveries are measured (e.g. the stream's bytes / messages). */
  readonly avgMessageBytes?: number;
  /** The worst case (stream max_msg_size or max_payload), used for the bytes cap only before anything was measured and without avgMessageBytes. */
  readonly maxMessageBytes?: number;
  /** The link's rate cap: the window stops at what it needs (see "rate cap" in the module comment). */
  readonly maxRate?: MaxRate;
}

/** A round trip (ms) at or above which the source is across a WAN (`check --live` warns from here too). */
export const WAN_RTT_MS = 10;

/**
 * The most a link within a region (round trip under WAN_RTT_MS) starts with, and the most slow start
 * grows it to there: 4096 messages carry 400,000 msgs/s over 10 ms. On loopback a backlog looks like a
 * window on the wire (the server's and the socket's buffers hold what the relay has not read yet), and
 * slow start used to double it to the cap: the relay held four times the messages for nothing.
 */
export const LAN_START = 4_096;

/**
 * A slow-start round (a window's worth of deliveries) that took longer than this many path round trips,
 * plus ROUND_PACED_SLACK_MS, was not held by the round trip: a window held back by the round trip comes
 * in about one. Something else set its pace (the relay's CPU, the servers), and a larger window only
 * holds more messages (on loopback, rounds of 1,000 took 25-40 ms over a 0.9 ms path).
 */
const ROUND_PACED = 2;
const ROUND_PACED_SLACK_MS = 5;
/** An event loop busy this share of the time is the relay's limit (a loopback backlog ran it at 0.92-0.98). */
export const BUSY = 0.9;

/** startingWindow judges the round trip at this rate (msgs/s). */
export const REFERENCE_RATE_PER_SEC = 10_000;
export const HEADROOM = 2; // the window grows until it covers rate × RTT this many times
const GROWTH = 2;
const SHRINK = 0.75;
/** "The window filled": the relay held this × window at some delivery since the last observation. */
const FILLED = 0.9;
const HELD_MOST = 0.5; // "holds most of the window": held ≥ this × window
/** "Most of that awaits the destination": awaitingDestination ≥ this × held. */
const AWAITING_MOST = 0.5;
/** Observations a destination bottleneck lasts before a shrink, and between shrinks. */
const DESTINATION_PERSIST = 3;
/** A completion rate below this × the rate before a shrink undoes the shrink. */
const REVERT_RATIO = 0.85;
const CHANGE_RATIO = 0.25; // smaller relative moves are not taken
const SIZE_ALPHA_UP = 0.5; // EWMA weights of the average message size: larger sizes are believed fast,
const SIZE_ALPHA_DOWN = 0.25; // smaller ones slowly
/** The bytes cap follows the average size in steps of at least this much. */
const BYTES_CAP_STEP = 0.1;

const positiveInt = (n: number, name: string): number => {
  if (Number.isFinite(n) && n >= 1) return Math.floor(n);
  throw new RangeError(`${name} must be a positive number, got ${n}`);
};

const validSize = (n: number | undefined): number | undefined => (n !== undefined && Number.isFinite(n) && n > 0 ? n : undefined);

/** How many messages of avgBytes capBytes holds (Infinity: size unknown). */
const bytesCapOf = (capBytes: number, avgBytes: number | undefined): number => (avgBytes === undefined ? Infinity : Math.floor(capBytes / avgBytes));

type CapLimit = "messages cap" | "bytes cap" | "rate cap";

/** The largest window allowed, and which cap sets it. Never below batchSize. */
function capOf(capMessages: number, byBytes: number, batchSize: number, byRate = Infinity): { cap: number; capLimit: CapLimit } {
  const capLimit = byRate < Math.min(capMessages, byBytes) ? "rate cap" : byBytes < capMessages ? "bytes cap" : "messages cap";
  return { cap: Math.max(batchSize, Math.min(capMessages, byBytes, byRate)), capLimit };
}

/**
 * The window a rate cap needs: what the capped rate moves in max(1 s, RTT × HEADROOM), in messages (the
 * bytes rate over the average message). Infinity without a cap (or a bytes cap before any size is known).
 */
export function rateCapWindow(maxRate: MaxRate | undefined, avgBytes: number | undefined, rttMs: number | undefined): number {
  if (maxRate === undefined) return Infinity;
  const seconds = Math.max(1, rttMs !== undefined && Number.isFinite(rttMs) && rttMs > 0 ? (rttMs * HEADROOM) / 1000 : 0);
  const byMessages = maxRate.messages === undefined ? Infinity : Math.ceil(maxRate.messages * seconds);
  const byBytes = maxRate.bytes === undefined || avgBytes === undefined ? Infinity : Math.floor((maxRate.bytes * seconds) / avgBytes);
  return Math.min(byMessages, byBytes);
}

const clamp = (n: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, Math.floor(n)));

const neededFor = (ratePerSec: number, rttMs: number): number => Math.ceil(((ratePerSec * rttMs) / 1000) * HEADROOM);

/**
 * The window a link starts with, and what would hold it below what the round trip needs at
 * REFERENCE_RATE_PER_SEC (10,000 msgs/s): neededForRtt = 10,000 × RTT × HEADROOM; limit is the cap
 * ("messages cap" / "bytes cap") when that cap is below neededForRtt, else "rtt" (the window can follow
 * the round trip). Without rttMs, limit is the cap only when the start itself is held by it.
 */
export function startingWindow(opts: {
  capMessages: number;
  capBytes: number;
  batchSize: number;
  rttMs?: number;
  avgMessageBytes?: number;
  maxMessageBytes?: number;
  initial?: number;
  maxRate?: MaxRate;
}): { window: number; limit: WindowLimit; neededForRtt?: number; cap: number } {
  const batchSize = positiveInt(opts.batchSize, "batchSize");
  const avgBytes = validSize(opts.avgMessageBytes) ?? validSize(opts.maxMessageBytes);
  const byBytes = bytesCapOf(opts.capBytes, avgBytes);
  const { cap, capLimit } = capOf(positiveInt(opts.capMessages, "capMessages"), byBytes, batchSize, rateCapWindow(opts.maxRate, avgBytes, opts.rttMs));
  const wanted = opts.initial ?? GROWTH * batchSize;
  const window = clamp(wanted, batchSize, cap);
  if (opts.rttMs === undefined || !Number.isFinite(opts.rttMs) || opts.rttMs < 0) return { window, limit: window < wanted ? capLimit : "rtt", cap };
  const neededForRtt = neededFor(REFERENCE_RATE_PER_SEC, opts.rttMs);
  return { window, limit: cap < neededForRtt ? capLimit : "rtt", neededForRtt, cap };
}

interface Baseline {
  readonly nowMs: number;
  readonly delivered: number;
  readonly deliveredBytes: number;
  /** delivered − held: messages the relay finished (acked). */
  readonly completed: number;
}

export class WindowController {
  private readonly capMessages: number;
  private readonly capBytes: number;
  private readonly batchSize: number;
  private current: number;
  private currentLimit: WindowLimit = "idle";
  private avgBytes: number | undefined;
  /** capBytes / avgBytes, moved only when that changes by ≥ BYTES_CAP_STEP (so a converging average does not move the window a little each second). */
  private bytesCap: number;
  private sizeMeasured = false;
  private last: Baseline | undefined;
  private rttMs: number | undefined;
  private destinationStreak = 0;
  private sinceShrink = Infinity;
  /** The last destination shrink: the window before it and the completion rate then. */
  private shrunk: { readonly from: number; readonly completionPerSec: number } | undefined;
  /** A shrink that cost throughput was undone: no shrinking below this while the destination limits. */
  private destinationFloor = 0;
  private maxRate: MaxRate | undefined;
  private lastRatePerSec = 0;
  /** A larger window tried while the relay holds most of it (window-probe.ts). */
  private readonly probe = new WindowProbe();
  /** What the probe did at the current observation (decide() reports it). */
  private probeOutcome: ProbeOutcome | undefined;

  constructor(opts: WindowControllerOptions) {
    this.capMessages = positiveInt(opts.capMessages, "capMessages");
    if (!Number.isFinite(opts.capBytes) || opts.capBytes <= 0) throw new RangeError(`capBytes must be a positive number, got ${opts.capBytes}`);
    this.capBytes = opts.capBytes;
    this.batchSize = positiveInt(opts.batchSize, "batchSize");
    this.avgBytes = validSize(opts.avgMessageBytes) ?? validSize(opts.maxMessageBytes);
    this.bytesCap = bytesCapOf(this.capBytes, this.avgBytes);
    this.maxRate = opts.maxRate;
    const start = startingWindow({ ...opts, avgMessageBytes: this.avgBytes });
    this.current = start.window;
    if (start.window < (opts.initial ?? GROWTH * this.batchSize)) this.currentLimit = start.limit;
  }

  get window(): number {
    return this.current;
  }

  get limit(): WindowLimit {
    return this.currentLimit;
  }

  /**
   * The rate cap changed (a reload): the ceiling follows at once. Returns the window to apply now: the
   * current one, or the new ceiling when the window is above it (limit "rate cap").
   */
  setMaxRate(maxRate: MaxRate | undefined): number {
    this.maxRate = maxRate;
    const { cap, capLimit } = this.cap();
    if (this.current > cap) {
      this.current = cap;
      this.currentLimit = capLimit;
    }
    return this.current;
  }

  observe(sample: WindowSample): WindowDecision {
    this.probeOutcome = undefined;
    if (sample.rttMs !== undefined && Number.isFinite(sample.rttMs) && sample.rttMs >= 0) this.rttMs = sample.rttMs;
    const prev = this.last;
    const completed = sample.delivered - sample.held;
    this.last = { nowMs: sample.nowMs, delivered: sample.delivered, deliveredBytes: sample.deliveredBytes, completed };
    // First sample, or counters that went back (a restarted link): a new baseline, no decision.
    if (prev === undefined || sample.nowMs <= prev.nowMs || sample.delivered < prev.delivered || sample.deliveredBytes < prev.deliveredBytes) {
      return this.decide(this.current, this.currentLimit, 0, undefined);
    }
    const seconds = (sample.nowMs - prev.nowMs) / 1000;
    const deliveries = sample.delivered - prev.delivered;
    const ratePerSec = deliveries / seconds;
    this.lastRatePerSec = ratePerSec;
    const completionPerSec = Math.max(0, completed - prev.completed) / seconds;
    if (deliveries > 0) this.learnSize((sample.deliveredBytes - prev.deliveredBytes) / deliveries);
    const neededForRtt = this.rttMs === undefined ? undefined : neededFor(ratePerSec, this.rttMs);
    const { cap, capLimit } = this.cap();

    const window = this.current;
    let next = window;
    let limit: WindowLimit;
    if (sample.rateCapped === true || sample.pushedBack === true) this.probe.forget();
    if (sample.rateCapped === true) {
      // The cap held deliveries back: the window brings all the cap allows, more would only wait here.
      limit = "rate cap";
      this.leaveDestination();
    } else if (sample.pushedBack === true) {
      limit = "destination";
      next = this.pushedBackBy(window);
    } else if (Math.min(sample.held, sample.minHeld ?? sample.held) >= window * HELD_MOST) {
      limit = sample.awaitingDestination >= sample.held * AWAITING_MOST ? "destination" : "relay";
      const probed = this.probe.step({ window, cap, completionPerSec, sourcePending: sample.sourcePending, busy: (sample.busy ?? 0) >= BUSY, shrinking: this.shrunk !== undefined });
      if (probed !== undefined) {
        next = probed.window;
        this.probeOutcome = probed.outcome;
        if (probed.outcome === "undone") this.sinceShrink = 0; // the undo moves what is held, and the next completion rate: no shrink judged on it
        if (limit === "destination") {
          this.destinationStreak++;
          this.sinceShrink++;
        } else this.leaveDestination();
      } else if (limit === "destination") next = this.destinationBound(sample.sourcePending > 0, completionPerSec, neededForRtt);
      else this.leaveDestination();
    } else {
      // The relay holds little now: a probe under way did what it could (the backlog went), and one
      // undone no longer says anything about this window.
      this.probe.forget();
      this.leaveDestination();
      const filled = (sample.maxHeld ?? sample.held) >= window * FILLED;
      const lan = this.rttMs !== undefined && this.rttMs < WAN_RTT_MS;
      if ((sample.busy ?? 0) < BUSY && filled && window < cap && (!lan || window < LAN_START)) {
        // The window filled at its peaks (see the module comment): messages waited at the source.
        limit = "rtt";
        next = Math.min(window * GROWTH, lan ? LAN_START : Infinity);
      } else if (sample.sourcePending <= 0) limit = "idle";
      else if ((sample.busy ?? 0) >= BUSY) limit = "relay";
      else {
        // The window limits: the relay holds little, the rest of it is on the wire, and the rate over
        // the round trip fills it (or no round trip is known to say otherwise).
        limit = "rtt";
        if (neededForRtt === undefined || window < neededForRtt) {
          // Double (slow start); when part of the window sits in the relay, rate × RTT × HEADROOM is less
          // than twice the window: grow to that (at least by a quarter, the smallest move taken).
          next = neededForRtt === undefined ? window * GROWTH : Math.min(window * GROWTH, Math.max(neededForRtt, Math.ceil(window * (1 + CHANGE_RATIO))));
          if (next >= cap && (neededForRtt === undefined || neededForRtt > cap)) limit = capLimit;
        }
      }
    }
    if (window > cap) limit = capLimit; // the byte budget shrank (larger messages): back to it whatever else holds
    next = clamp(next, this.batchSize, cap);
    if (!this.significant(window, next, cap)) next = window;
    this.current = next;
    this.currentLimit = limit;
    return this.decide(window, limit, ratePerSec, neededForRtt);
  }

  /**
   * Slow start between observations, as TCP grows its window per round trip: a whole window was
   * delivered since the last round, at some delivery of the round the relay held less than half of it
   * (`minHeld`: it did not hold most of it throughout, the rest was on the wire) and more than a window
   * still waits at the source, so the
   * round trip is what limits: the window doubles now, up to the cap, instead of a second later. Not
   * while a cap, the destination or the relay holds it (the observations decide those), nor past
   * LAN_START while the path's round trip (`rttMs`: LinkWindow passes the lowest measured lately) is
   * under WAN_RTT_MS, nor when the round (`roundMs`, its first delivery to its last) took more than
   * ROUND_PACED round trips and ROUND_PACED_SLACK_MS. Returns the decision, or undefined when the
   * window stays.
   */
  roundTrip(minHeld: number, sourcePending: number, rttMs?: number, roundMs?: number): WindowDecision | undefined {
    this.probeOutcome = undefined;
    if (this.currentLimit !== "rtt" && this.currentLimit !== "idle") return undefined;
    if (minHeld >= this.current * HELD_MOST || sourcePending < this.current) return undefined;
    const lan = rttMs !== undefined && rttMs < WAN_RTT_MS;
    if (lan && this.current >= LAN_START) return undefined;
    if (rttMs !== undefined && roundMs !== undefined && roundMs > ROUND_PACED * rttMs + ROUND_PACED_SLACK_MS) return undefined;
    const { cap, capLimit } = this.cap();
    const next = clamp(this.current * GROWTH, this.batchSize, lan ? Math.min(cap, LAN_START) : cap);
    if (next <= this.current) return undefined;
    const before = this.current;
    this.current = next;
    this.currentLimit = next >= cap ? capLimit : "rtt";
    return this.decide(before, this.currentLimit, this.lastRatePerSec, undefined);
  }

  /** The destination holds most of the window: hold it, shrink it now and then, undo a shrink that cost throughput. */
  private destinationBound(backlog: boolean, completionPerSec: number, neededForRtt: number | undefined): number {
    this.destinationStreak++;
    this.sinceShrink++;
    const window = this.current;
    if (this.shrunk !== undefined && completionPerSec < this.shrunk.completionPerSec * REVERT_RATIO) {
      const back = this.shrunk.from;
      this.destinationFloor = back;
      this.shrunk = undefined;
      return back;
    }
    if (backlog && this.destinationStreak >= DESTINATION_PERSIST && this.sinceShrink >= DESTINATION_PERSIST) {
      // Not below rate × RTT × HEADROOM: the wire keeps what the destination's rate needs, and the relay
      // as much again in hand (below it the relay would hold less than half and the window grow back).
      const target = Math.max(this.batchSize, this.destinationFloor, Math.floor(window * SHRINK), neededForRtt ?? 0);
      // Only a move that will be taken (≥ 25 %, or onto the floor) counts as a shrink.
      if (target < window && (window - target >= CHANGE_RATIO * window || target === this.batchSize)) {
        this.shrunk = { from: window, completionPerSec };
        this.sinceShrink = 0;
        return target;
      }
    }
    return window;
  }

  /**
   * The destination refused publishes (429): shrink by SHRINK at once, below what the round trip needs
   * if it must (the destination said it takes less); not undone by the completion rate.
   */
  private pushedBackBy(window: number): number {
    this.destinationStreak++;
    this.sinceShrink = 0;
    this.shrunk = undefined;
    this.destinationFloor = 0;
    return Math.max(this.batchSize, Math.floor(window * SHRINK));
  }

  private leaveDestination(): void {
    this.destinationStreak = 0;
    this.sinceShrink = Infinity;
    this.shrunk = undefined;
    this.destinationFloor = 0;
  }

  private learnSize(bytesPerMessage: number): void {
    if (!Number.isFinite(bytesPerMessage) || bytesPerMessage <= 0) return;
    if (!this.sizeMeasured || this.avgBytes === undefined) {
      // The first measurement replaces any prior (the worst case especially).
      this.avgBytes = bytesPerMessage;
      this.sizeMeasured = true;
      this.bytesCap = bytesCapOf(this.capBytes, this.avgBytes);
      return;
    }
    const alpha = bytesPerMessage > this.avgBytes ? SIZE_ALPHA_UP : SIZE_ALPHA_DOWN;
    this.avgBytes += alpha * (bytesPerMessage - this.avgBytes);
    this.stepBytesCap();
  }

  private stepBytesCap(): void {
    const measured = bytesCapOf(this.capBytes, this.avgBytes);
    if (!Number.isFinite(this.bytesCap) || Math.abs(measured - this.bytesCap) >= BYTES_CAP_STEP * this.bytesCap) this.bytesCap = measured;
  }

  private cap(): { cap: number; capLimit: CapLimit } {
    return capOf(this.capMessages, this.bytesCap, this.batchSize, rateCapWindow(this.maxRate, this.avgBytes, this.rttMs));
  }

  /** A move worth a MaxAckPending update: ≥ 25 %, or onto/off the cap or the batchSize floor. */
  private significant(from: number, to: number, cap: number): boolean {
    if (to === from) return false;
    if (Math.abs(to - from) >= CHANGE_RATIO * from) return true;
    return to === cap || from >= cap || to === this.batchSize || from === this.batchSize;
  }

  private decide(before: number, limit: WindowLimit, ratePerSec: number, neededForRtt: number | undefined): WindowDecision {
    return {
      window: this.current,
      limit,
      changed: this.current !== before,
      ratePerSec,
      neededForRtt,
      cap: this.cap().cap,
      avgMessageBytes: this.avgBytes,
      ...(this.probeOutcome !== undefined ? { probe: this.probeOutcome } : {}),
    };
  }
}
