/**
 * A link's rate cap (`maxRate: { messages: 2000/s, bytes: 2MiB/s }`): a token bucket that admits the
 * link's deliveries into its pipeline at the capped rate, so a catch-up after an outage cannot saturate
 * a WAN or a destination.
 *
 * Why a gate in front of the pipeline, and not paced pulls. With nats.js `consume()` the client keeps
 * pull requests outstanding by itself and refills them as messages arrive; it cannot be told to wait.
 * Pacing pulls means `fetch()`-style batches (a round trip per batch across the WAN, and a batch cut
 * short on every expiry) or stopping the pull (which drops what the client buffered: redelivered out of
 * order after the ack wait). Bounding the window alone (window / cycle ≈ rate) does not hold a rate
 * either: the cycle is the round trip plus the destination's latency, and both vary. What does hold it:
 *  - Deliveries pass this gate in arrival order. While the bucket has tokens a delivery goes straight
 *    into the pipeline; once it runs out, it and everything after it wait here, in order, and are
 *    admitted as tokens come (a timer). Nothing is acked before it is admitted and then applied, so
 *    order and acks are the pipeline's as always.
 *  - The source delivers no more than the consumer's MaxAckPending (the window) unacked: held here, the
 *    link stops taking more. Acks leave at the capped rate, so the source delivers at the capped rate,
 *    and the WAN carries the cap (plus, at the start, one window).
 *  - The window controller sees the cap as a limit (`rate cap`): its ceiling becomes what the cap
 *    needs, max(one batch, rate × max(1 s, 2 × RTT)) — the first window is at most that burst, and
 *    nothing waits here longer than about that — and it does not grow while the cap holds the link.
 *  - What waits here longer than half the ack wait (a very low cap) gets an in-progress ack, like what
 *    the pipeline holds, so the source does not redeliver it.
 *  - When the pull ends (the consume loop goes round again: a stall heal, a handover, the lease lost) the
 *    gate drops what it holds. It stays unacked at the source, and the loop places the cursor only with
 *    nothing held, which moves it back to the ack floor: those messages come again first, in order.
 * Burst: a bucket holds at most one second of its rate, or one batch (messages) if that is larger. A
 * message larger than the byte bucket passes once the bucket is full and leaves it in debt, so the rate
 * over time is still the cap. Bytes are payload bytes, as the window counts them.
 *
 * A link held here is not stalled (stall-watch.ts): the link's window reports it as throttled.
 */
import type { Logger } from "pino";
import type { MaxRate } from "../config/types.js";
import type { Delivery } from "../nats/delivery.js";
import type { RelayMetrics } from "../observability/metrics.js";

/** The longest a held delivery waits for the next admission turn (ms): tokens come continuously. */
const MIN_TICK_MS = 4;
/** In-progress acks for held deliveries are looked for at most this often (ms). */
const KEEPALIVE_EVERY_MS = 1_000;
/** A cap that starts or stops holding the link is logged at most this often (ms). */
const LOG_EVERY_MS = 60_000;

/**
 * A token bucket: `rate` tokens a second, up to `capacity`. Pure: all time comes from the caller (ms).
 * A cost larger than the capacity is taken when the bucket is full, leaving it in debt.
 */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    private rate: number,
    private capacity: number,
    nowMs: number,
  ) {
    if (!(rate > 0) || !(capacity > 0)) throw new RangeError(`a token bucket needs a rate and a capacity > 0 (got ${rate}, ${capacity})`);
    this.tokens = capacity;
    this.at = nowMs;
  }

  get ratePerSec(): number {
    return this.rate;
  }

  get burst(): number {
    return this.capacity;
  }

  /** Tokens now (negative: in debt). */
  available(nowMs: number): number {
    this.refill(nowMs);
    return this.tokens;
  }

  /** Whether `cost` can be taken now (without taking it). */
  allows(cost: number, nowMs: number): boolean {
    this.refill(nowMs);
    return this.tokens >= Math.min(cost, this.capacity);
  }

  /** Takes `cost` if it can (see `allows`); returns whether it did. */
  take(cost: number, nowMs: number): boolean {
    if (!this.allows(cost, nowMs)) return false;
    this.tokens -= cost;
    return true;
  }

  /** How long (ms) until `cost` can be taken (0: now). */
  waitMs(cost: number, nowMs: number): number {
    this.refill(nowMs);
    const missing = Math.min(cost, this.capacity) - this.tokens;
    return missing <= 0 ? 0 : (missing * 1000) / this.rate;
  }

  /** A new rate and capacity: the tokens so far are kept, up to the new capacity. */
  set(rate: number, capacity: number, nowMs: number): void {
    if (!(rate > 0) || !(capacity > 0)) throw new RangeError(`a token bucket needs a rate and a capacity > 0 (got ${rate}, ${capacity})`);
    this.refill(nowMs);
    this.rate = rate;
    this.capacity = capacity;
    this.tokens = Math.min(this.tokens, capacity);
  }

  private refill(nowMs: number): void {
    if (nowMs > this.at) this.tokens = Math.min(this.capacity, this.tokens + ((nowMs - this.at) * this.rate) / 1000);
    this.at = Math.max(this.at, nowMs);
  }
}

