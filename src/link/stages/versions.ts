/**
 * Per entity, the highest version this pipeline claimed and has not committed yet. The guard compares
 * a claim with committed versions only; this makes an older version claimed after a newer one stale
 * too. Set by the claim stage, dropped by the source ack (committed) or a dead-letter (never applied).
 */
import type { Entry } from "../entry.js";

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
