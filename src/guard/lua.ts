/**
 * The guard's Lua scripts (claim, commit, release, and a version read used on Redis Cluster). The
 * key layout they work on is described in layout.ts. Each script handles every item of one slot
 * group of a batch, so a batch costs one call per group: one call on a single Redis or Sentinel.
 *
 * Every key a script touches is in KEYS (the client builds them, see redis-guard.ts); per-item data
 * travels packed in a few ARGV strings: digests as fixed-width binary (16 bytes per id, 8 per
 * entity), the rest "\n"-terminated. Values are compared as Lua numbers (doubles), which is exact for
 * the JS numbers the relay passes; versions are returned as the stored strings, because Redis would
 * truncate a Lua number reply to an integer.
 *
 * Claims stay on the node that took them: the claim scripts and the claim deletes of a commit run
 * with `redis.set_repl(redis.REPL_NONE)`, so a claim is neither written to the AOF nor sent to
 * replicas (half the writes a message costs Redis otherwise). A claim only stops two relays from
 * publishing the same id at the same moment, and for that moment the destination's duplicate window
 * covers them anyway; what must survive a restart or a failover (committed ids, versions, the lease
 * revision fence) is written with replication on. After a failover, the new primary has no claims: the
 * commits of batches claimed before it count as "claims expired before commit", nothing more.
 *
 * Two replies change nothing and ask the client to act: {'F', newest} (the caller's fencing token is
 * older than the newest the group has seen: fenced) and {'M'} (the caller's copy of the bucket
 * directory is out of date: reload and retry).
 *
 * The previous layout (one key per id `relay:{<scope>}:id:<id>` = "d" | "c:<token>", one per entity
 * `relay:{<scope>}:ver:<entity>`) stays readable in group 0, whose hash tag it shares: a claim key
 * IS the previous id key (its "d" means committed, and claims are seen both ways), and the previous
 * version key is read and, when it exists, advanced with the new one (relays of the previous version
 * still running see the versions advance). It is never created.
 */

import type { GuardDecision } from "./types.js";
import { BUCKET_FILL, BUCKET_TARGET, MAX_FANOUT } from "./layout.js";
import { FENCE } from "./lua-fence.js";
import { WRITERS } from "./lua-writers.js";

/** The previous layout's key names (still used by the in-memory guard, which mirrors its semantics). */
export interface GuardKeys {
  /** `relay:{<scope>}:`: every key of the scope starts with it. */
  readonly prefix: string;
  readonly id: (id: string) => string;
  readonly version: (entity: string) => string;
}

export function guardKeys(scope: string): GuardKeys {
  if (scope.length === 0) throw new Error("guard scope must not be empty");
  const prefix = `relay:{${scope}}:`;
  return { prefix, id: (id) => `${prefix}id:${id}`, version: (entity) => `${prefix}ver:${entity}` };
}

/** Value of a claim key claimed with `token`. The "c:" prefix keeps a claim distinguishable from "d". */
export const claimValue = (token: string): string => `c:${token}`;
/** The previous layout's "done" value of an id key (the in-memory guard still stores it). */
export const DONE_VALUE = "d";

/** Decision codes in the claim script's reply. */
export const DECISION_CODES: Readonly<Record<string, GuardDecision>> = {
  r: "relay",
  d: "duplicate",
  s: "stale",
  i: "in-flight",
};

export const FENCED_REPLY = "F";
export const DIRECTORY_REPLY = "M";
export { FENCE_SEEN } from "./lua-fence.js";
/** A lease-mode claim's answer when another writer of the scope is live: claim with keys (WRITERS). */
export const KEYED_REPLY = "K";

/** Reads a "\n"-terminated packed string field by field: `local next = reader(s)`. */
const READER = `
local function reader(packed)
  local pos = 1
  return function()
    local e = string.find(packed, '\\n', pos, true)
    local f = string.sub(packed, pos, e - 1)
    pos = e + 1
    return f
  end
end
`;

