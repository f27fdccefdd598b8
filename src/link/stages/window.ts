/**
 * The entries a link's pipeline holds, in arrival order, with the publish cursor into them: what every
 * stage walks or looks up. The pipeline owns it; an entry leaves it when its source ack is done.
 */
import type { Delivery } from "../../nats/delivery.js";
import type { Entry } from "../entry.js";

export class EntryWindow {
  /** Arrival order; `entries[head]` is the oldest live entry (finished ones are compacted away lazily). */
  readonly entries: Entry[] = [];
  head = 0;
  /** Index into entries of the next entry that may need publishing (>= head). */
  publishPos = 0;
  /** Every entry between receive and ack, by source sequence. */
  readonly bySeq = new Map<number, Entry>();
  private heldBytes = 0;
  /**
   * Held entries that arrived below a higher sequence or delivery sequence than one before them (a
   * redelivery, a consumer leader that numbers again, a resync pass), or whose delivery sequence a
   * redelivery raised. While there are none, the oldest live entry holds the lowest of both.
   */
  private readonly outOfOrder = new Set<Entry>();
  private highestSeq = 0;
  private highestDseq = 0;

  /** Messages between receive and ack. */
  get size(): number {
    return this.bySeq.size;
  }

  /** Payload and header bytes between receive and ack (headers estimated). */
  get bytes(): number {
    return this.heldBytes;
  }

  /** Messages sent to the destination and not acked at the source yet (publishing, published, committing). */
  get unsettled(): number {
    let n = 0;
    for (const e of this.bySeq.values()) if (e.state === "publishing" || e.state === "published" || e.state === "committing") n++;
    return n;
  }

  /** Publish time (ms) of the oldest message not yet acked, if any. */
  get oldestSourceMs(): number | undefined {
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (e && e.state !== "done") return e.sourceMs;
    }
    return undefined;
  }

  /** A redelivery while we still hold the message: its ack subject acks both. False when not held. */
  redelivered(msg: Delivery): boolean {
    if (msg.streamSequence > this.highestSeq) return false; // above all it ever held (the common case): no lookup
    const known = this.bySeq.get(msg.streamSequence);
    if (!known) return false;
    known.reply = msg.reply;
    known.dseq = msg.consumerSequence;
    this.outOfOrder.add(known);
    return true;
  }

  add(entry: Entry): void {
    if (entry.seq < this.highestSeq || entry.dseq < this.highestDseq) this.outOfOrder.add(entry);
    this.highestSeq = Math.max(this.highestSeq, entry.seq);
    this.highestDseq = Math.max(this.highestDseq, entry.dseq);
    this.entries.push(entry);
    this.bySeq.set(entry.seq, entry);
    this.heldBytes += entry.heldBytes;
  }

  /** The entry is done (acked, or left for the next owner): it no longer counts. False when it was not held. */
  remove(entry: Entry): boolean {
    entry.state = "done";
    const held = this.bySeq.delete(entry.seq);
    if (held) this.heldBytes -= entry.heldBytes;
    if (this.outOfOrder.size > 0) this.outOfOrder.delete(entry);
    return held;
  }

  /**
   * The lowest source sequence and the lowest delivery sequence among the held entries (undefined when
   * none is held): what a cumulative ack must stay below. The oldest live entry when every held entry
   * arrived in order (a pump's work, whatever the window's size); a scan of them all otherwise.
   */
  lowestHeld(): { seq: number; dseq: number } | undefined {
    if (this.bySeq.size === 0) return undefined;
    if (this.outOfOrder.size === 0) {
      for (let i = this.head; i < this.entries.length; i++) {
        const e = this.entries[i];
        if (e && e.state !== "done") return { seq: e.seq, dseq: e.dseq };
      }
    }
    let seq = Infinity;
    let dseq = Infinity;
    for (const e of this.bySeq.values()) {
      if (e.seq < seq) seq = e.seq;
      if (e.dseq < dseq) dseq = e.dseq;
    }
    return { seq, dseq };
  }

  /** Where `entry` is in `entries` (-1: gone). */
  indexOf(entry: Entry): number {
    return this.entries.indexOf(entry, this.head);
  }

  /** A held entry with this id, for decision logs. */
  findById(id: string): Entry | undefined {
    for (const e of this.bySeq.values()) if (e.identity.id === id) return e;
    return undefined;
  }

  /** Moves `head` past finished entries; compacts the array once the dead prefix is large. */
  trim(): void {
    while (this.head < this.entries.length && this.entries[this.head]?.state === "done") this.head++;
    if (this.head < 4_096 && this.head * 2 < this.entries.length) return;
    this.entries.splice(0, this.head);
    this.publishPos = Math.max(0, this.publishPos - this.head);
    this.head = 0;
  }

  /**
   * Forgets every entry (each is done); returns those holding a guard claim that was not published,
   * for the claim stage to release.
   */
  clear(): Entry[] {
    const claimed = this.entries.filter((e) => e.token !== undefined && (e.state === "ready" || e.state === "publishing"));
    for (const e of this.entries) e.state = "done";
    this.entries.length = 0;
    this.head = 0;
    this.bySeq.clear();
    this.outOfOrder.clear();
    this.highestSeq = 0;
    this.highestDseq = 0;
    this.heldBytes = 0;
    this.publishPos = 0;
    return claimed;
  }
}
