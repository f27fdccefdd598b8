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
 *   relay:{<scope>}:epoch:<fence> the newest lease epoch seen for a link (its lease key), no TTL
 *
 * Packed arguments. A batch travels as ONE argument, its items' fields separated by "\n" (ids and
 * entities come from header values and subject tokens, which cannot hold a newline; the guard
 * refuses one that does), and the scripts build the key names from the scope's prefix, passed as
 * KEYS[1]. Passing every key and field as its own argument made the client encode a thousand
 * arguments per call, which cost more CPU than the rest of the guard together. Every key a script
 * builds carries the scope's hash tag, so it is in KEYS[1]'s slot: Redis Cluster routes the call by
 * KEYS[1] and the script only touches keys of that slot.
 *
 * Values are compared as Lua numbers (doubles), which is exact for the JS numbers the relay passes.
 * Versions are returned as the stored strings, not as numbers, because Redis would truncate a Lua
 * number reply to an integer.
 */

import type { GuardDecision } from "./types.js";

export interface GuardKeys {
  /** `relay:{<scope>}:`: every key of the scope starts with it (KEYS[1] of every script). */
  readonly prefix: string;
  readonly id: (id: string) => string;
  readonly version: (entity: string) => string;
}

export function guardKeys(scope: string): GuardKeys {
  // An empty tag "{}" would make Redis hash the whole key, scattering a batch over slots.
  if (scope.length === 0) throw new Error("guard scope must not be empty");
  const prefix = `relay:{${scope}}:`;
  return { prefix, id: (id) => `${prefix}id:${id}`, version: (entity) => `${prefix}ver:${entity}` };
}

/** Field separator of the packed batch argument. */
export const FIELD_SEPARATOR = "\n";

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

/** Reads the packed batch ARGV[idx] field by field ("\n"-terminated). */
const READER = `
local packed = ARGV[PACKED_ARG]
local pos = 1
local function field()
  local e = string.find(packed, '\\n', pos, true)
  local f = string.sub(packed, pos, e - 1)
  pos = e + 1
  return f
end
local prefix = KEYS[1]
`;

const withReader = (argIndex: number, body: string): string => READER.replace("PACKED_ARG", String(argIndex)) + body;

/**
 * The lease-epoch fence, first thing in claim and commit: ARGV[EPOCH] is the caller's epoch ("" when
 * it has none), ARGV[EPOCH + 1] the fence name. An epoch older than the newest seen returns
 * {'F', newest} and changes nothing; a newer one becomes the newest.
 */
const fence = (epochArg: number, fenced: string): string => `
if ARGV[${epochArg}] ~= '' then
  local fenceKey = prefix .. 'epoch:' .. ARGV[${epochArg + 1}]
  local newest = tonumber(redis.call('GET', fenceKey) or '0')
  local epoch = tonumber(ARGV[${epochArg}])
  if epoch < newest then return ${fenced} end
  if epoch > newest then redis.call('SET', fenceKey, ARGV[${epochArg}]) end
end
`;

/** The reply of a fenced script: {FENCED_REPLY, newest epoch}. */
export const FENCED_REPLY = "F";

/**
 * Claim a batch.
 *   KEYS[1]   the scope prefix `relay:{<scope>}:`
 *   ARGV[1]   our claim value "c:<token>" (one token per claim call)
 *   ARGV[2]   claim TTL in ms
 *   ARGV[3]   n
 *   ARGV[4]   packed: per item `<id>\n<entity>\n<version>\n` (entity and version "" when none)
 *   ARGV[5]   "1": take over claims of other tokens (ordered recovery of a dead owner's messages)
 *   ARGV[6]   the caller's lease epoch, or "" (see fence)
 *   ARGV[7]   the fence name (the link's lease key)
 * Reply: {decision codes, one character per item; stored versions compared against, "\n"-separated
 * per item ("" when none), or "" when no item had one}.
 *
 * Order of the checks, per item:
 *  1. the same id earlier in this batch  -> in-flight (the first occurrence carries it)
 *  2. key is "d"                         -> duplicate
 *  3. version <= max(stored version, versions of earlier items of this entity in this batch)
 *                                        -> stale; takes no claim, and drops our own claim when a
 *                                           re-sent script finds one (see 5)
 *  4. key holds another token's claim    -> in-flight (relay, taking the claim, under takeover)
 *  5. key absent, or holds OUR claim     -> relay; (re)set the claim with a fresh TTL.
 *     "Our claim" happens when ioredis re-sends this script after a reconnect because the first
 *     execution's reply was lost: calling that in-flight would park the message until the claim
 *     expires, calling it duplicate would ack a message that was never published.
 * An item without a version tries `SET NX` first: when the id is new (the common case) that is the
 * whole check; otherwise the key is read and checks 2, 4 and 5 apply as above.
 * Earlier relay/in-flight items raise the batch's per-entity maximum: publishing 81 after an 82
 * that is being published would reorder the entity at the destination.
 */