/**
 * Claim the items of one group.
 *   KEYS[1]   the directory `relay:{T}:meta`; KEYS[2] the fence key; KEYS[3] the writers hash
 *   KEYS[4 .. 3+c]            claim keys, one per item (c = n when keyed, 0 in lease mode)
 *   then n × S                per item, its hash in each of the S live buckets
 *   then, when inline, 2 per entity: its version hash, its previous-layout version key
 *   ARGV[1]   fencing token or ""   ARGV[2]  directory version the keys were built from
 *   ARGV[3]   "c:<token>"     ARGV[4]  n     ARGV[5]  S     ARGV[6]  m (entities)
 *   ARGV[7]   claim TTL (ms)  ARGV[8]  "1": take over claims of other tokens; "r": repair (see below)
 *   ARGV[9]   digests, 16 bytes per item
 *   ARGV[10]  per item "<entity index 1..m, 0 = none>\n<version>\n", or "" when no item has one
 *   ARGV[11]  inline: the entities' fields, 8 bytes each
 *   ARGV[12]  not inline (Redis Cluster: versions live in other slots): per entity "<stored>\n",
 *             read just before; "" when inline
 *   ARGV[13]  the caller's writer name   ARGV[14] "L": lease mode (no claim keys), "K": keyed
 *   ARGV[15]  keyed: the caller's writer word ("L" while it still holds lease-mode ids, else "K")
 * Reply: {decision codes, one character per item; stored versions compared against, "\n"-separated
 * per item ("" when none), or "" when no item had one; "1" when no other writer is live, else ""};
 * or {'K'} (lease mode asked for while another writer is live: nothing changed).
 *
 * Per item, in this order:
 *  1. the same id earlier in this batch          -> in-flight (the first occurrence carries it)
 *  2. its digest in a live bucket, or its claim key "d" (previous layout) -> duplicate
 *  3. version <= max(stored version, versions of earlier items of this entity in this batch)
 *                                                -> stale; takes no claim, and drops our own claim
 *                                                   when a re-sent script finds one (see 5)
 *  In lease mode that is all: the rest is relay (the lease is the claim; nothing is written per id).
 *  Keyed, while another writer holds lease-mode ids: the rest is in-flight, nothing claimed.
 *  4. claim key holds another token's claim      -> in-flight (relay, taking the claim, under takeover)
 *  5. claim key absent, or holds OUR claim       -> relay; (re)set the claim with a fresh TTL.
 *     "Our claim" happens when ioredis re-sends this script after a reconnect because the first
 *     execution's reply was lost: calling that in-flight would park the message until the claim
 *     expires, calling it duplicate would ack a message that was never published.
 * An item without a version tries `SET NX` once it is not in a bucket: when the id is new (the common
 * case) that is the whole check; otherwise the claim key is read and 2, 4 and 5 apply as above.
 * Repair (ids `jetstream-relay repair` read as missing): 2 is skipped (a committed id is claimed again),
 * 3 is `version < ...`, and an item with a version is in-flight while a writer says "L" or "K" (WRITERS).
 * Earlier relay/in-flight items raise the batch's per-entity maximum: publishing 81 after an 82 that
 * is being published would reorder the entity at the destination.
 */
