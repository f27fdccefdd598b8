import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { KvEntry } from "@nats-io/kv";
import { isApiCode } from "../nats/durable-consumer.js";
import type { CompiledLeaseOptions, LeaseValue } from "./types.js";

/**
 * The JSON value stored under a lease key (LeaseValue in types.ts): what a member's write stores,
 * how a read decodes it, and the answer that tells a CAS write it lost to another one.
 */

/**
 * LeaseValue as its JSON stores it. Wire format, shared by the members of a group whatever their
 * version (a rolling upgrade runs old and new relays side by side) and read by operators (`nats kv
 * get`): the lease revision keeps the JSON key `epoch`, its name before it was called the lease
 * revision, which every relay version writes and looks for (lease.ts `afterConflict`). Do not rename it.
 */
export interface StoredLeaseValue {
  readonly owner: string;
  /** LeaseValue.leaseRevision (wire name kept for relays of other versions, see above). */
  readonly epoch?: number;
  readonly renewedAt: string;
  readonly leaseMs?: number;
  readonly renewMs?: number;
}

/** The value of a write: every write stores this member's lease duration, which its deadline follows (`extend`). */
export function encodeLeaseValue(
  opts: Pick<CompiledLeaseOptions, "owner" | "leaseMs" | "renewMs">,
  leaseRevision?: number,
): string {
  const value: StoredLeaseValue = {
    owner: opts.owner,
    ...(leaseRevision !== undefined ? { epoch: leaseRevision } : {}),
    renewedAt: new Date().toISOString(),
    leaseMs: opts.leaseMs,
    renewMs: opts.renewMs,
  };
  return JSON.stringify(value);
}

/** The value of a PUT entry; undefined when it is not a lease value (no owner) or not JSON. */
export function readLeaseValue(entry: Pick<KvEntry, "json">): LeaseValue | undefined {
  try {
    const v = entry.json<Partial<StoredLeaseValue>>();
    if (typeof v?.owner !== "string") return undefined;
    const { epoch: leaseRevision, ...rest } = v as StoredLeaseValue;
    return { ...rest, ...(leaseRevision !== undefined ? { leaseRevision } : {}) };
  } catch {
    return undefined;
  }
}

/** A create or update refused because the key's revision was not the one it was made on. */
export function isCasConflict(err: unknown): boolean {
  return (
    isApiCode(err, JetStreamApiCodes.StreamWrongLastSequence) ||
    isApiCode(err, JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}
