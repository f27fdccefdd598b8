import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { KvEntry } from "@nats-io/kv";
import { isApiCode } from "../nats/durable-consumer.js";
import type { CompiledLeaseOptions, LeaseValue } from "./types.js";

/**
 * The JSON value stored under a lease key (LeaseValue in types.ts): what a member's write stores,
 * how a read decodes it, and the answer that tells a CAS write it lost to another one.
 */

/** The value of a write: every write stores this member's lease duration, which its deadline follows (`extend`). */
export function encodeLeaseValue(
  opts: Pick<CompiledLeaseOptions, "owner" | "leaseMs" | "renewMs">,
  epoch?: number,
): string {
  const value: LeaseValue = {
    owner: opts.owner,
    ...(epoch !== undefined ? { epoch } : {}),
    renewedAt: new Date().toISOString(),
    leaseMs: opts.leaseMs,
    renewMs: opts.renewMs,
  };
  return JSON.stringify(value);
}

/** The value of a PUT entry; undefined when it is not a lease value (no owner) or not JSON. */
export function readLeaseValue(entry: KvEntry): LeaseValue | undefined {
  try {
    const v = entry.json<Partial<LeaseValue>>();
    return typeof v?.owner === "string" ? (v as LeaseValue) : undefined;
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
