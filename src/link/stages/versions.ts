/**
 * What a link's pipeline knows of its entities' versions beyond the guard's committed ones: the versions
 * it claimed and has not committed yet (an older version claimed after them is stale), and the versions
 * it sent to the destination (a retried older version is stale against them).
 */
import type { Entry } from "../entry.js";

/**
 * Per entity, the highest version this pipeline claimed and has not committed yet. The guard compares
 * a claim with committed versions only; this makes an older version claimed after a newer one stale
 * too. Set by the claim stage, dropped by the source ack (committed) or a dead-letter (never applied).
 */
export class UncommittedVersions {
  private readonly byEntity = new Map<string, number>();

  /** The version of `entity` claimed and not committed yet, if any. */
  get(entity: string): number | undefined {
    return this.byEntity.get(entity);
  }

  set(entity: string, version: number): void {
    this.byEntity.set(entity, version);
  }

  /** Drops the entity's pending version when it is this entry's (it will not be applied). */
  forget(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity !== undefined && this.byEntity.get(entity) === version) this.byEntity.delete(entity);
  }

  /** The entry is finished: a claimed version (committed, or stale) is known to the guard now. */
  settled(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity !== undefined && entry.token !== undefined && this.byEntity.get(entity) === version) {
      this.byEntity.delete(entity); // committed (or stale): the guard knows it now
    }
  }

  clear(): void {
    this.byEntity.clear();
  }
}

interface EntityRecord {
  /** Entries of the entity in the window. */
  held: number;
  /** The highest version of it stored (-1: none). */
  stored: number;
  /** Entries of it with publish attempts not answered yet (PubAck, error or timeout), and how many. */
  unanswered: Map<Entry, number> | undefined;
  /** The highest version among `unanswered` (-1: none; undefined: to be found again). */
  unansweredMax: number | undefined;
}

/**
 * Per entity, what this link put in the destination while it holds any message of that entity: the
 * highest version stored (a PubAck, or found by its marker), kept after that message is committed and
 * gone, and the messages of it whose publish is not answered yet. A retried publish of an older version
 * is stale against a stored newer one (the guard knows it only after its commit, which may come later
 * than the retry), and waits for an unanswered newer one to be answered (stored or not). A publish
 * that failed (refused, timed out, its connection lost) counts as not stored: a newer version stored
 * without its PubAck reaching the relay is the reorder the relay detects and counts
 * (`relay_reordered_total`) when that newer message's retry gets its duplicate PubAck.
 * Held by the pipeline (`hold` when an entry arrives, `release` when it leaves the window), fed by the
 * publish stage (`sent`) and the PubAck stage (`answered`, `stored`).
 */
export class SentVersions {
  private readonly byEntity = new Map<string, EntityRecord>();

  /** An entry of a versioned entity arrived: its entity's record is kept until it leaves. */
  hold(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined) return;
    const record = this.byEntity.get(entity);
    if (record) record.held++;
    else this.byEntity.set(entity, { held: 1, stored: -1, unanswered: undefined, unansweredMax: -1 });
  }

  /** A publish attempt of the entry is going out (a dead-letter record applies no version). */
  sent(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record || entry.deadLetterReason !== undefined) return;
    const unanswered = (record.unanswered ??= new Map());
    unanswered.set(entry, (unanswered.get(entry) ?? 0) + 1);
    if (record.unansweredMax !== undefined)
      record.unansweredMax = Math.max(record.unansweredMax, entry.identity.version as number);
  }

  /** An attempt of the entry was answered (a PubAck, an error, a timeout; `stored` follows a PubAck). */
  answered(entry: Entry): void {
    const record = this.recordOf(entry);
    const n = record?.unanswered?.get(entry);
    if (!record || n === undefined) return;
    if (n > 1) record.unanswered?.set(entry, n - 1);
    else forget(record, entry);
  }

  /** The entry is in the destination. */
  stored(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record || entry.deadLetterReason !== undefined) return;
    const version = entry.identity.version as number;
    if (version > record.stored) record.stored = version;
  }

  /** The entry left the window: its entity's record goes when no entry of it is held. */
  release(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record) return;
    forget(record, entry);
    if (--record.held <= 0) this.byEntity.delete(entry.identity.entity as string);
  }

  /** The highest version of `entity` stored while the link held one of its messages. */
  highestStored(entity: string): number | undefined {
    const stored = this.byEntity.get(entity)?.stored;
    return stored === undefined || stored < 0 ? undefined : stored;
  }

  /** The highest version of `entity` whose publish is not answered yet. */
  highestUnanswered(entity: string): number | undefined {
    const record = this.byEntity.get(entity);
    if (!record) return undefined;
    if (record.unansweredMax === undefined) {
      // The highest of them was answered: found again once (versions grow along a window, so this is rare).
      let max = -1;
      for (const e of record.unanswered?.keys() ?? []) max = Math.max(max, e.identity.version as number);
      record.unansweredMax = max;
    }
    return record.unansweredMax < 0 ? undefined : record.unansweredMax;
  }

  /** Entities with a record (tests). */
  get size(): number {
    return this.byEntity.size;
  }

  clear(): void {
    this.byEntity.clear();
  }

  private recordOf(entry: Entry): EntityRecord | undefined {
    const { entity, version } = entry.identity;
    return entity === undefined || version === undefined ? undefined : this.byEntity.get(entity);
  }
}

/** No attempt of `entry` is unanswered any more (or it left). */
function forget(record: EntityRecord, entry: Entry): void {
  if (!record.unanswered?.delete(entry)) return;
  if (entry.identity.version === record.unansweredMax) record.unansweredMax = undefined;
}
