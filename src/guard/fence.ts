import { ErrorCodes, isRelayError } from "../errors.js";
import type { ClaimOptions, GuardFence } from "./types.js";

/**
 * The fencing token a claim or commit carries: (bucket incarnation, lease revision), compared in that
 * order. The lease revision is the revision of the group KV bucket's write that acquired the lease, and
 * a bucket deleted and created again starts its revisions at 1: only its incarnation (creation time)
 * says which bucket it is. Which bucket is newer is the order the fence first saw their incarnations
 * (lua-fence.ts FENCE, `FenceIncarnations`), not their values: a server's clock can be behind. A token
 * without an incarnation (a caller before it) compares by lease revision alone. (Older versions called
 * the lease revision the epoch.)
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
 * The scripts' ARGV[1] (lua-fence.ts FENCE): "" (no lease), "<lease revision>", or
 * "<incarnation>:<lease revision>". Wire format, unchanged by the rename from "epoch": relays of other
 * versions write and read the same fence.
 */
export function fenceArg(token: LeaseToken | undefined): string {
  if (token === undefined) return "";
  return token.incarnation === undefined ? String(token.leaseRevision) : `${token.incarnation}:${token.leaseRevision}`;
}

/**
 * The fence would move from `accepted` (the token it last took from this caller) to `token`: another
 * incarnation (a fence takes one it has not seen as newer, and refuses one it has: only the fence
 * knows which), or the same (or unknown on either side) and a higher lease revision.
 */
export function movesFence(token: LeaseToken, accepted: LeaseToken): boolean {
  if (token.incarnation !== undefined && accepted.incarnation !== undefined && token.incarnation !== accepted.incarnation) return true;
  return token.leaseRevision > accepted.leaseRevision;
}

/**
 * The incarnations a fence has seen, in the order first seen (the last is the fence's own), as
 * lua-fence.ts FENCE keeps them in "incs:<fence key>" (the in-memory guard keeps them here), `limit`
 * at most (FENCE_SEEN).
 */
export class FenceIncarnations {
  private readonly seen: number[] = [];

  constructor(private readonly limit: number) {}

  /** The fence's own incarnation (the one its lease revision belongs to); undefined before any. */
  get current(): number | undefined {
    return this.seen[this.seen.length - 1];
  }

  /**
   * A token of `incarnation` arrives: "own" (compare lease revisions), "older" (seen before the
   * fence's own: refuse), or "new" (never seen: it is now the fence's own; its revisions start over).
   */
  meet(incarnation: number): "own" | "older" | "new" {
    if (this.current === incarnation) return "own";
    if (this.seen.includes(incarnation)) return "older";
    this.seen.push(incarnation);
    if (this.seen.length > this.limit) this.seen.shift();
    return "new";
  }
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
