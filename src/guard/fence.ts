import { ErrorCodes, isRelayError } from "../errors.js";
import type { ClaimOptions, GuardFence } from "./types.js";

/**
 * The lease token a claim or commit is fenced by: (bucket incarnation, epoch), compared in that order.
 * The epoch is a revision of the group's KV bucket, and a bucket deleted and created again starts its
 * revisions at 1: only its incarnation (creation time) says which bucket is newer. A token without an
 * incarnation (a caller before it) compares by epoch alone.
 */
export interface LeaseToken {
  readonly epoch: number;
  readonly incarnation?: number | undefined;
}

/** The token of a call's options, when it carries an epoch. */
export function leaseToken(opts: Pick<ClaimOptions, "epoch" | "incarnation">): LeaseToken | undefined {
  if (opts.epoch === undefined) return undefined;
  return { epoch: opts.epoch, incarnation: opts.incarnation };
}

/** The scripts' ARGV[1] (lua.ts FENCE): "" (no epoch), "<epoch>", or "<incarnation>:<epoch>". */
export function fenceArg(token: LeaseToken | undefined): string {
  if (token === undefined) return "";
  return token.incarnation === undefined ? String(token.epoch) : `${token.incarnation}:${token.epoch}`;
}

/** `a` is newer than `b`: a later incarnation, or the same (or unknown on either side) and a higher epoch. */
export function newerToken(a: LeaseToken, b: LeaseToken): boolean {
  if (a.incarnation !== undefined && b.incarnation !== undefined && a.incarnation !== b.incarnation) return a.incarnation > b.incarnation;
  return a.epoch > b.epoch;
}

export function describeToken(token: LeaseToken | undefined): string {
  if (token === undefined) return "none";
  return token.incarnation === undefined ? `epoch ${token.epoch}` : `epoch ${token.epoch} of lease bucket ${new Date(token.incarnation).toISOString()}`;
}

/** Keeps `Guard.fenced`: the streak of LEASE_FENCED refusals since the last call that passed the fence. */
export class FenceRefusals {
  private current: GuardFence | undefined;

  get fenced(): GuardFence | undefined {
    return this.current;
  }

  /** A claim or commit under `opts` ended with `err` (any error: only LEASE_FENCED counts). */
  failed(opts: Pick<ClaimOptions, "epoch" | "incarnation">, err: unknown): void {
    if (!isRelayError(err, ErrorCodes.LEASE_FENCED) || opts.epoch === undefined) return;
    const same = this.current?.epoch === opts.epoch && this.current.incarnation === opts.incarnation;
    this.current = {
      epoch: opts.epoch,
      incarnation: opts.incarnation,
      refusals: same ? (this.current?.refusals ?? 0) + 1 : 1,
      since: same ? (this.current?.since ?? Date.now()) : Date.now(),
      error: err,
    };
  }

  /** A claim or commit under `opts` passed the fence. */
  passed(opts: Pick<ClaimOptions, "epoch">): void {
    if (opts.epoch !== undefined) this.current = undefined;
  }
}
