import { ErrorCodes, isRelayError } from "../errors.js";
import type { ClaimOptions, GuardFence } from "./types.js";

/**
 * The fencing token a claim or commit carries: (bucket incarnation, lease revision), compared in that
 * order. The lease revision is the revision of the group KV bucket's write that acquired the lease, and
 * a bucket deleted and created again starts its revisions at 1: only its incarnation (creation time)
 * says which bucket is newer. A token without an incarnation (a caller before it) compares by lease
 * revision alone. (Older versions called the lease revision the epoch.)
 */
export interface LeaseToken {
  readonly leaseRevision: number;
  readonly incarnation?: number | undefined;
}

/** The token of a call's options, when it carries a lease revision. */
export function leaseToken(opts: Pick<ClaimOptions, "leaseRevision" | "incarnation">): LeaseToken | undefined {
  if (opts.leaseRevision === undefined) return undefined;
  return { leaseRevision: opts.leaseRevision, incarnation: opts.incarnation };
}

/**
 * The scripts' ARGV[1] (lua.ts FENCE): "" (no lease), "<lease revision>", or
 * "<incarnation>:<lease revision>". Wire format, unchanged by the rename from "epoch": relays of other
 * versions write and read the same fence.
 */
export function fenceArg(token: LeaseToken | undefined): string {
  if (token === undefined) return "";
  return token.incarnation === undefined ? String(token.leaseRevision) : `${token.incarnation}:${token.leaseRevision}`;
}

/**
 * `a` is newer than `b`: a later incarnation, or the same (or unknown on either side) and a higher
 * lease revision.
 */
export function newerToken(a: LeaseToken, b: LeaseToken): boolean {
  if (a.incarnation !== undefined && b.incarnation !== undefined && a.incarnation !== b.incarnation) return a.incarnation > b.incarnation;
  return a.leaseRevision > b.leaseRevision;
}

export function describeToken(token: LeaseToken | undefined): string {
  if (token === undefined) return "no lease";
  const revision = `lease revision ${token.leaseRevision}`;
  return token.incarnation === undefined ? revision : `${revision} of lease bucket ${new Date(token.incarnation).toISOString()}`;
}

/** Keeps `Guard.fenced`: the streak of LEASE_FENCED refusals since the last call that passed the fence. */
export class FenceRefusals {
  private current: GuardFence | undefined;

  get fenced(): GuardFence | undefined {
    return this.current;
  }

  /** A claim or commit under `opts` ended with `err` (any error: only LEASE_FENCED counts). */
  failed(opts: Pick<ClaimOptions, "leaseRevision" | "incarnation">, err: unknown): void {
    if (!isRelayError(err, ErrorCodes.LEASE_FENCED) || opts.leaseRevision === undefined) return;
    const same = this.current?.leaseRevision === opts.leaseRevision && this.current.incarnation === opts.incarnation;
    this.current = {
      leaseRevision: opts.leaseRevision,
      incarnation: opts.incarnation,
      refusals: same ? (this.current?.refusals ?? 0) + 1 : 1,
      since: same ? (this.current?.since ?? Date.now()) : Date.now(),
      error: err,
    };
  }

  /** A claim or commit under `opts` passed the fence. */
  passed(opts: Pick<ClaimOptions, "leaseRevision">): void {
    if (opts.leaseRevision !== undefined) this.current = undefined;
  }
}
