/**
 * What one audit pass learns from the destination about a range of source sequences (from, to]: which
 * of them have a copy (one bit each, so a range of ten million costs 1.25 MB), which have more than one,
 * and the order and versions of the copies as they are stored. Fed the link's copies in destination
 * order (copies.ts); decides nothing about the sequences without a copy (gaps.ts does).
 */
import type { Copy } from "./copies.js";

/** Examples kept per kind of finding. */
export const EXAMPLES = 20;

export interface OrderFinding {
  readonly sourceSeq: number;
  readonly destSeq: number;
  readonly afterSourceSeq: number;
}

export interface VersionFinding {
  readonly entity: string;
  readonly before: number;
  readonly after: number;
  readonly destSeq: number;
}

/** Entities whose last version the audit keeps between passes (the oldest are forgotten past it). */
const MAX_ENTITIES = 100_000;

/**
 * The order and version state that goes on from pass to pass: the highest source seq stored so far,
 * and each entity's last version in destination order.
 */
export class CopyOrder {
  reordered = 0;
  backwards = 0;
  readonly reorderExamples: OrderFinding[] = [];
  readonly backwardExamples: VersionFinding[] = [];
  private readonly versions = new Map<string, number>();

  constructor(public highest = 0) {}

  /** A first copy, in destination order. Repaired and resync copies are appended late by design. */
  note(copy: Copy): void {
    if (!copy.late) {
      if (copy.sourceSeq >= this.highest) this.highest = copy.sourceSeq;
      else {
        this.reordered++;
        if (this.reorderExamples.length < EXAMPLES)
          this.reorderExamples.push({ sourceSeq: copy.sourceSeq, destSeq: copy.destSeq, afterSourceSeq: this.highest });
      }
    }
    const { entity, version } = copy;
    if (entity === undefined || version === undefined) return;
    const before = this.versions.get(entity);
    if (before !== undefined && version < before) {
      this.backwards++;
      if (this.backwardExamples.length < EXAMPLES)
        this.backwardExamples.push({ entity, before, after: version, destSeq: copy.destSeq });
      return;
    }
    this.versions.delete(entity); // re-inserted last: the map's order is the forgetting order
    this.versions.set(entity, version);
    if (this.versions.size > MAX_ENTITIES) {
      const oldest = this.versions.keys().next().value;
      if (oldest !== undefined) this.versions.delete(oldest);
    }
  }

  /** Findings counted since the last call (the pass reports them, then they start again). */
  take(): { reordered: number; backwards: number; reorderExamples: OrderFinding[]; backwardExamples: VersionFinding[] } {
    const out = {
      reordered: this.reordered,
      backwards: this.backwards,
      reorderExamples: this.reorderExamples.splice(0),
      backwardExamples: this.backwardExamples.splice(0),
    };
    this.reordered = 0;
    this.backwards = 0;
    return out;
  }
}

export class RangeRecord {
  private readonly bits: Uint8Array;
  /** Copies beyond the first of a source seq in the range. */
  extra = 0;
  readonly extraExamples: { sourceSeq: number; destSeq: number; id: string }[] = [];
  /** Copies of sequences above the range (in flight when the range's end was read): the next pass's. */
  readonly later: Copy[] = [];
  /** Copies of sequences at or below the range's start (a repair's, a late retry's). */
  earlier = 0;
  /** The lowest source seq of the range with a copy (Infinity: none). */
  lowest = Infinity;

  constructor(
    /** Sequences above this are judged... */
    readonly from: number,
    /** ...up to this one. */
    readonly to: number,
  ) {
    this.bits = new Uint8Array(Math.ceil(Math.max(0, to - from) / 8));
  }

  /** Whether a copy of `seq` was noted (only for seqs in the range). */
  has(seq: number): boolean {
    const i = seq - this.from - 1;
    return (this.bits[i >> 3]! & (1 << (i & 7))) !== 0;
  }

  /** A copy of the link, in destination order: true when it is the first copy of its source seq here. */
  note(copy: Copy): boolean {
    const seq = copy.sourceSeq;
    if (seq <= this.from) {
      this.earlier++;
      return false;
    }
    if (seq > this.to) {
      this.later.push(copy);
      return true;
    }
    const i = seq - this.from - 1;
    const bit = 1 << (i & 7);
    if ((this.bits[i >> 3]! & bit) !== 0) {
      this.extra++;
      if (this.extraExamples.length < EXAMPLES) this.extraExamples.push({ sourceSeq: seq, destSeq: copy.destSeq, id: copy.id });
      return false;
    }
    this.bits[i >> 3]! |= bit;
    if (seq < this.lowest) this.lowest = seq;
    return true;
  }

  /** The sequences of the range without a copy, in order (at most `limit`, then `more` says how many were left). */
  gaps(limit = Infinity, above = this.from): { seqs: number[]; more: number } {
    const seqs: number[] = [];
    let more = 0;
    const n = this.to - this.from;
    for (let byte = 0; byte < this.bits.length; byte++) {
      const b = this.bits[byte]!;
      if (b === 0xff) continue;
      for (let k = 0; k < 8; k++) {
        const i = byte * 8 + k;
        if (i >= n) break;
        if ((b & (1 << k)) !== 0 || this.from + 1 + i <= above) continue;
        if (seqs.length < limit) seqs.push(this.from + 1 + i);
        else more++;
      }
    }
    return { seqs, more };
  }
}
