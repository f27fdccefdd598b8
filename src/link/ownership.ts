/**
 * The link's life in the region's group: waiting for the lease (standby), taking the link over, handing
 * it over when placement moves it, and losing the lease. Only the owner consumes, publishes, commits and
 * acks; what a relay holds when it stops owning the link is kept for itself or dropped for the next owner.
 */
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import type { LinkLease } from "../group/lease.js";
import { withDeadline } from "../lifecycle/deadline.js";

/** What ownership needs of the pipeline. */
export interface HeldMessages {
  readonly size: number;
  drained(signal?: AbortSignal): Promise<void>;
  abandon(): Promise<void>;
  resume(): void;
}

export interface OwnershipDeps {
  readonly lease: Pick<LinkLease, "valid" | "holder" | "resumed" | "acquired" | "setEligible" | "release" | "start" | "leaseRevision">;
  readonly pipeline: HeldMessages;
  /** The source connection (acks) and the destination's (publishes): flushed before the lease goes. */
  readonly source: Pick<NatsConnection, "flush">;
  readonly dest: Pick<NatsConnection, "flush">;
  readonly publishTimeoutMs: number;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  /** The guard lost its state (GUARD_STATE_LOST): nothing it holds moves. */
  guardLost(): boolean;
  readonly events: {
    /** Stop pulling: the consume loop acts on the change before it pulls again. */
    stopPulling(): void;
    /** Standing by or not: the link's state follows. */
    refreshState(): void;
    /** The lease is lost: bytes of this link still queued in the connections' write gates stay there. */
    lapseWrites(): void;
    /** The lease is lost: the stall watch starts over. */
    resetStall(): void;
    /** Acquired from another relay (not its own lease taken back): what that relay acked says nothing of this one's deliveries. */
    tookOver(): void;
  };
}

export class Ownership {
  /** Waiting for the lease: another relay of the group owns the link. */
  private waiting = false;
  /** Just took the link over from another relay (from standby, or from waiting for the lease): at work at once. */
  private tookOverNow = false;
  /** Aborted when the lease is lost: a wait that only makes sense while this relay owns the link ends. */
  private ownedTerm = new AbortController();
  /** Placement moved the link to another member: the loop drains and releases the lease (why). */
  private handoverReason: string | undefined;

  constructor(private readonly deps: OwnershipDeps) {}

  /** Waiting for the lease: another relay of the group owns the link (or nobody, yet). */
  get standby(): boolean {
    return this.waiting;
  }

  /** Took the link over from another relay and is not yet shown at work. */
  get tookOver(): boolean {
    return this.tookOverNow;
  }

  /** The link's state shows it at work after a takeover. */
  atWork(): void {
    this.tookOverNow = false;
  }