export const CLAIM_LUA = `${READER}${FENCE}
local n = tonumber(ARGV[4])
if n == 0 then return {'', '', ''} end
if (redis.call('HGET', KEYS[1], 'v') or '0') ~= ARGV[2] then return {'M'} end
${WRITERS}
local lease = ARGV[14] == 'L'
if lease and others then return {'K'} end
redis.set_repl(redis.REPL_NONE) -- claims stay on this node (see the top of lua.ts)
redis.call('HSET', KEYS[3], ARGV[13], (lease and 'L' or ARGV[15]) .. ':' .. string.format('%d', now))
local blocked = not lease and leased
local claim = ARGV[3]
local S = tonumber(ARGV[5])
local m = tonumber(ARGV[6])
local ttl = ARGV[7]
local takeover = ARGV[8] == '1'
local repair = ARGV[8] == 'r'
local digests = ARGV[9]
local items = ARGV[10]
local efields = ARGV[11]
local inline = ARGV[12] == ''
local c = lease and 0 or n
local bBase = 3 + c
local eBase = 3 + c + n * S
local floor = {}
if not inline then
  local nextFloor = reader(ARGV[12])
  for j = 1, m do floor[j] = nextFloor() end
end
local best = {}  -- entity index -> {number, raw string}, or false when nothing is stored
local function stored(j)
  local b = best[j]
  if b ~= nil then return b end
  local raw
  if inline then
    raw = redis.call('HGET', KEYS[eBase + 2 * j - 1], string.sub(efields, 8 * j - 7, 8 * j))
    local old = redis.call('GET', KEYS[eBase + 2 * j])
    if old and tonumber(old) and (not raw or tonumber(old) > tonumber(raw)) then raw = old end
  else
    raw = floor[j] ~= '' and floor[j]
  end
  local num = raw and tonumber(raw)
  b = num and {num, raw} or false
  best[j] = b
  return b
end
-- An item's version against its entity's stored one (and the batch's so far): v, stale, stored raw.
local function versus(j, vRaw)
  local v = tonumber(vRaw)
  local b = stored(j)
  if not b then return v, false, nil end
  return v, v < b[1] or (v == b[1] and not repair), b[2]
end
local nextItem = items ~= '' and reader(items)
local codes = {}
local against = {}
local anyAgainst = false
local seen = {}
for i = 1, n do
  local d = string.sub(digests, 16 * i - 15, 16 * i)
  local j = 0
  local vRaw
  if nextItem then
    j = tonumber(nextItem())
    vRaw = nextItem()
  end
  local claimKey = KEYS[3 + i]
  local decision
  local st = ''
  if seen[d] then
    decision = 'i'
  else
    seen[d] = true
    local k = bBase + (i - 1) * S
    for s = 1, S do
      if repair then break end
      if redis.call('HEXISTS', KEYS[k + s], d) == 1 then
        decision = 'd'
        break
      end
    end
    if decision == nil and (lease or blocked or (repair and keyed and j > 0)) then
      local v, stale, raw
      if j > 0 then v, stale, raw = versus(j, vRaw) end
      if raw then
        st = raw
        anyAgainst = true
      end
      if stale then decision = 's' end
      if decision == nil then
        decision = lease and 'r' or 'i'
        if v then best[j] = {v, vRaw} end
      end
    elseif decision == nil then
      if j == 0 and redis.call('SET', claimKey, claim, 'PX', ttl, 'NX') then
        decision = 'r' -- the common case: the buckets and one SET NX
      else
        local cur = redis.call('GET', claimKey)
        if cur == 'd' and repair then cur = false end
        if cur == 'd' then
          decision = 'd'
        else
          local v, stale, raw
          if j > 0 then v, stale, raw = versus(j, vRaw) end
          if raw then
            st = raw
            anyAgainst = true
          end
          if stale then
            decision = 's'
            if cur == claim then redis.call('DEL', claimKey) end
          end
          if decision == nil then
            if cur and cur ~= claim and not takeover then
              decision = 'i'
            else
              redis.call('SET', claimKey, claim, 'PX', ttl)
              decision = 'r'
            end
            if v then best[j] = {v, vRaw} end
          end
        end
      end
    end
  end
  codes[i] = decision
  against[i] = st
end
return {table.concat(codes), anyAgainst and table.concat(against, '\\n') or '', others and '' or '1'}
`;

/**
 * Commit the published items of one group, and advance the versions of the entities that live in it.
 *   KEYS[1]   the directory; KEYS[2] the fence key; KEYS[3] the writers hash
 *   KEYS[4 .. 3+c]            claim keys of the c keyed items (they come first; the other n - c were
 *                             claimed by the lease); then n keys: per item, its hash in the current bucket
 *   then per entity record: its version hash (flag "h"), its previous-layout version key (flag "l")
 *   ARGV[1]   fencing token or ""   ARGV[2]  directory version     ARGV[3]  n     ARGV[4]  m (records)
 *   ARGV[5]   digests, 16 bytes per item
 *   ARGV[6]   the batch's claim values "c:<token>\n", each once (a batch holds the items of a few
 *             claim calls); ARGV[13] per item the 1-based index of its claim value, as ARGV[14]
 *             (1 or 2) bytes, big-endian
 *   ARGV[7]   the current bucket's id, as the keys were built   ARGV[8]  its expiry (ms)
 *   ARGV[9]   a new bucket's span (ms)   ARGV[10] idTtl (ms)   ARGV[15] a first bucket's fan-out
 *   ARGV[11]  per entity record "<flags>\n<highest version of the batch>\n"
 *   ARGV[12]  the records' fields with flag "h", 8 bytes each
 *   ARGV[16]  c     ARGV[17] the caller's writer name   ARGV[18] its writer word after this commit,
 *             or "" (a caller that never claimed by its lease: its entry is left as it is)
 * Ids: a keyed item's claim key is deleted (GETDEL), and every item's digest is added to the current
 * bucket's hash, whoever holds the claim now: the message WAS published, so later copies are duplicates even if our claim
 * expired meanwhile. A hash created here gets the bucket's expiry (HSET answers 2: the digest and
 * the marker field "" were both new). A bucket whose span has ended (Redis server time) is not
 * written: a new one is opened and the reply is {'M'}. One that reached BUCKET_FILL ids per hash on
 * average is closed after this batch, its end and expiry in the directory brought forward to now.
 * Versions advance only by compare-and-set (new > stored), so an older commit arriving late never
 * lowers them; a previous-layout key is advanced only when it exists.
 * Reply: {ids whose claim was no longer ours (and that were not committed already), version fields
 * written, the directory version after the call}.
 */
