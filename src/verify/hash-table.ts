/**
 * Compact string-keyed tables for `verify`: a key is kept as a 64-bit hash, never as the string, so a
 * million message ids cost 21–42 bytes each instead of the ~100 of a `Map<string, number>` entry and
 * its string (measured figures in docs/verify.md).
 *
 * Why a hash and not the string: memory is the constraint (1,000,000 messages per side under 512 MB),
 * and the verifier only needs membership and counts. Why two 32-bit halves and not `node:crypto`: a
 * SHA-1 call costs about a microsecond of native-call overhead per id; these loops cost tens of
 * nanoseconds for ids of tens of characters, and JavaScript has no cheap 64-bit integer multiply
 * (BigInt allocates). The cost is a collision chance: for n keys about n² / 2⁶⁵, i.e. 3e-8 at one
 * million ids. A collision can hide one missing id or invent one duplicate; docs/verify.md says so.
 */

/** FNV-1a (32 bit) and a murmur2-style multiply–xorshift, over UTF-16 code units, each finished with
 *  murmur3's fmix32 so that every output bit depends on every input bit. */
export function hashKey(key: string, out: Uint32Array): void {
  let a = 0x811c9dc5;
  let b = 0x9747b28c ^ key.length;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  out[0] = fmix32(a ^ key.length);
  out[1] = fmix32(b);
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

type NumberArray = Uint8Array | Uint32Array | Float64Array;

/** A typed array that doubles when an index past its end is written: one value per table entry. */
export class Column<T extends NumberArray> {
  data: T;

  constructor(private readonly make: (length: number) => T) {
    this.data = make(1024);
  }

  /** Makes `index` valid, keeping what is there; new slots are 0. */
  ensure(index: number): void {
    if (index < this.data.length) return;
    let length = this.data.length * 2;
    while (length <= index) length *= 2;
    const next = this.make(length);
    next.set(this.data);
    this.data = next;
  }
}

/**
 * Open addressing (linear probing) from a 64-bit key hash to a dense entry number 0, 1, 2, ... in
 * insertion order. Values live in `Column`s indexed by entry number, owned by the caller. The slot array
 * holds entry + 1 (0 = empty) and stays at most half full; growing rehashes from the stored hashes.
 */
export class HashedKeyTable {
  private slots = new Int32Array(1 << 12);
  private mask = (1 << 12) - 1;
  private readonly lo = new Column((n) => new Uint32Array(n));
  private readonly hi = new Column((n) => new Uint32Array(n));
  private readonly scratch = new Uint32Array(2);
  private count = 0;
  /** Set by `put`: whether the last key put was new. */
  created = false;

  /** Number of distinct keys. */
  get size(): number {
    return this.count;
  }

  /** Bytes held by the table itself (not by the caller's columns). */
  get bytes(): number {
    return this.slots.byteLength + this.lo.data.byteLength + this.hi.data.byteLength;
  }

  /** The entry number of `key`, or -1. */
  get(key: string): number {
    hashKey(key, this.scratch);
    const lo = this.scratch[0] ?? 0;
    const hi = this.scratch[1] ?? 0;
    for (let i = lo & this.mask; ; i = (i + 1) & this.mask) {
      const slot = this.slots[i] ?? 0;
      if (slot === 0) return -1;
      const e = slot - 1;
      if (this.lo.data[e] === lo && this.hi.data[e] === hi) return e;
    }
  }

  /** The entry number of `key`, adding it when absent (`created` says which). */
  put(key: string): number {
    if ((this.count + 1) * 2 > this.slots.length) this.grow();
    hashKey(key, this.scratch);
    const lo = this.scratch[0] ?? 0;
    const hi = this.scratch[1] ?? 0;
    let i = lo & this.mask;
    for (;;) {
      const slot = this.slots[i] ?? 0;
      if (slot === 0) break;
      const e = slot - 1;
      if (this.lo.data[e] === lo && this.hi.data[e] === hi) {
        this.created = false;
        return e;
      }
      i = (i + 1) & this.mask;
    }
    const e = this.count++;
    this.lo.ensure(e);
    this.hi.ensure(e);
    this.lo.data[e] = lo;
    this.hi.data[e] = hi;
    this.slots[i] = e + 1;
    this.created = true;
    return e;
  }

  private grow(): void {
    const slots = new Int32Array(this.slots.length * 2);
    const mask = slots.length - 1;
    for (let e = 0; e < this.count; e++) {
      let i = (this.lo.data[e] ?? 0) & mask;
      while (slots[i] !== 0) i = (i + 1) & mask;
      slots[i] = e + 1;
    }
    this.slots = slots;
    this.mask = mask;
  }
}
