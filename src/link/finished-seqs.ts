/**
 * The source sequences a link's pipeline finished (acked), newest first kept, each with where the
 * destination holds it (0: not stored). A consumer that lost acks (a stream leader failover) delivers
 * them again, maybe later than the destination's duplicate window: the intake looks them up.
 *
 * A link finishes its messages in source order almost always, so they are kept in a ring of two typed
 * arrays in that order, looked up by binary search: recording one is two stores, no hashing, no
 * garbage, and a first delivery above the newest (the common case) is one comparison. What is finished
 * below the newest one (a redelivery finished late) is kept aside in a map, bounded the same way. The
 * ring starts small and doubles up to `kept`, then overwrites its oldest: an idle link holds 4 KiB.
 */
export class FinishedSeqs {
  private seqs: Float64Array;
  private dests: Float64Array;
  /** Where the oldest entry is; entry i (0 = oldest) is at (start + i) & mask. */
  private start = 0;
  private count = 0;
  private newest = 0;
  /** Finished below `newest` when it was finished: not in source order, so not in the ring. */
  private readonly late = new Map<number, number>();

  /** `kept` and `initial`: powers of two. */
  constructor(
    private readonly kept: number,
    private readonly initial: number,
  ) {
    this.seqs = new Float64Array(initial);
    this.dests = new Float64Array(initial);
  }

  /** Where the destination holds `seq` (0: not stored), or undefined when it is not (or no longer) known. */
  get(seq: number): number | undefined {
    if (seq > this.newest) return undefined; // nothing above the newest was finished
    const slot = this.find(seq);
    return slot >= 0 ? this.dests[slot] : this.late.get(seq);
  }

  /** `seq` is finished, stored at `dest`: a sequence finished before is updated, not added again. */
  set(seq: number, dest: number): void {
    if (this.count > 0 && seq <= this.newest) {
      const slot = this.find(seq);
      if (slot >= 0) {
        this.dests[slot] = dest;
        return;
      }
      const known = this.late.has(seq);
      this.late.set(seq, dest);
      // Oldest first (a Map keeps insertion order); rare, so its iterator's walk over holes is no cost.
      if (!known && this.late.size > this.kept) this.late.delete(this.late.keys().next().value!);
      return;
    }
    if (this.count === this.seqs.length) {
      if (this.seqs.length < this.kept) this.grow();
      else {
        this.start = (this.start + 1) & (this.seqs.length - 1); // the oldest goes
        this.count--;
      }
    }
    const slot = (this.start + this.count) & (this.seqs.length - 1);
    this.seqs[slot] = seq;
    this.dests[slot] = dest;
    this.count++;
    this.newest = seq;
  }

  clear(): void {
    this.seqs = new Float64Array(this.initial);
    this.dests = new Float64Array(this.initial);
    this.start = 0;
    this.count = 0;
    this.newest = 0;
    this.late.clear();
  }

  /** The ring slot holding `seq`, or -1 (binary search: the ring is in increasing order). */
  private find(seq: number): number {
    const mask = this.seqs.length - 1;
    let lo = 0;
    let hi = this.count - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const slot = (this.start + mid) & mask;
      const at = this.seqs[slot]!;
      if (at === seq) return slot;
      if (at < seq) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  private grow(): void {
    const size = this.seqs.length * 2;
    const seqs = new Float64Array(size);
    const dests = new Float64Array(size);
    const mask = this.seqs.length - 1;
    for (let i = 0; i < this.count; i++) {
      const slot = (this.start + i) & mask;
      seqs[i] = this.seqs[slot]!;
      dests[i] = this.dests[slot]!;
    }
    this.seqs = seqs;
    this.dests = dests;
    this.start = 0;
  }
}