export const COMMIT_LUA = `${READER}${FENCE}
local meta = KEYS[1]
local n = tonumber(ARGV[3])
local m = tonumber(ARGV[4])
local lost = 0
local function serverNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Opens a new current bucket; prevF is nil for a group's first bucket.
local function open(now, prevF, prevCount, early)
  local minF = tonumber(ARGV[15])
  local F = minF
  if prevF and early then
    F = math.min(prevF * 4, ${MAX_FANOUT})
  elseif prevF then
    F = math.max(minF, math.min(${MAX_FANOUT}, math.ceil(prevCount / ${BUCKET_TARGET})))
  end
  local id = now
  local curRaw = redis.call('HGET', meta, 'c')
  local cur = tonumber(curRaw or '0')
  if early and curRaw then
    -- Closed before its span ended: it took its last commit now, so it is remembered idTtl from now
    -- (not from the end of its span). Claims stop reading it then; its hashes keep their expiry.
    local closing = redis.call('HGET', meta, 'b' .. curRaw) or ''
    local cf, cs = string.match(closing, '^(%d+),(%d+),')
    if cf and cs then
      redis.call('HSET', meta, 'b' .. curRaw, string.format('%d,%d,%d,%d', tonumber(cf), tonumber(cs), now, now + tonumber(ARGV[10])))
    end
  end
  if id <= cur then id = cur + 1 end
  local all = redis.call('HGETALL', meta)
  for k = 1, #all, 2 do
    if string.byte(all[k], 1) == 98 then -- 'b': a bucket; drop it once expired
      local exp = tonumber(string.match(all[k + 1], '(%d+)$'))
      if exp and exp <= now then redis.call('HDEL', meta, all[k]) end
    end
  end
  local span = tonumber(ARGV[9])
  local info = string.format('%d,%d,%d,%d', F, id, id + span, id + span + tonumber(ARGV[10]))
  redis.call('HSET', meta, 'b' .. string.format('%d', id), info, 'c', string.format('%d', id), 'n', '0')
  redis.call('HINCRBY', meta, 'v', 1)
end
if n > 0 then
  if (redis.call('HGET', meta, 'v') or '0') ~= ARGV[2] then return {'M'} end
  local now = serverNow()
  local cur = redis.call('HGET', meta, 'c')
  local info = cur and redis.call('HGET', meta, 'b' .. cur)
  if not info then
    open(now, nil, 0, false)
    return {'M'}
  end
  local F, ends = string.match(info, '^(%d+),%d+,(%d+),')
  F = tonumber(F)
  if cur ~= ARGV[7] then return {'M'} end
  if now >= tonumber(ends) then
    open(now, F, tonumber(redis.call('HGET', meta, 'n') or '0'), false)
    return {'M'}
  end
  local digests = ARGV[5]
  local c = tonumber(ARGV[16])
  local claims = {}
  for c in string.gmatch(ARGV[6], '([^\\n]*)\\n') do claims[#claims + 1] = c end
  local claimOf = ARGV[13]
  local width = tonumber(ARGV[14])
  local expires = ARGV[8]
  local added = 0
  -- The claims end here, unreplicated as they were taken (see the top of lua.ts).
  local prevs = {}
  redis.set_repl(redis.REPL_NONE)
  for i = 1, c do prevs[i] = redis.call('GETDEL', KEYS[3 + i]) end
  redis.set_repl(redis.REPL_ALL)
  for i = 1, n do
    local d = string.sub(digests, 16 * i - 15, 16 * i)
    local hashKey = KEYS[3 + c + i]
    local a = redis.call('HSET', hashKey, d, '1', '', '')
    if a == 2 then
      redis.call('PEXPIREAT', hashKey, expires)
    end
    if a > 0 then
      added = added + 1
      if i <= c then
        local claim
        if width == 1 then
          claim = claims[string.byte(claimOf, i)]
        else
          local hi, lo = string.byte(claimOf, 2 * i - 1, 2 * i)
          claim = claims[hi * 256 + lo]
        end
        if prevs[i] ~= claim then lost = lost + 1 end
      end
    end
  end
  local count = redis.call('HINCRBY', meta, 'n', added)
  if count >= F * ${BUCKET_FILL} then open(now, F, count, true) end
end
if ARGV[18] ~= '' then
  redis.set_repl(redis.REPL_NONE) -- as the claims' (see WRITERS)
  redis.call('HSET', KEYS[3], ARGV[17], ARGV[18] .. ':' .. string.format('%d', serverNow()))
  redis.set_repl(redis.REPL_ALL)
end
local written = 0
if m > 0 then
  local nextRecord = reader(ARGV[11])
  local fields = ARGV[12]
  local k = 3 + tonumber(ARGV[16]) + n
  local f = 1
  for j = 1, m do
    local flags = nextRecord()
    local vRaw = nextRecord()
    local v = tonumber(vRaw)
    local hashKey, field, h, oldKey, old
    if string.find(flags, 'h', 1, true) then
      k = k + 1
      hashKey = KEYS[k]
      field = string.sub(fields, f, f + 7)
      f = f + 8
      local raw = redis.call('HGET', hashKey, field)
      h = raw and tonumber(raw)
    end
    if string.find(flags, 'l', 1, true) then
      k = k + 1
      oldKey = KEYS[k]
      local raw = redis.call('GET', oldKey)
      old = raw and tonumber(raw)
    end
    if hashKey then
      local s = h
      if old and (not s or old > s) then s = old end
      if not s or v > s then
        redis.call('HSET', hashKey, field, vRaw)
        written = written + 1
      end
    end
    if old and v > old then redis.call('SET', oldKey, vRaw) end
  end
end
return {lost, written, redis.call('HGET', meta, 'v') or '0'}
`;

