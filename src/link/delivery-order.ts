/**
 * The order of the consumer's deliveries: a jump in its delivery sequence means deliveries were lost on
 * the way, and the link recovers them first (ordered recovery) instead of taking newer ones.
 */
import type { Logger } from "pino";
import type { Delivery } from "../nats/delivery.js";

export interface DeliveryOrderDeps {
  readonly logger: Logger;
  /** The highest source sequence the link has seen (for the log line). */
  highestSeen(): number;
  /** Stops the pull: the consume loop drains the pipeline and places the cursor again. */
  stopPulling(): void;
}

export class DeliveryOrder {
  /** The consumer sequence of the last delivery taken (when the cursor was placed: what the consumer had delivered). */
  private lastConsumerSeq = 0;
  /** Deliveries were lost: the loop drains the pipeline and moves the cursor back before consuming again. */
  private recoverLost = false;

  constructor(private readonly deps: DeliveryOrderDeps) {}

  /**
   * The cursor was placed: the next delivery must be the one after what the consumer has delivered
   * (1 for a new or moved cursor).
   */
  placed(deliveredConsumerSeq: number): void {
    this.lastConsumerSeq = deliveredConsumerSeq;
    this.recoverLost = false;
  }

  /**
   * A jump in the consumer's delivery sequence: deliveries were lost on the way (a consumer leader that
   * died with messages on the wire). The server holds them as ack-pending and would redeliver them only
   * after the ack wait, behind newer ones. So this delivery is not taken, the pull stops, the pipeline
   * finishes what it holds, and the loop moves the cursor back to the ack floor: the lost ones go first.
   */
  deliveriesLost(d: Delivery): boolean {
    if (this.recoverLost) return true; // stopping: the rest comes again after the cursor moves
    const last = this.lastConsumerSeq;
    this.lastConsumerSeq = d.consumerSequence;
    if (d.consumerSequence <= last) {
      // A new consumer leader that had not learnt everything the old one delivered: it delivers those
      // messages again, as first deliveries. The pipeline acks the ones it finished without a publish.
      this.deps.logger.warn(
        { consumerSeq: d.consumerSequence, lastConsumerSeq: last, sourceSeq: d.streamSequence },
        "the source consumer delivers again from an earlier point (its leader changed): messages already relayed are acked, not published again",
      );
    }
    if (d.consumerSequence <= last + 1) return false;
    this.recoverLost = true;
    this.deps.logger.warn(
      { lostFrom: last + 1, lostTo: d.consumerSequence - 1, afterSourceSeq: this.deps.highestSeen(), sourceSeq: d.streamSequence },
      "deliveries lost on the way from the source: finishing what is held, then moving the cursor back so they go first",
    );
    this.deps.stopPulling();
    return true;
  }
}
