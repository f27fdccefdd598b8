/**
 * The source cursor under `sourceAcks: cumulative` (an AckAll consumer): acking a delivery acks every
 * message up to its stream sequence. So a finished message is not acked at once: its sequence and
 * ack subject wait here, and `flush()` acks the highest finished sequence below every message the
 * pipeline still holds — one ack per flush instead of one per message, and never one that would
 * cover a message that is not finished.
 */
export class CumulativeAcks {
  /** Finished and not yet covered by an ack, by ascending sequence. */
  private finished: { seq: number; reply: string }[] = [];

  /**
   * A message is finished (relayed, suppressed, dead-lettered, or already in the destination). One
   * at or below what an ack covered already is a redelivery whose ack was lost (a source server that
   * restarted from disk): it is kept and acked again, or the server would hold it as pending forever.
   */
  done(seq: number, reply: string): void {
    if (reply === "") return;
    const list = this.finished;
    const last = list[list.length - 1];
    if (!last || seq > last.seq) {
      list.push({ seq, reply });
      return;
    }
    // A redelivery finished out of order (rare): kept sorted; the latest delivery's subject wins.
    let i = list.length - 1;
    while (i > 0 && list[i - 1]!.seq >= seq) i--;
    if (list[i]!.seq === seq) list[i] = { seq, reply };
    else list.splice(i, 0, { seq, reply });
  }

  /**
   * The ack subject that covers every finished message below `lowestHeld` (the lowest sequence the
   * pipeline still holds; undefined when it holds none), or undefined when there is nothing to ack.
   * The caller sends it.
   */
  flush(lowestHeld: number | undefined): string | undefined {
    const list = this.finished;
    if (list.length === 0) return undefined;
    let n = list.length;
    if (lowestHeld !== undefined) while (n > 0 && list[n - 1]!.seq >= lowestHeld) n--;
    if (n === 0) return undefined;
    const top = list[n - 1]!;
    this.finished = n === list.length ? [] : list.slice(n);
    return top.reply;
  }

  /** Finished messages waiting for an ack. */
  get waiting(): number {
    return this.finished.length;
  }

  /** Forgets everything (the cursor moved, or another relay owns the link now: their acks are its). */
  reset(): void {
    this.finished = [];
  }
}
