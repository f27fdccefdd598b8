/**
 * Publishes waiting for their PubAck, by id. Ids are handed out in sequence and answered mostly in
 * order, so they live in a ring indexed by id (a Map with a thousand entries inserted and deleted per
 * turn rehashes and allocates as it goes; the ring allocates only when it grows). The ring spans from
 * the oldest unanswered id to the newest; answered slots inside it are empty until the oldest moves
 * past them. Iteration (`expire`, `drain`) is in id order, which is publish order and so deadline order.
 */
export class PendingPublishes<T> {
  private values: (T | undefined)[];
  private ids: Float64Array;
  private deadlines: Float64Array;
  private mask: number;
  /** The lowest id that may still be pending; `next` is the id the next `add` gets. */
  private oldest = 0;
  private next = 0;
  private count = 0;

  constructor(initialCapacity = 64) {
    const capacity = 2 ** Math.ceil(Math.log2(Math.max(2, initialCapacity)));
    this.values = new Array<T | undefined>(capacity);
    this.ids = new Float64Array(capacity).fill(-1);
    this.deadlines = new Float64Array(capacity);
    this.mask = capacity - 1;
  }

  get size(): number {
    return this.count;
  }

  /** Holds `value` until `deadline` (any monotone clock, as long as `expire` gets the same); returns its id. */
  add(value: T, deadline: number): number {
    if (this.next - this.oldest > this.mask) this.grow();
    const id = this.next++;
    const slot = id & this.mask;
    this.values[slot] = value;
    this.ids[slot] = id;
    this.deadlines[slot] = deadline;
    this.count++;
    return id;
  }

  /** The value of `id` when it is still pending, removing it; undefined when it is not (answered, expired, unknown). */
  take(id: number): T | undefined {
    if (!(id >= this.oldest && id < this.next)) return undefined;
    const slot = id & this.mask;
    if (this.ids[slot] !== id) return undefined;
    const value = this.values[slot];
    this.clear(slot);
    this.advance();
    return value;
  }

  /** Removes and returns every value whose deadline is before `now`, oldest first. */
  expire(now: number): T[] {
    const out: T[] = [];
    for (let id = this.oldest; id < this.next; id++) {
      const slot = id & this.mask;
      if (this.ids[slot] !== id) continue;
      if (this.deadlines[slot]! > now) break; // id order = deadline order
      out.push(this.values[slot]!);
      this.clear(slot);
    }
    this.advance();
    return out;
  }

  /** Removes and returns every pending value, oldest first. */
  drain(): T[] {
    const out: T[] = [];
    for (let id = this.oldest; id < this.next; id++) {
      const slot = id & this.mask;
      if (this.ids[slot] === id) out.push(this.values[slot]!);
      this.clear(slot);
    }
    this.oldest = this.next;
    return out;
  }

  private clear(slot: number): void {
    if (this.ids[slot] !== -1) this.count--;
    this.values[slot] = undefined;
    this.ids[slot] = -1;
  }

  /** Moves `oldest` past answered ids. */
  private advance(): void {
    while (this.oldest < this.next && this.ids[this.oldest & this.mask] !== this.oldest) this.oldest++;
  }

  private grow(): void {
    const { values, ids, deadlines } = this;
    const capacity = values.length * 2;
    this.values = new Array<T | undefined>(capacity);
    this.ids = new Float64Array(capacity).fill(-1);
    this.deadlines = new Float64Array(capacity);
    this.mask = capacity - 1;
    for (let slot = 0; slot < values.length; slot++) {
      const id = ids[slot]!;
      if (id < 0) continue;
      const to = id & this.mask;
      this.values[to] = values[slot];
      this.ids[to] = id;
      this.deadlines[to] = deadlines[slot]!;
    }
  }
}
