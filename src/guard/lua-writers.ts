/**
 * The part of the guard's claim script (lua.ts CLAIM) that reads and maintains the scope's writers.
 */

/**
 * The scope's writers (`relay:{T}:w`, KEYS[3] of claim and commit): per link fence name, what its
 * last call said and when (Redis server time, ms), "<word>:<ms>". A writer is live for a claim TTL
 * after its last call. Words: "L" takes claims by its lease alone (no claim key per id) or still
 * holds ids claimed so; "l" is in that mode but holds none; "K" claims with a key per id.
 *
 * A link whose lease is the only live writer of its scope needs no claim key per id: its lease
 * already makes it the one relay publishing its cursor's messages, and the fence refuses an older
 * owner. Claim keys only matter between writers of one scope (two cursors, `repair`), and those see
 * each other here: a lease-mode claim that finds another live writer changes nothing and answers
 * {'K'} (claim with keys instead), and a keyed claim that finds a live "L" writer takes nothing and
 * answers in-flight for what it would have relayed, until that writer's lease-mode ids are committed
 * or released (it then says "l" or "K") or it is silent for a claim TTL, as a claim key would expire.
 * Writes stay on this node, as claims do (see the top of lua.ts). Entries silent for ten claim
 * TTLs are dropped.
 *
 * A writer is its name (ARGV[13], GuardDeps.writer): the link's relay goes by its lease key, and
 * every other caller of the same link (`repair`) by a name of its own, or it would skip the relay's
 * entry here (blind to its lease-mode claims) and overwrite the relay's word with its own.
 *
 * Repair (CLAIM's repair rule) leaves an item with a version in flight while another live writer says
 * "L" or "K": a claim by lease shows nothing, a keyed claim shows its id but not the version it
 * carries, so a newer version of the entity may be published and not yet committed, and the repaired
 * one (equal to the stored version or newer) would land after it. A writer that says "l" holds none.
 *
 * Sets: now (server ms), others (another live writer), leased (another live "L" writer), keyed
 * (another live "K" writer).
 */
export const WRITERS = `
local now
do
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local others, leased, keyed = false, false, false
do
  local ttl = tonumber(ARGV[7])
  local all = redis.call('HGETALL', KEYS[3])
  for k = 1, #all, 2 do
    if all[k] ~= ARGV[13] then
      local word, at = string.match(all[k + 1], '^(%a):(%d+)$')
      at = tonumber(at)
      if at and at > now - ttl then
        others = true
        if word == 'L' then leased = true end
        if word == 'K' then keyed = true end
      elseif not at or at < now - 10 * ttl then
        redis.set_repl(redis.REPL_NONE)
        redis.call('HDEL', KEYS[3], all[k])
        redis.set_repl(redis.REPL_ALL)
      end
    end
  end
end
`;