/** A bucket's burst: one second of its rate, or `floor` (one batch of messages) if that is larger. */
export function burstOf(ratePerSec: number, floor: number): number {
  return Math.max(ratePerSec, floor);
}

export interface RateCapDeps {
  readonly link: string;
  readonly batchSize: number;
  readonly ackWaitMs: number;
  readonly maxRate: MaxRate | undefined;
  readonly metrics: Pick<RelayMetrics, "rateCappedSeconds" | "maxRate">;
  readonly logger: Logger;
  /** Takes an admitted delivery (the pipeline), in arrival order. */
  admit(delivery: Delivery): void;
  /** Whether deliveries may still go in (the link owns, has not failed, is not stopping); false drops what is held. */
  mayAdmit(): boolean;
  /** Sends an in-progress ack for a delivery held long (its ack subject). */
  working(reply: string): void;
  /** Monotonic ms (default performance.now). */
  readonly now?: () => number;
}

interface Held {
  readonly delivery: Delivery;
  readonly at: number;
  workingAt: number;
}

/** The gate (see the module comment): deliveries in, admitted at the capped rate, in order. */
export class RateCap {
  private messages: TokenBucket | undefined;
  private bytesBucket: TokenBucket | undefined;
  private rate: MaxRate | undefined;
  private queue: Held[] = [];
  private head = 0;
  private heldBytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly now: () => number;
  /** While holding: when the time held was last counted. */
  private countedAt: number | undefined;
  private lastHeldAt = -Infinity;
  private keepAliveAt = -Infinity;
  private loggedAt = -Infinity;
  private heldSeconds = 0;

  constructor(private readonly deps: RateCapDeps) {
    this.now = deps.now ?? (() => performance.now());
    this.set(deps.maxRate);
  }

  /** The cap now (undefined: none). */
  get maxRate(): MaxRate | undefined {
    return this.rate;
  }

  /** Deliveries held here, waiting for tokens. */
  get size(): number {
    return this.queue.length - this.head;
  }

  /** Payload bytes of those. */
  get bytes(): number {
    return this.heldBytes;
  }

  /** The cap holds the link now: deliveries wait for tokens. */
  get holding(): boolean {
    return this.size > 0;
  }

  /** Seconds the cap has held the link so far (also relay_link_rate_capped_seconds_total). */
  get cappedSeconds(): number {
    this.count(this.now());
    return this.heldSeconds;
  }

  /** Whether the cap held the link at any moment since `sinceMs` (monotonic ms), or holds it now. */
  heldSince(sinceMs: number): boolean {
    return this.holding || (this.lastHeldAt !== -Infinity && this.lastHeldAt >= sinceMs);
  }

  /** Whether the cap held the link within the last `ms`. */
  heldWithin(ms: number): boolean {
    return this.heldSince(this.now() - ms);
  }

  /** Sets, changes or removes the cap; applies at once (what is held goes on at the new rate). */
  set(maxRate: MaxRate | undefined): void {
    const now = this.now();
    const { link, batchSize } = this.deps;
    this.rate = maxRate === undefined || (maxRate.messages === undefined && maxRate.bytes === undefined) ? undefined : { ...maxRate };
    this.messages = bucket(this.messages, this.rate?.messages, batchSize, now);
    // Bytes: one second of the rate (a message larger than that passes on a full bucket, in debt).
    this.bytesBucket = bucket(this.bytesBucket, this.rate?.bytes, 1, now);
    for (const unit of ["messages", "bytes"] as const) {
      const value = this.rate?.[unit];
      if (value === undefined) this.deps.metrics.maxRate.remove({ link, unit });
      else this.deps.metrics.maxRate.set({ link, unit }, value);
    }
    this.deps.metrics.rateCappedSeconds.inc({ link }, 0);
    this.drain();
  }

