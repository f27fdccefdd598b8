/**
 * The source cursor under `sourceAcks: cumulative` (an AckAll consumer): acking a delivery acks every
 * message up to its stream sequence. So a finished message is not acked at once: its sequence and
 * ack subject wait here, and `flush()` acks the highest finished sequence below every message the
 * pipeline still holds — one ack per flush instead of one per message, and never one that would
 * cover a message that is not finished.
 */
export class CumulativeAcks {
  /**
   * Finished and not yet covered by an ack, by ascending sequence: sequences and ack subjects side by
   * side from `from` on (no object per message; the consumed prefix is dropped once it is large).
   */
  private seqs: number[] = [];
  private replies: string[] = [];
  private from = 0;

  /**
   * A message is finished (relayed, suppressed, dead-lettered, or already in the destination). One
   * at or below what an ack covered already is a redelivery whose ack was lost (a source server that
   * restarted from disk): it is kept and acked again, or the server would hold it as pending forever.
   */
  done(seq: number, reply: string): void {
    if (reply === "") return;
    const { seqs, replies } = this;
    const n = seqs.length;
    if (n === this.from || seq > seqs[n - 1]!) {
      seqs.push(seq);
      replies.push(reply);
      return;
    }
    // A redelivery finished out of order (rare): kept sorted; the latest delivery's subject wins.
    let i = n - 1;
    while (i > this.from && seqs[i - 1]! >= seq) i--;
    if (seqs[i] === seq) replies[i] = reply;
    else {
      seqs.splice(i, 0, seq);
      replies.splice(i, 0, reply);
    }
  }

  /**
   * The ack subject that covers every finished message below `lowestHeld` (the lowest sequence the
   * pipeline still holds; undefined when it holds none), or undefined when there is nothing to ack.
   * The caller sends it.
   */
  flush(lowestHeld: number | undefined): string | undefined {
    const { seqs, replies } = this;
    let n = seqs.length;
    if (lowestHeld !== undefined) while (n > this.from && seqs[n - 1]! >= lowestHeld) n--;
    if (n === this.from) return undefined;
    const top = replies[n - 1]!;
    this.from = n;
    if (this.from === seqs.length) this.reset();
    else if (this.from >= 1_024) {
      this.seqs = seqs.slice(this.from);
      this.replies = replies.slice(this.from);
      this.from = 0;
    }
    return top;
  }

  /** Finished messages waiting for an ack. */
  get waiting(): number {
    return this.seqs.length - this.from;
  }

  /** Forgets everything (the cursor moved, or another relay owns the link now: their acks are its). */
  reset(): void {
    this.seqs.length = 0;
    this.replies.length = 0;
    this.from = 0;
  }
}
