/**
 * What one link knows about its own messages in the destination stream, from PubAcks and from the
 * `Relay-Source` markers it read there (DESIGN §2.1, §2.5). The pipeline asks it three things:
 * - is this source sequence known to be stored already (read from the destination at start)?
 * - what is the highest destination sequence seen (a retried message's copy can only be above the
 *   value it had at the message's first attempt)?
 * - was a message just stored after a message that comes later in source order (a reorder the server
 *   made while an earlier publish failed)? Counted and logged, never silent.
 */
import { FinishedSeqs } from "./finished-seqs.js";

export interface StoredReorder {
  /** The message stored late. */
  readonly sourceSeq: number;
  readonly destSeq: number;
  /** The later source message that was stored before it. */
  readonly laterSourceSeq: number;
  readonly laterDestSeq: number;
}

/** Finished source sequences remembered for redeliveries (a consumer that lost acks in a failover). */
const FINISHED_KEPT = 65_536;
/** The record starts this small and doubles as the link finishes messages: an idle link costs 4 KiB, not 1 MiB. */
const FINISHED_INITIAL = 256;

export class DestinationLedger {
  private lastDest = 0;
  /** Source seq → destination seq (0 when it was not stored: a loop, a stale version, a guard duplicate). */
  private readonly finished = new FinishedSeqs(FINISHED_KEPT, FINISHED_INITIAL);
  private maxSource = 0;
  private maxSourceDest = 0;
  private known = new Map<number, number>();
  private knownUpTo = 0;

  /** The highest destination sequence seen in any PubAck of this link or in a marker it read. */
  get lastDestSeq(): number {
    return this.lastDest;
  }

  /**
   * Source sequences found stored in the destination by a scan (source seq → destination seq), and the
   * highest source sequence the scan covered. Replaces what an earlier scan said.
   */
  setKnown(stored: ReadonlyMap<number, number>, upToSourceSeq: number): void {
    this.known = new Map(stored);
    this.knownUpTo = upToSourceSeq;
    for (const dest of stored.values()) if (dest > this.lastDest) this.lastDest = dest;
  }

  /** The destination sequence holding `sourceSeq`, when a scan found it; forgotten once asked past. */
  storedAt(sourceSeq: number): number | undefined {
    if (sourceSeq > this.knownUpTo) return undefined;
    const dest = this.known.get(sourceSeq);
    if (dest !== undefined) this.known.delete(sourceSeq);
    return dest;
  }

  /**
   * Records that `sourceSeq` is in the destination at `destSeq`. `fresh`: this publish stored it (not a
   * duplicate answer). Returns the reorder when a later source message was stored before it.
   */
  stored(sourceSeq: number, destSeq: number, fresh: boolean): StoredReorder | undefined {
    if (destSeq > this.lastDest) this.lastDest = destSeq;
    if (!fresh) return undefined;
    let reorder: StoredReorder | undefined;
    if (sourceSeq < this.maxSource && destSeq > this.maxSourceDest) {
      reorder = { sourceSeq, destSeq, laterSourceSeq: this.maxSource, laterDestSeq: this.maxSourceDest };
    }
    if (sourceSeq > this.maxSource) {
      this.maxSource = sourceSeq;
      this.maxSourceDest = destSeq;
    }
    return reorder;
  }

  /**
   * Remembers that the pipeline is done with `sourceSeq` (acked): a source consumer that lost acks (a
   * stream leader failover) delivers it again, maybe later than the destination's duplicate window.
   */
  done(sourceSeq: number, destSeq: number): void {
    this.finished.set(sourceSeq, destSeq);
  }

  /** The outcome of a source sequence this pipeline already finished: its destination seq, 0 if not stored, undefined if unknown. */
  finishedAt(sourceSeq: number): number | undefined {
    return this.finished.get(sourceSeq);
  }

  /** The destination stream was recreated: its sequences start again, nothing seen in the old one compares. */
  destinationRestarted(): void {
    this.lastDest = 0;
    this.maxSource = 0;
    this.maxSourceDest = 0;
    this.known.clear();
    this.knownUpTo = 0;
  }

  /** The pipeline forgot what it held (lease lost, consumer moved back): nothing it remembers is an answer any more. */
  reset(): void {
    this.maxSource = 0;
    this.maxSourceDest = 0;
    this.finished.clear();
    this.known.clear();
    this.knownUpTo = 0;
  }
}
