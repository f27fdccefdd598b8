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
  /** Entries of it with publish attempts not answered yet (PubAck, error or timeout). */
  pending: number;
  /**
   * The highest version sent while `pending` has been above 0 (-1 when it is 0): an upper bound of the
   * versions unanswered, exact again whenever every answer is in.
   */
  pendingMax: number;
}

/**
 * Per entity, what this link put in the destination while it holds any message of that entity: the
 * highest version stored (a PubAck, or found by its marker), kept after that message is committed and
 * gone, and whether publishes of newer versions are still unanswered. A retried publish of an older
 * version is stale against a stored newer one (the guard knows it only after its commit, which may come
 * later than the retry), and waits for an unanswered newer one to be answered (stored or not). A
 * publish that failed (refused, timed out, its connection lost) counts as not stored: a newer version
 * stored without its PubAck reaching the relay is the reorder the relay detects and counts
 * (`relay_reordered_total`) when that newer message's retry gets its duplicate PubAck.
 * Held by the pipeline (`hold` when an entry arrives, `release` when it leaves the window), fed by the
 * publish stage (`sent`) and the PubAck stage (`answered`, `stored`). A few lookups of one Map per
 * message, none for a message without a version.
 */
export class SentVersions {
  private readonly byEntity = new Map<string, EntityRecord>();

  /** An entry of a versioned entity arrived: its entity's record is kept until it leaves. */
  hold(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined) return;
    const record = this.byEntity.get(entity);
    if (record) record.held++;
    else this.byEntity.set(entity, { held: 1, stored: -1, pending: 0, pendingMax: -1 });
  }

  /** A publish attempt of the entry is going out (a dead-letter record applies no version). */
  sent(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record || entry.deadLetterReason !== undefined) return;
    if (entry.unanswered++ === 0) record.pending++;
    const version = entry.identity.version as number;
    if (version > record.pendingMax) record.pendingMax = version;
  }

  /** An attempt of the entry was answered (a PubAck, an error, a timeout; `stored` follows a PubAck). */
  answered(entry: Entry): void {
    if (entry.unanswered === 0 || entry.state === "done") return;
    const record = this.recordOf(entry);
    if (--entry.unanswered === 0 && record) unpend(record);
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
    if (entry.unanswered > 0) {
      entry.unanswered = 0; // its answers, if they come, concern no record any more
      unpend(record);
    }
    if (--record.held <= 0) this.byEntity.delete(entry.identity.entity as string);
  }

  /** The highest version of `entity` stored while the link held one of its messages. */
  highestStored(entity: string): number | undefined {
    const stored = this.byEntity.get(entity)?.stored;
    return stored === undefined || stored < 0 ? undefined : stored;
  }

  /**
   * At least the highest version of `entity` whose publish is not answered yet (undefined: none is):
   * while any is unanswered, the highest sent since they all last were.
   */
  highestUnanswered(entity: string): number | undefined {
    const record = this.byEntity.get(entity);
    return record && record.pending > 0 ? record.pendingMax : undefined;
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

function unpend(record: EntityRecord): void {
  if (--record.pending <= 0) {
    record.pending = 0;
    record.pendingMax = -1;
  }
}