export const CLAIM_LUA = withReader(
  4,
  `${fence(6, "{'F', tostring(newest)}")}
local claim = ARGV[1]
local ttl = ARGV[2]
local n = tonumber(ARGV[3])
local takeover = ARGV[5] == '1'
local codes = {}
local against = {}
local anyAgainst = false
local best = {}   -- entity -> {number, raw string}, or false when nothing is stored
local seen = {}   -- ids already decided in this batch
for i = 1, n do
  local id = field()
  local entity = field()
  local vRaw = field()
  local idKey = prefix .. 'id:' .. id
  local decision
  local stored = ''
  if seen[id] then
    decision = 'i'
  elseif entity == '' and redis.call('SET', idKey, claim, 'PX', ttl, 'NX') then
    decision = 'r' -- the common case costs one call; anything else is read first (below)
    seen[id] = true
  else
    local cur = redis.call('GET', idKey)
    if cur == 'd' then
      decision = 'd'
    else
      local v = nil
      if entity ~= '' then
        v = tonumber(vRaw)
        local b = best[entity]
        if b == nil then
          local raw = redis.call('GET', prefix .. 'ver:' .. entity)
          local num = raw and tonumber(raw)
          b = num and {num, raw} or false
          best[entity] = b
        end
        if b then
          stored = b[2]
          anyAgainst = true
        end
        if b and v <= b[1] then
          decision = 's'
          if cur == claim then redis.call('DEL', idKey) end
        end
      end
      if decision == nil then
        if cur and cur ~= claim and not takeover then
          decision = 'i'
        else
          redis.call('SET', idKey, claim, 'PX', ttl)
          decision = 'r'
        end
        if v then best[entity] = {v, vRaw} end
      end
    end
    seen[id] = true
  end
  codes[i] = decision
  against[i] = stored
end
return {table.concat(codes), anyAgainst and table.concat(against, '\\n') or ''}
`,
);

/**
 * Commit a batch of published items.
 *   KEYS[1]   the scope prefix
 *   ARGV[1]   id TTL in ms
 *   ARGV[2]   n
 *   ARGV[3]   packed: per item `<claim value>\n<id>\n<entity>\n<version>\n`
 *   ARGV[4]   the caller's lease epoch, or "" (see fence); ARGV[5] the fence name
 * Every id becomes "d" with the long TTL (one `SET ... GET`, Redis 6.2 or later), whoever holds the key now: the message WAS published,
 * so later copies are duplicates even if our claim expired meanwhile. Versions advance only by
 * compare-and-set (new > stored), so an older commit arriving late never lowers them.
 * Reply: {number of ids whose claim was no longer ours, number of version keys written}.
 */
export const COMMIT_LUA = withReader(
  3,
  `${fence(4, "{'F', tostring(newest)}")}
local ttl = ARGV[1]
local n = tonumber(ARGV[2])
local lost = 0
local written = 0
local stored = {}  -- entity -> current number, or false
for i = 1, n do
  local claim = field()
  local idKey = prefix .. 'id:' .. field()
  local entity = field()
  local vRaw = field()
  if redis.call('SET', idKey, 'd', 'PX', ttl, 'GET') ~= claim then lost = lost + 1 end
  if entity ~= '' then
    local vKey = prefix .. 'ver:' .. entity
    local v = tonumber(vRaw)
    local s = stored[entity]
    if s == nil then
      local raw = redis.call('GET', vKey)
      s = (raw and tonumber(raw)) or false
    end
    if s == false or v > s then
      redis.call('SET', vKey, vRaw)
      written = written + 1
      s = v
    end
    stored[entity] = s
  end
end
return {lost, written}
`,
);

/**
 * Release claims we will not commit (publish failed, shutdown).
 *   KEYS[1]   the scope prefix
 *   ARGV[1]   n
 *   ARGV[2]   packed: per item `<claim value>\n<id>\n`
 * Deletes a key only while it still holds that value: after our claim expired another relay may
 * have claimed the id, or committed it, and that must survive. Reply: number of keys deleted.
 */
export const RELEASE_LUA = withReader(
  2,
  `
local n = tonumber(ARGV[1])
local deleted = 0
for i = 1, n do
  local claim = field()
  local idKey = prefix .. 'id:' .. field()
  if redis.call('GET', idKey) == claim then
    redis.call('DEL', idKey)
    deleted = deleted + 1
  end
end
return deleted
`,
);