/**
 * Release claims we will not commit (publish failed, shutdown).
 *   KEYS      the claim keys of one group
 *   ARGV[1]   per item "c:<token>\n"
 * Deletes a claim key only while it still holds that value: after our claim expired another relay
 * may have claimed the id, and that must survive. Reply: number of keys deleted.
 */
export const RELEASE_LUA = `${READER}
redis.set_repl(redis.REPL_NONE) -- claims stay on this node (see the top of lua.ts)
local nextClaim = reader(ARGV[1])
local deleted = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == nextClaim() then
    redis.call('DEL', KEYS[i])
    deleted = deleted + 1
  end
end
return deleted
`;

/**
 * Read stored versions (Redis Cluster only, before the claims: an entity's version lives in its own
 * group, not in the group of the id that carries it).
 *   KEYS      a version hashes, then previous-layout version keys (group 0 only)
 *   ARGV[1]   a     ARGV[2]  the fields of the a hashes, 8 bytes each
 * Reply: {the a stored values, "\n"-separated ("" for none); the previous-layout values, likewise}.
 */
export const VERSIONS_LUA = `
local a = tonumber(ARGV[1])
local fields = ARGV[2]
local hashes = {}
for i = 1, a do
  hashes[i] = redis.call('HGET', KEYS[i], string.sub(fields, 8 * i - 7, 8 * i)) or ''
end
local old = {}
for i = a + 1, #KEYS do
  old[#old + 1] = redis.call('GET', KEYS[i]) or ''
end
return {table.concat(hashes, '\\n'), table.concat(old, '\\n')}
`;
