/**
 * What a link's pipeline knows of its entities' versions beyond the guard's committed ones: the versions
 * it claimed and has not committed yet (an older version claimed after them is stale), and the versions
 * it sent to the destination (a retried older version is stale against them).
 */
import { ErrorCodes } from "../../errors.js";
import type { RelayError } from "../../errors.js";
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

/** A publish attempt that failed without saying the server did not store it (a timeout, a lost connection). */
const DOUBT = -1;

interface EntityRecord {
  /** Entries of the entity in the window. */
  held: number;
  /** The highest version of it stored (-1: none). */
  stored: number;
  /** Entries of it whose publish is unanswered (the count of attempts) or ended in DOUBT. */
  maybe: Map<Entry, number> | undefined;
  /** The highest version among `maybe` (-1: none; undefined: to be found again). */
  maybeMax: number | undefined;
}

/**
 * Per entity, the versions of it this link put in the destination, or perhaps did, while it holds any
 * message of that entity: the highest one stored (a PubAck, or found by its marker), kept after that
 * message is committed and gone, and the messages of it whose publish is unanswered or ended in doubt.
 * A retried publish of an older version is stale against them: the guard knows a newer version only
 * after its commit, which may come later than the retry. A publish the server refused (a full
 * destination, a message too large) stored nothing and does not count.
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
    else this.byEntity.set(entity, { held: 1, stored: -1, maybe: undefined, maybeMax: -1 });
  }

  /** A publish attempt of the entry is going out (a dead-letter record applies no version). */
  sent(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record || entry.deadLetterReason !== undefined) return;
    const maybe = (record.maybe ??= new Map());
    const unanswered = maybe.get(entry) ?? 0;
    if (unanswered !== DOUBT) maybe.set(entry, unanswered + 1);
    if (record.maybeMax !== undefined)
      record.maybeMax = Math.max(record.maybeMax, entry.identity.version as number);
  }

  /**
   * An attempt of the entry was answered: `err` null for a PubAck (then `stored` follows). A timeout or
   * a failure that is no answer of the server leaves the entry in doubt until it is stored or leaves.
   */
  answered(entry: Entry, err: RelayError | null): void {
    const record = this.recordOf(entry);
    const unanswered = record?.maybe?.get(entry);
    if (!record?.maybe || unanswered === undefined || unanswered === DOUBT) return;
    if (err !== null && (err.code === ErrorCodes.PUBLISH_TIMEOUT || err.code === ErrorCodes.PUBLISH_FAILED))
      record.maybe.set(entry, DOUBT);
    else if (unanswered > 1) record.maybe.set(entry, unanswered - 1);
    else forget(record, entry);
  }

  /** The entry is in the destination. */
  stored(entry: Entry): void {
    const record = this.recordOf(entry);
    if (!record || entry.deadLetterReason !== undefined) return;
    forget(record, entry);
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

  /** The highest version of `entity` in the destination, or perhaps there, while the link held one of its messages. */
  highest(entity: string): number | undefined {
    const record = this.byEntity.get(entity);
    if (!record) return undefined;
    if (record.maybeMax === undefined) {
      // The highest of them left: found again once (versions grow along a window, so this is rare).
      let max = -1;
      for (const e of record.maybe?.keys() ?? []) max = Math.max(max, e.identity.version as number);
      record.maybeMax = max;
    }
    const highest = Math.max(record.stored, record.maybeMax);
    return highest < 0 ? undefined : highest;
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

/** `entry` is no longer perhaps in the destination (stored, refused, or gone). */
function forget(record: EntityRecord, entry: Entry): void {
  if (!record.maybe?.delete(entry)) return;
  if (entry.identity.version === record.maybeMax) record.maybeMax = undefined;
}
