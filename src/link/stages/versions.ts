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

/**
 * Per entity, the highest version this link has sent to the destination (a publish attempt: stored, or
 * perhaps stored), kept while the link holds any message of that entity. A retried publish of an older
 * version is stale against it: the newer one is (or may be) in the destination already, and the guard
 * knows it only after its commit, which may come later than the retry. Held by the pipeline (`hold`
 * when an entry arrives, `release` when it leaves the window), set by the publish stage (`sent`).
 */
export class SentVersions {
  private readonly byEntity = new Map<string, { held: number; sent: number }>();

  /** An entry of a versioned entity arrived: its entity's record is kept until it leaves. */
  hold(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined) return;
    const record = this.byEntity.get(entity);
    if (record) record.held++;
    else this.byEntity.set(entity, { held: 1, sent: -1 });
  }

  /** A publish attempt of the entry is going out (a dead-letter record applies no version). */
  sent(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined || entry.deadLetterReason !== undefined) return;
    const record = this.byEntity.get(entity);
    if (record && version > record.sent) record.sent = version;
  }

  /** The entry left the window: its entity's record goes when no entry of it is held. */
  release(entry: Entry): void {
    const { entity, version } = entry.identity;
    if (entity === undefined || version === undefined) return;
    const record = this.byEntity.get(entity);
    if (record && --record.held <= 0) this.byEntity.delete(entity);
  }

  /** The highest version of `entity` sent to the destination while the link held one of its messages. */
  highest(entity: string): number | undefined {
    const sent = this.byEntity.get(entity)?.sent;
    return sent === undefined || sent < 0 ? undefined : sent;
  }

  /** Entities with a record (tests). */
  get size(): number {
    return this.byEntity.size;
  }

  clear(): void {
    this.byEntity.clear();
  }
}