  /** A delivery arrived (in arrival order): into the pipeline now if the cap allows, else held. */
  offer(delivery: Delivery): void {
    if (this.size === 0 && (this.rate === undefined || this.admits(delivery, this.now()))) {
      this.deps.admit(delivery);
      return;
    }
    const now = this.now();
    this.queue.push({ delivery, at: now, workingAt: now });
    this.heldBytes += delivery.data.length;
    this.drain();
  }

  /** Drops what is held (the pull ended, the link stops): it stays unacked at the source. */
  clear(): void {
    this.count(this.now());
    this.queue = [];
    this.head = 0;
    this.heldBytes = 0;
    this.stopHolding();
  }

  /** Admits what the tokens allow, in order; schedules the next turn while anything is held. */
  private drain(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.size === 0) return this.stopHolding();
    if (!this.deps.mayAdmit()) return this.clear();
    const now = this.now();
    this.count(now);
    while (this.size > 0) {
      const next = this.queue[this.head] as Held;
      if (!this.admits(next.delivery, now)) break;
      this.queue[this.head++] = undefined as unknown as Held;
      this.heldBytes -= next.delivery.data.length;
      this.deps.admit(next.delivery);
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    if (this.size === 0) return this.stopHolding();
    this.startHolding(now);
    this.keepAlive(now);
    const head = this.queue[this.head] as Held;
    const wait = Math.max(this.messages?.waitMs(1, now) ?? 0, this.bytesBucket?.waitMs(head.delivery.data.length, now) ?? 0);
    this.timer = setTimeout(() => this.drain(), Math.max(MIN_TICK_MS, Math.ceil(wait)));
    this.timer.unref();
  }

  /** Takes the delivery's tokens from both buckets if both allow it. */
  private admits(delivery: Delivery, now: number): boolean {
    const size = delivery.data.length;
    if (this.messages && !this.messages.allows(1, now)) return false;
    if (this.bytesBucket && !this.bytesBucket.allows(size, now)) return false;
    this.messages?.take(1, now);
    this.bytesBucket?.take(size, now);
    return true;
  }

  /** In-progress acks for what waited here past half the ack wait (a very low cap). */
  private keepAlive(now: number): void {
    if (now - this.keepAliveAt < KEEPALIVE_EVERY_MS) return;
    this.keepAliveAt = now;
    const after = this.deps.ackWaitMs / 2;
    for (let i = this.head; i < this.queue.length; i++) {
      const h = this.queue[i] as Held;
      if (now - h.workingAt < after) continue;
      this.deps.working(h.delivery.reply);
      h.workingAt = now;
    }
  }

  /** Counts the time held since it was last counted. */
  private count(now: number): void {
    if (this.countedAt === undefined) return;
    const seconds = Math.max(0, now - this.countedAt) / 1000;
    this.countedAt = now;
    this.lastHeldAt = now;
    this.heldSeconds += seconds;
    this.deps.metrics.rateCappedSeconds.inc({ link: this.deps.link }, seconds);
  }

  private startHolding(now: number): void {
    this.lastHeldAt = now;
    if (this.countedAt !== undefined) return;
    this.countedAt = now;
    if (now - this.loggedAt < LOG_EVERY_MS) return;
    this.loggedAt = now;
    this.deps.logger.info({ maxRate: this.rate, held: this.size }, "rate cap holds the link: deliveries wait for it (logged at most once a minute)");
  }

  private stopHolding(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.countedAt === undefined) return;
    this.count(this.now());
    this.countedAt = undefined;
  }
}

/** The bucket for one unit: kept (its tokens) when the rate changes, made full for a new cap, gone without one. */
function bucket(current: TokenBucket | undefined, rate: number | undefined, floor: number, now: number): TokenBucket | undefined {
  if (rate === undefined) return undefined;
  const capacity = burstOf(rate, floor);
  if (current === undefined) return new TokenBucket(rate, capacity, now);
  current.set(rate, capacity, now);
  return current;
}
