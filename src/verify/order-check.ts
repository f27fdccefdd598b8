import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";
import type { OutOfOrderExample } from "./report.js";
import { sourceSubject } from "../link/source-subject.js";

/**
 * The verifier's order check: the first copy of each source message, in destination order, against
 * the copies of the link stored before it, over the whole link or within each partition.
 */

/** Per order scope: the highest source seq stored so far and where. */
interface OrderState {
  sourceSeq: number;
  destSeq: number;
}

export class OrderCheck {
  /** First copies stored after a copy of a later source message (the report's `outOfOrder.count`). */
  count = 0;
  readonly examples: OutOfOrderExample[] = [];
  private readonly linkOrder: OrderState = { sourceSeq: 0, destSeq: 0 };
  private readonly partitionOrder = new Map<string, OrderState>();

  constructor(
    private readonly link: LinkConfig,
    private readonly limit: number,
  ) {}

  /**
   * The first copy of a source message, against the copies of this link stored before it: the relay
   * keeps source order over an unpartitioned link, and within each partition of a partitioned one (every
   * subject is in one partition, so this covers per-subject order too). Snapshot copies of a resync and
   * copies of an older incarnation are left out (they restart the order by design).
   */
  check(m: JsMsg, id: string, seq: number): void {
    let state = this.linkOrder;
    let partition: string | undefined;
    const p = this.link.partitions;
    if (p) {
      partition = sourceSubject(m.subject, this.link).split(".")[p.token - 1] ?? "";
      state = this.partitionOrder.get(partition) ?? { sourceSeq: 0, destSeq: 0 };
      this.partitionOrder.set(partition, state);
    }
    if (seq >= state.sourceSeq) {
      state.sourceSeq = seq;
      state.destSeq = m.seq;
      return;
    }
    this.count++;
    if (this.examples.length < this.limit) {
      this.examples.push({
        id,
        sourceSeq: seq,
        destSeq: m.seq,
        afterSourceSeq: state.sourceSeq,
        afterDestSeq: state.destSeq,
        ...(partition === undefined ? {} : { partition }),
      });
    }
  }
}
