import { randomBytes } from "node:crypto";
import { ErrorCodes, RelayError } from "../errors.js";
import type { GuardItem } from "./types.js";

/**
 * Helpers shared by the memory and Redis guards, so both read items and mint tokens the same way.
 */

/** The entity/version pair of an item, when versions apply to it (both fields present). */
export function versionOf(item: GuardItem): { entity: string; version: number } | undefined {
  if (item.entity === undefined || item.version === undefined) return undefined;
  // NaN/Infinity cannot be ordered (and a Lua tonumber() of them fails mid-batch): the link is
  // meant to reject such messages before they reach the guard.
  if (!Number.isFinite(item.version)) {
    throw new RelayError(ErrorCodes.BAD_MESSAGE, `guard: message ${item.id} has a non-finite version`);
  }
  return { entity: item.entity, version: item.version };
}

/**
 * Every item has an id, and neither id nor entity holds a line break (the Redis guard packs a batch
 * into one "\n"-separated argument; ids and entities come from header values and subject tokens,
 * which cannot hold one, so this only catches a caller's bug).
 */
export function checkIds(items: readonly GuardItem[]): void {
  for (const item of items) {
    if (typeof item.id !== "string" || item.id.length === 0) {
      throw new RelayError(ErrorCodes.BAD_MESSAGE, "guard: message without an id");
    }
    if (item.id.includes("\n") || item.entity?.includes("\n")) {
      throw new RelayError(ErrorCodes.BAD_MESSAGE, `guard: message ${JSON.stringify(item.id)} has a line break in its id or entity`);
    }
  }
}

/**
 * Mints one token per claim call: `<random instance id>.<counter>`. Per call rather than per guard,
 * so that a message redelivered while an earlier claim of this same relay is still open is
 * "in-flight" (not a second "relay"), while ioredis re-sending the very same command still finds
 * its own token.
 */
export function tokenSource(): () => string {
  const instance = randomBytes(6).toString("hex");
  let seq = 0;
  return () => `${instance}.${(++seq).toString(36)}`;
}
