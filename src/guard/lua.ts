/**
 * The guard's Redis key layout and its three Lua scripts (claim, commit, release). Each script
 * handles a whole batch, so each guard call is ONE round trip (an EVALSHA, or an EVAL the first
 * time a connection uses the script).
 *
 * Key layout. DESIGN §3 speaks of "a hash tag per entity"; but a script may only touch keys of one
 * Redis Cluster slot, and one script covers a whole batch with many entities, so the hash tag is
 * the guard's scope (`<destination region>:<destination stream>`) instead: every key of a scope
 * lives in one slot. The cost is that one destination stream's guard state sits on one shard.
 *
 *   relay:{<scope>}:id:<id>       "c:<token>" (claimed, TTL claimTtl) | "d" (done, TTL idTtl)
 *   relay:{<scope>}:ver:<entity>  last committed version, no TTL (it must outlive every id)
 *
 * Values are compared as Lua numbers (doubles), which is exact for the JS numbers the relay passes.
 * Versions are returned as the stored strings, not as numbers, because Redis would truncate a Lua
 * number reply to an integer.
 */

import type { GuardDecision } from "./types.js";

export interface GuardKeys {
  readonly id: (id: string) => string;
  readonly version: (entity: string) => string;
}

export function guardKeys(scope: string): GuardKeys {
  // An empty tag "{}" would make Redis hash the whole key, scattering a batch over slots.
  if (scope.length === 0) throw new Error("guard scope must not be empty");
  const prefix = `relay:{${scope}}:`;
  return { id: (id) => `${prefix}id:${id}`, version: (entity) => `${prefix}ver:${entity}` };
}

/** Value of a key claimed with `token`. The "c:" prefix keeps a claim distinguishable from "d". */
export const claimValue = (token: string): string => `c:${token}`;
export const DONE_VALUE = "d";

/** Decision codes in the claim script's reply. */
export const DECISION_CODES: Readonly<Record<string, GuardDecision>> = {
  r: "relay",
  d: "duplicate",
  s: "stale",
  i: "in-flight",
};

/**
 * Claim a batch.
 *   KEYS[1..n]    the items' id keys, in input order
 *   KEYS[n+1..]   one version key per distinct entity of the batch
 *   ARGV[1]       our claim value "c:<token>" (one token per claim call)
 *   ARGV[2]       claim TTL in ms
 *   ARGV[3]       n
 *   ARGV[2+2i]    for item i: index into KEYS of its version key, or 0 when it has no version
 *   ARGV[3+2i]    for item i: its version, or ""
 * Reply: 2n values; for item i a decision code and the version it was compared against (or nil).
 *
 * Order of the checks, per item:
 *  1. the same id earlier in this batch  -> in-flight (the first occurrence carries it)
 *  2. key is "d"                         -> duplicate
 *  3. version <= max(stored version, versions of earlier items of this entity in this batch)
 *                                        -> stale; takes no claim, and drops our own claim when a
 *                                           re-sent script finds one (see 5)
 *  4. key holds another token's claim    -> in-flight
 *  5. key absent, or holds OUR claim     -> relay; (re)set the claim with a fresh TTL.
 *     "Our claim" happens when ioredis re-sends this script after a reconnect because the first
 *     execution's reply was lost: calling that in-flight would park the message until the claim
 *     expires, calling it duplicate would ack a message that was never published.
 * Earlier relay/in-flight items raise the batch's per-entity maximum: publishing 81 after an 82
 * that is being published would reorder the entity at the destination.
 */
export const CLAIM_LUA = `
local claim = ARGV[1]
local ttl = ARGV[2]
local n = tonumber(ARGV[3])
local out = {}
local best = {}   -- version key index -> {number, raw string}, or false when nothing is stored
local seen = {}   -- id keys already decided in this batch
for i = 1, n do
  local idKey = KEYS[i]
  local vIdx = tonumber(ARGV[2 + 2 * i])
  local vRaw = ARGV[3 + 2 * i]
  local decision
  local against = false
  if seen[idKey] then
    decision = 'i'
  else
    local cur = redis.call('GET', idKey)
    if cur == 'd' then
      decision = 'd'
    else
      local v = nil
      if vIdx > 0 then
        v = tonumber(vRaw)
        local b = best[vIdx]
        if b == nil then
          local raw = redis.call('GET', KEYS[vIdx])
          local num = raw and tonumber(raw)
          b = num and {num, raw} or false
          best[vIdx] = b
        end
        if b then against = b[2] end
        if b and v <= b[1] then
          decision = 's'
          if cur == claim then redis.call('DEL', idKey) end
        end
      end
      if decision == nil then
        if cur and cur ~= claim then
          decision = 'i'
        else
          redis.call('SET', idKey, claim, 'PX', ttl)
          decision = 'r'
        end
        if v then best[vIdx] = {v, vRaw} end
      end
    end
    seen[idKey] = true
  end
  out[2 * i - 1] = decision
  out[2 * i] = against
end
return out
`;

/**
 * Commit a batch of published items.
 *   KEYS[1..n]    id keys; KEYS[n+1..] one version key per distinct entity
 *   ARGV[1]       id TTL in ms
 *   ARGV[2]       n
 *   ARGV[3i]      for item i: the claim value it was claimed with
 *   ARGV[3i+1]    index into KEYS of its version key, or 0
 *   ARGV[3i+2]    its version, or ""
 * Every id becomes "d" with the long TTL, whoever holds the key now: the message WAS published,
 * so later copies are duplicates even if our claim expired meanwhile. Versions advance only by
 * compare-and-set (new > stored), so an older commit arriving late never lowers them.
 * Reply: {number of ids whose claim was no longer ours, number of version keys written}.
 */
export const COMMIT_LUA = `
local ttl = ARGV[1]
local n = tonumber(ARGV[2])
local lost = 0
local written = 0
local stored = {}  -- version key index -> current number, or false
for i = 1, n do
  local idKey = KEYS[i]
  local base = 3 * i
  if redis.call('GET', idKey) ~= ARGV[base] then lost = lost + 1 end
  redis.call('SET', idKey, 'd', 'PX', ttl)
  local vIdx = tonumber(ARGV[base + 1])
  if vIdx > 0 then
    local v = tonumber(ARGV[base + 2])
    local s = stored[vIdx]
    if s == nil then
      local raw = redis.call('GET', KEYS[vIdx])
      s = (raw and tonumber(raw)) or false
    end
    if s == false or v > s then
      redis.call('SET', KEYS[vIdx], ARGV[base + 2])
      written = written + 1
      s = v
    end
    stored[vIdx] = s
  end
end
return {lost, written}
`;

/**
 * Release claims we will not commit (publish failed, shutdown).
 *   KEYS[i]  id key; ARGV[i] the claim value it was claimed with.
 * Deletes a key only while it still holds that value: after our claim expired another relay may
 * have claimed the id, or committed it, and that must survive. Reply: number of keys deleted.
 */
export const RELEASE_LUA = `
local deleted = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('DEL', KEYS[i])
    deleted = deleted + 1
  end
end
return deleted
`;
