/**
 * The guard scripts' lease fence (lua.ts includes it first thing in claim and commit; its reply is
 * lua.ts FENCED_REPLY).
 */

/** How many lease bucket incarnations a fence remembers, in the order it first saw them. */
export const FENCE_SEEN = 16;

/**
 * The lease-revision fence of the group, first thing in claim and commit: ARGV[1] is the caller's
 * fencing token, "<incarnation>:<lease revision>" ("<lease revision>" from a caller without an
 * incarnation, "" when it has none); KEYS[2] is the group's fence key `relay:{T}:epoch:<fence>` (the
 * newest lease revision, a number, as it always was), KEYS[1] the directory.
 *
 * Incarnations (lease bucket creation times, ms) are compared by the order the fence first saw them,
 * not by value: a server's clock can be behind, so a bucket re-created later can carry an earlier time.
 * The directory's field "incs:<fence key>" lists the last FENCE_SEEN incarnations the fence has seen,
 * comma-separated, in the order first seen; the last one is the fence's own (the lease revision in the
 * fence key is one of its bucket). A token's incarnation:
 * - the fence's own: its lease revision is compared as below;
 * - another one in the list: seen before the fence's own, so of a bucket older than it: {'F',
 *   "<own incarnation>:<newest>"}, nothing changes (an ex-owner never moves the fence back);
 * - one never seen: a bucket created after every one the fence has seen (deleted and re-created while
 *   the fence ran on the old one): it is appended and becomes the fence's own, and the lease revision
 *   is compared with nothing (the new bucket's revisions start again at 1). What the fence cannot
 *   tell: an owner of a bucket it never saw (one that reached no guard before its bucket was deleted,
 *   or FENCE_SEEN buckets ago) counts as new too; the lease bucket's hold-offs (lease-bucket.ts) and
 *   the owner's own deadline are what stop it.
 * Then the lease revision: older than the newest returns {'F', newest} and changes nothing; newer
 * becomes the newest. A token without an incarnation compares lease revisions only and leaves the
 * incarnations alone.
 *
 * Relays before the list keep the incarnation in the field "inc:<fence key>" and compare it by value
 * (an older one refused, a newer one taken). This script keeps that field for them: the fence's own
 * incarnation while it is also the greatest seen (so relays of both versions behave alike while clocks
 * go forward), else the greatest seen + 1, which refuses every token they can hold of a seen bucket
 * (an ex-owner cannot move the fence back through an older relay either). A value there that this
 * script did not write (an older relay took a newer bucket's token) is an incarnation seen last: it is
 * appended. A fence with that field and no list (written by older relays only) has seen that one
 * incarnation; a fence with neither has seen none (every incarnation is new).
 *
 * Wire format: relays of other versions (before and after the lease revision was renamed from
 * "epoch") share these keys during a rolling upgrade, so the key names (`epoch:` in layout.ts, the
 * fields "inc:<fence key>" and "incs:<fence key>"), the token's format and the reply stay as they are.
 */
export const FENCE = `
if ARGV[1] ~= '' then
  local token = ARGV[1]
  local sep = string.find(token, ':', 1, true)
  local revisionRaw = sep and string.sub(token, sep + 1) or token
  local revision = tonumber(revisionRaw)
  local newestRaw = redis.call('GET', KEYS[2]) or '0'
  local newest = tonumber(newestRaw)
  if sep then
    local oldField = 'inc:' .. KEYS[2]
    local listField = 'incs:' .. KEYS[2]
    local inc = tonumber(string.sub(token, 1, sep - 1))
    local seen = {}
    for x in string.gmatch(redis.call('HGET', KEYS[1], listField) or '', '[^,]+') do seen[#seen + 1] = tonumber(x) end
    local function forOlder()
      local top = seen[#seen]
      for i = 1, #seen do if seen[i] > top then top = seen[i] end end
      return top == seen[#seen] and top or top + 1
    end
    local function position(v)
      for i = 1, #seen do if seen[i] == v then return i end end
      return nil
    end
    local changed = false
    local older = tonumber(redis.call('HGET', KEYS[1], oldField) or '')
    if older and (#seen == 0 or older ~= forOlder()) and not position(older) then
      seen[#seen + 1] = older
      changed = true
    end
    if #seen == 0 or seen[#seen] ~= inc then
      if position(inc) then return {'F', string.format('%.0f', seen[#seen]) .. ':' .. newestRaw} end
      seen[#seen + 1] = inc
      newest = 0
      changed = true
    end
    if changed then
      while #seen > ${FENCE_SEEN} do table.remove(seen, 1) end
      local list = {}
      for i = 1, #seen do list[i] = string.format('%.0f', seen[i]) end
      redis.call('HSET', KEYS[1], listField, table.concat(list, ','), oldField, string.format('%.0f', forOlder()))
    end
  end
  if revision < newest then return {'F', newestRaw} end
  if revision > newest then redis.call('SET', KEYS[2], revisionRaw) end
end
`;
