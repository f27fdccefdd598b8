/**
 * Where a link is, kept in the region's group bucket beside its lease (DESIGN §11), so a link whose
 * source consumer is gone never depends on how deep its last `Relay-Source` marker lies in a busy
 * destination:
 * - `_checkpoint.<lease key>`: the owner's checkpoint (link/checkpoint.ts): the source stream's
 *   incarnation and the consumer's ack floor, with the destination stream's incarnation and a
 *   destination sequence read before that floor. Every source seq at or below the floor is settled, and
 *   anything of the link stored later than the destination seq lies above it: positioning scans only
 *   what follows it.
 * - `_start.<lease key>`: an operator's explicit start (`jetstream-relay link start-at`), read only by a
 *   link whose position cannot be known otherwise (it would halt with POSITION_UNKNOWN), and deleted
 *   once the link's new consumer starts there.
 * Every relay has a group bucket (a relay alone is a group of one), so every relay has these keys.
 */
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { isBucketGone, openGroupBucket } from "./bucket.js";

export const CHECKPOINT_PREFIX = "_checkpoint";
export const START_PREFIX = "_start";
export const AUDIT_PREFIX = "_audit";

/** A link's position as its owner last wrote it. */
export interface LinkCheckpoint {
  /** Creation time (ms since the epoch) of the source stream the sequences belong to. */
  readonly sourceCreatedMs: number;
  /** The consumer's ack floor: every source seq at or below it is in the destination (or not the link's). */
  readonly sourceSeq: number;
  /** Creation time (ms since the epoch) of the destination stream `destSeq` belongs to. */
  readonly destCreatedMs: number;
  /** The destination's last sequence, read before `sourceSeq`: the link's later records lie above it. */
  readonly destSeq: number;
  /** When it was written (ISO 8601). */
  readonly at: string;
}

/** An operator's explicit start for a link whose position is unknown. */
export interface ExplicitStart {
  /**
   * The source sequence the new consumer starts at, or `"startAt"`: where the link's `startAt` says (the
   * operator knows the link has no record: a new link on a destination others fill past the scan's bound).
   */
  readonly seq: number | "startAt";
  readonly by: string;
  readonly at: string;
  readonly reason: string;
}

export function checkpointKey(leaseKey: string): string {
  return `${CHECKPOINT_PREFIX}.${leaseKey}`;
}

export function auditKey(leaseKey: string): string {
  return `${AUDIT_PREFIX}.${leaseKey}`;
}

export function startKey(leaseKey: string): string {
  return `${START_PREFIX}.${leaseKey}`;
}

const positiveInt = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A stored checkpoint, or undefined when the text is not one (never guessed from). */
export function parseCheckpoint(text: string): LinkCheckpoint | undefined {
  const o = parseJson(text);
  if (!o) return undefined;
  const { sourceCreatedMs, sourceSeq, destCreatedMs, destSeq, at } = o;
  if (
    !positiveInt(sourceCreatedMs) ||
    !positiveInt(sourceSeq) ||
    !positiveInt(destCreatedMs) ||
    !positiveInt(destSeq)
  )
    return undefined;
  return { sourceCreatedMs, sourceSeq, destCreatedMs, destSeq, at: typeof at === "string" ? at : "" };
}

/** A stored explicit start, or undefined when the text is not one. */
export function parseExplicitStart(text: string): ExplicitStart | undefined {
  const o = parseJson(text);
  const seq = o?.["seq"];
  if (!o || (seq !== "startAt" && (!positiveInt(seq) || seq < 1))) return undefined;
  const str = (x: unknown) => (typeof x === "string" ? x : "");
  return { seq, by: str(o["by"]), at: str(o["at"]), reason: str(o["reason"]) };
}

/** Writes an operator's explicit start (the CLI). Resolves with the key's revision. */
export async function writeExplicitStart(kv: KV, leaseKey: string, value: ExplicitStart): Promise<number> {
  return kv.put(
    startKey(leaseKey),
    JSON.stringify({ seq: value.seq, by: value.by, at: value.at, reason: value.reason }),
  );
}

/** What a link reads and writes of its own position (link/cursor.ts, link/checkpoint.ts). */
export interface PositionStore {
  /** The link's checkpoint, or undefined when none was written (or the key holds no checkpoint). */
  checkpoint(): Promise<LinkCheckpoint | undefined>;
  writeCheckpoint(value: LinkCheckpoint): Promise<void>;
  /** The operator's explicit start and the key's revision, when there is one. */
  explicitStart(): Promise<{ value: ExplicitStart; revision: number } | undefined>;
  /** The explicit start was applied: its key goes (unless it was written again since). */
  startApplied(revision: number): Promise<void>;
  /** The link's audit position as its owner last wrote it (audit/audit-state.ts parses it), with the key's revision. */
  auditState(): Promise<{ text: string; revision: number } | undefined>;
  /**
   * Writes the audit position; `revision`: the one read (0: the key must not exist). Rejects when another
   * writer wrote it since (an ex-owner's late write never goes back over a newer one).
   */
  writeAuditState(text: string, revision: number): Promise<number>;
}

export interface LinkPositionsOptions {
  /** The region's own cluster (the relay's ownership connection). Not closed here. */
  readonly nc: NatsConnection;
  readonly domain?: string | undefined;
  readonly bucket: string;
  /** Timeout of one KV request (ms). */
  readonly timeoutMs: number;
}

/** The relay's view of the position keys: the bucket is opened on first use (and again after a failure). */
export class LinkPositions {
  private kv: Promise<KV> | undefined;

  constructor(private readonly opts: LinkPositionsOptions) {}

  /** The store of one link unit, by its lease key. */
  of(leaseKey: string): PositionStore {
    return {
      checkpoint: () =>
        this.use(async (kv) => {
          const e = await kv.get(checkpointKey(leaseKey));
          return e && e.operation === "PUT" ? parseCheckpoint(e.string()) : undefined;
        }),
      writeCheckpoint: (value) =>
        this.use(async (kv) => {
          await kv.put(checkpointKey(leaseKey), JSON.stringify(value));
        }),
      explicitStart: () =>
        this.use(async (kv) => {
          const e = await kv.get(startKey(leaseKey));
          const value = e && e.operation === "PUT" ? parseExplicitStart(e.string()) : undefined;
          return e && value ? { value, revision: e.revision } : undefined;
        }),
      startApplied: (revision) =>
        this.use(async (kv) => {
          await kv.delete(startKey(leaseKey), { previousSeq: revision });
        }),
      auditState: () =>
        this.use(async (kv) => {
          const e = await kv.get(auditKey(leaseKey));
          return e && e.operation === "PUT" ? { text: e.string(), revision: e.revision } : undefined;
        }),
      writeAuditState: (text, revision) =>
        this.use((kv) => (revision === 0 ? kv.create(auditKey(leaseKey), text) : kv.update(auditKey(leaseKey), text, revision))),
    };
  }

  /** `fn` on the bucket; a bucket found gone is opened again (created) on the next call. */
  private async use<T>(fn: (kv: KV) => Promise<T>): Promise<T> {
    const opened = this.bucket();
    try {
      return await fn(await opened);
    } catch (err) {
      if (isBucketGone(err) && this.kv === opened) this.kv = undefined;
      throw err;
    }
  }

  private bucket(): Promise<KV> {
    const opened = (this.kv ??= openGroupBucket(this.opts));
    opened.catch(() => {
      if (this.kv === opened) this.kv = undefined;
    });
    return opened;
  }
}
