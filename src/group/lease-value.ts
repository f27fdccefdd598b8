import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { KvEntry } from "@nats-io/kv";
import { isApiCode } from "../nats/durable-consumer.js";
import { memberModeKeyLeaseMs } from "./member-session.js";
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
  readonly session?: number;
  readonly memberLeaseMs?: number;
}

/**
 * The value of a write: every write stores the lease duration its deadline follows (`extend`): this
 * member's `group.lease`, or in member mode (`session`) the long key lease of `writeLeaseMs`, with the
 * session and the member's own lease beside it.
 */
export function encodeLeaseValue(
  opts: Pick<CompiledLeaseOptions, "owner" | "leaseMs" | "renewMs">,
  leaseRevision?: number,
  session?: number,
): string {
  const value: StoredLeaseValue = {
    owner: opts.owner,
    ...(leaseRevision !== undefined ? { epoch: leaseRevision } : {}),
    renewedAt: new Date().toISOString(),
    leaseMs: writeLeaseMs(opts, session),
    renewMs: opts.renewMs,
    ...(session !== undefined ? { session, memberLeaseMs: opts.leaseMs } : {}),
  };
  return JSON.stringify(value);
}

/** The lease duration a write stores and its writer's deadline follows: longer in member mode (member-session.ts). */
export function writeLeaseMs(opts: Pick<CompiledLeaseOptions, "leaseMs">, session?: number): number {
  return session === undefined ? opts.leaseMs : memberModeKeyLeaseMs(opts.leaseMs);
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

/**
 * A renewal's CAS was refused and the key reads `entry`: an earlier renewal of ours landed after its
 * request timed out (the key still names `owner` with its lease revision: go on from that revision,
 * in the mode it stored), or the lease is gone (why, as a string).
 */
export function afterRefusedRenewal(
  entry: KvEntry | null,
  owner: string,
  leaseRevision: number | undefined,
): { readonly revision: number; readonly session: number | undefined } | string {
  const value = entry?.operation === "PUT" ? readLeaseValue(entry) : undefined;
  if (entry && value?.owner === owner && (value.leaseRevision ?? entry.revision) === leaseRevision) {
    return { revision: entry.revision, session: typeof value.session === "number" ? value.session : undefined };
  }
  return !entry || entry.operation !== "PUT" ? "lease key was deleted" : `lease taken by ${value?.owner ?? "?"}`;
}

/** A create or update refused because the key's revision was not the one it was made on. */
export function isCasConflict(err: unknown): boolean {
  return (
    isApiCode(err, JetStreamApiCodes.StreamWrongLastSequence) ||
    isApiCode(err, JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}
