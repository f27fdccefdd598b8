import { ErrorCodes, RelayError } from "../errors.js";
import { describeToken, movesFence } from "./fence.js";
import type { LeaseToken } from "./fence.js";
import { FENCED_REPLY } from "./lua.js";
import type { GroupState } from "./redis-layout-context.js";

/**
 * The lease fence as the layout client applies it per slot group (the scripts' side is lua.ts
 * FENCE): which groups a call must reach, the newest token each group accepted from us, and the
 * LEASE_FENCED error for a script that refused the caller's token.
 */

/**
 * The groups a call goes to: those with items, and, when the caller has a lease token that would move
 * the fence from the one a group has accepted from us (a higher lease revision, or another bucket
 * incarnation), every other group too (with no items): each group fences on its own, so a paused
 * ex-owner must be refused in the groups this batch does not touch as well.
 */
export function groupsToCall(
  state: readonly GroupState[],
  present: Iterable<number>,
  token: LeaseToken | undefined,
): number[] {
  const groups = new Set(present);
  if (token !== undefined)
    state.forEach((st, g) => (st.token === undefined || movesFence(token, st.token)) && groups.add(g));
  return [...groups].sort((a, b) => a - b);
}

/** A group accepted `token` (a call under it passed its fence: its incarnation is the fence's own now). */
export function accepted(st: GroupState, token: LeaseToken | undefined): void {
  if (token !== undefined && (st.token === undefined || movesFence(token, st.token))) st.token = token;
}

/**
 * A script that answered {'F', newest} ("<lease revision>" or "<incarnation>:<lease revision>"): the
 * caller's fencing token is older than one the guard has seen.
 */
export function checkFence(
  linkName: string,
  op: string,
  reply: unknown,
  token: LeaseToken | undefined,
): void {
  if (!Array.isArray(reply) || reply[0] !== FENCED_REPLY) return;
  const newest = String(reply[1]);
  const sep = newest.indexOf(":");
  const seen: LeaseToken =
    sep < 0
      ? { leaseRevision: Number(newest) }
      : { incarnation: Number(newest.slice(0, sep)), leaseRevision: Number(newest.slice(sep + 1)) };
  throw new RelayError(
    ErrorCodes.LEASE_FENCED,
    `link ${linkName}: guard ${op} refused: ${describeToken(token)} is older than ${describeToken(seen)} of the relay that owns the link now`,
  );
}