  /** Placement moved the link to another member: the consume loop hands it over. */
  get handingOver(): boolean {
    return this.handoverReason !== undefined;
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
      if (this.handoverReason !== undefined) this.deps.logger.info({ reason }, "handover cancelled: placement wants this relay to keep the link");
      this.handoverReason = undefined;
      return;
    }
    if (!lease.valid() || this.handoverReason !== undefined || this.deps.signal.aborted) return;
    this.handoverReason = reason;
    this.deps.logger.info({ reason, inFlight: this.deps.pipeline.size }, "handing the link over: stop pulling, finish what is in flight, then release the lease");
    this.deps.events.stopPulling();
  }

  /** The handover's second half, in the consume loop once the pull stopped. */
  async handOver(): Promise<void> {
    const { pipeline, lease, signal } = this.deps;
    const reason = this.handoverReason;
    // Nothing new is pulled: the pipeline only shrinks, unless the destination is down (then it waits).
    // A lease lost meanwhile ends the wait: the pipeline no longer publishes, and what it holds is kept
    // or dropped by the standby that follows, whoever owns the link next.
    while (pipeline.size > 0 && this.handoverReason !== undefined && lease.valid() && !signal.aborted && !this.deps.guardLost()) {
      await pipeline.drained(AbortSignal.any([signal, AbortSignal.timeout(1_000)]));
    }
    if (this.handoverReason === undefined || signal.aborted) return;
    // A lost guard state holds everything: the next owner finds the marker gone too and waits for the operator.
    if (this.deps.guardLost()) await this.dropHeld("the guard lost its state: handed over as it is");
    this.handoverReason = undefined;
    if (!lease.valid()) return; // lost meanwhile: nothing to hand over
    await this.acksSent();
    await lease.release("handed-over");
    this.deps.logger.info({ reason }, "link handed over: everything this relay held is acked and the lease released");
    lease.start();
  }

  /**
   * Waits until this relay owns the link (at once when no other relay of the group does); false when
   * the link stops meanwhile. A new owner then places the cursor with ordered recovery, so a takeover
   * relays what the previous owner held first. A lease that was never lost but lapsed for a moment (a
   * renewal answered after its deadline, a member session renewed late: `valid()` false, then true
   * again under the same lease revision) is no acquisition: the wait ends when it holds again.
   */
  async holdLease(): Promise<boolean> {
    const { lease, pipeline } = this.deps;
    if (lease.valid()) return true;
    this.waiting = true;
    this.deps.events.refreshState();
    const lapsedRevision = lease.leaseRevision;
    // Another relay took the link while this one waited: what this one holds is that relay's now.
    let back: (() => void) | undefined;
    const heldAgain = new Promise<"held-again">((resolve) => (back = () => resolve("held-again")));
    const watch = setInterval(() => {
      if (lease.holder !== undefined && pipeline.size > 0) void this.dropHeld(`relay ${lease.holder} owns the link now`);
      if (lapsedRevision !== undefined && lease.valid() && lease.leaseRevision === lapsedRevision) back?.();
    }, 250);
    try {
      const outcome = await Promise.race([lease.acquired(this.deps.signal), heldAgain]);
      if (outcome === "held-again") {
        pipeline.resume();
        this.deps.logger.info({ leaseRevision: lapsedRevision }, "link lease holds again (it lapsed for a moment and was never lost): this relay goes on");
        return true;
      }
      if (!lease.resumed) this.deps.events.tookOver();
      if (!lease.resumed && pipeline.size > 0) await this.dropHeld("another relay owned the link meanwhile");
      pipeline.resume(); // what it kept (a lease taken back) publishes, commits and acks again
      this.deps.logger.info({ leaseRevision: outcome, resumed: lease.resumed }, "link lease acquired: this relay owns the link");
      // Taken from another relay (not its own lease back): at work at once, whatever the last reading said.
      this.tookOverNow = !lease.resumed;
      return true;
    } catch {
      return false; // stopping
    } finally {
      clearInterval(watch);
      this.waiting = false;
      this.deps.events.refreshState();
    }
  }

  /**
   * The lease is gone (not renewed in time: the destination region was unreachable, or this process was
   * paused). The pipeline stopped publishing, committing and acking already (it checks the lease first).
   * What it holds is kept while nobody else owns the link: when this relay takes back a lease that still
   * names it, it goes on in order (publishes it sent before may still land, and only a pipeline that
   * keeps its order can follow them); when another relay took over, it is dropped for that relay.
   */
  leaseLost(reason: string): void {
    if (this.deps.signal.aborted) return;
    this.deps.logger.warn({ reason, inFlight: this.deps.pipeline.size }, "link lease lost: this relay stops working the link until it owns it again");
    // Bytes of this link still queued (a slow path, or a pause between issuing and writing) stay here.
    this.deps.events.lapseWrites();
    this.deps.events.stopPulling();
    this.ownedTerm.abort();
    this.deps.events.resetStall();
  }

  /**
   * Before the lease goes: the acks this relay sent (the last cumulative one is sent as the pipeline
   * empties) have left the client and reached the source server (a PING answered after them). The next
   * owner may delete and re-create the durable under the same name; an ack of ours arriving after that
   * would move the new consumer's floor to our delivery sequence and freeze it. Bounded by the publish
   * timeout: a source that does not answer gets no ack from us either.
   */
  async acksSent(): Promise<void> {
    const { logger, publishTimeoutMs } = this.deps;
    // Also the publishes sent: the lease has its own connection, so its release must not overtake them.
    await Promise.all([
      withDeadline(this.deps.source.flush(), publishTimeoutMs, "source flush").catch((err: unknown) =>
        logger.warn({ err: toRelayError(err).message }, "could not confirm the last acks reached the source before releasing the lease"),
      ),
      withDeadline(this.deps.dest.flush(), publishTimeoutMs, "destination flush").catch((err: unknown) =>
        logger.warn({ err: toRelayError(err).message }, "could not confirm the last publishes reached the destination before releasing the lease"),
      ),
    ]);
  }

  /**
   * Waits until the pipeline is empty while this relay owns the link; false when the lease was lost or
   * the link stops first (the loop then waits for the lease, and drops or keeps what it holds).
   */
  async drainWhileOwned(): Promise<boolean> {
    const { pipeline } = this.deps;
    const owned = this.whileOwned();
    if (!owned) return false;
    this.deps.logger.info({ inFlight: pipeline.size }, "finishing what the pipeline holds before placing the cursor");
    await pipeline.drained(owned);
    return pipeline.size === 0;
  }

  /**
   * A signal that aborts when the link stops or this relay's lease is lost (undefined: not owned now).
   * A wait for the pipeline to empty must end with the lease: without it nothing publishes.
   */
  whileOwned(): AbortSignal | undefined {
    if (!this.deps.lease.valid()) return undefined;
    if (this.ownedTerm.signal.aborted) this.ownedTerm = new AbortController();
    return AbortSignal.any([this.deps.signal, this.ownedTerm.signal]);
  }

  /** Drops what the pipeline holds: another relay owns the link, or will (it relays it). */
  async dropHeld(why: string): Promise<void> {
    const { pipeline } = this.deps;
    if (pipeline.size === 0) return;
    this.deps.logger.warn({ inFlight: pipeline.size, why }, "dropping what this relay held: the owner relays it");
    await pipeline.abandon().catch((err: unknown) => this.deps.logger.warn({ err: toRelayError(err).message }, "could not drop the pipeline"));
  }
}
