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
  /** The consumer (delivery) sequence of each reply: AckAll ignores an ack below the highest it took. */
  private dseqs: number[] = [];
  private from = 0;

  /**
   * A message is finished (relayed, suppressed, dead-lettered, or already in the destination). One
   * at or below what an ack covered already is a redelivery whose ack was lost (a source server that
   * restarted from disk): it is kept and acked again, or the server would hold it as pending forever.
   */
  done(seq: number, reply: string, dseq = 0): void {
    if (reply === "") return;
    const { seqs, replies, dseqs } = this;
    const n = seqs.length;
    if (n === this.from || seq > seqs[n - 1]!) {
      seqs.push(seq);
      replies.push(reply);
      dseqs.push(dseq);
      return;
    }
    // A redelivery finished out of order (rare): kept sorted; the latest delivery's subject wins.
    let i = n - 1;
    while (i > this.from && seqs[i - 1]! >= seq) i--;
    if (seqs[i] === seq) {
      replies[i] = reply;
      dseqs[i] = dseq;
    } else {
      seqs.splice(i, 0, seq);
      replies.splice(i, 0, reply);
      dseqs.splice(i, 0, dseq);
    }
  }

  /**
   * The ack subject that covers every finished message below `lowestHeld` (the lowest sequence the
   * pipeline still holds; undefined when it holds none), or undefined when there is nothing to ack.
   * The caller sends it.
   *
   * `lowestHeldDseq`: the lowest delivery sequence among the messages still held. The server takes an
   * AckAll only above the highest delivery sequence it took before, so an ack subject of a redelivery
   * (a high delivery sequence for an old message, after a source failover) sent now would make it
   * ignore the acks of the messages still held, delivered before it, until their ack wait: a stall.
   * Such a subject is passed over for the highest one below it that is not; what it would have covered
   * is covered by a later ack.
   */
  flush(lowestHeld: number | undefined, lowestHeldDseq?: number): string | undefined {
    const { seqs, replies, dseqs } = this;
    let n = seqs.length;
    if (lowestHeld !== undefined) while (n > this.from && seqs[n - 1]! >= lowestHeld) n--;
    if (lowestHeldDseq !== undefined) while (n > this.from && dseqs[n - 1]! > lowestHeldDseq) n--;
    if (n === this.from) return undefined;
    const top = replies[n - 1]!;
    this.from = n;
    if (this.from === seqs.length) this.reset();
    else if (this.from >= 1_024) {
      this.seqs = seqs.slice(this.from);
      this.replies = replies.slice(this.from);
      this.dseqs = dseqs.slice(this.from);
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
    this.dseqs.length = 0;
    this.from = 0;
  }
}
