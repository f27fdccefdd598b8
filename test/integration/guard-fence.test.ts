import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Redis } from "ioredis";
import { pino } from "pino";
import { isRelayError } from "../../src/errors.js";
import { GroupKeys } from "../../src/guard/layout.js";
import { FENCE_SEEN } from "../../src/guard/lua.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { ClaimResult, Guard } from "../../src/guard/types.js";
import { uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";

/**
 * The lease fence (lua.ts FENCE) shared with relays of the version before it, which kept only the
 * greatest lease bucket incarnation in "inc:<fence key>" and compared incarnations by value. Their
 * script is run here as they sent it, on a real redis-server, beside this version's guard: neither lets
 * an owner of a bucket the fence has seen move it back, a fence they wrote alone is read, and what they
 * take from a newer bucket, this version follows.
 */

/** lua.ts FENCE as relays before the order of sight sent it (cb031b6), returning "ok" when it passes. */
const OLD_FENCE = `
local function fence()
  local token = ARGV[1]
  local sep = string.find(token, ':', 1, true)
  local revisionRaw = sep and string.sub(token, sep + 1) or token
  local revision = tonumber(revisionRaw)
  local newestRaw = redis.call('GET', KEYS[2]) or '0'
  local newest = tonumber(newestRaw)
  if sep then
    local field = 'inc:' .. KEYS[2]
    local incRaw = string.sub(token, 1, sep - 1)
    local knownRaw = redis.call('HGET', KEYS[1], field) or '0'
    local inc = tonumber(incRaw)
    local known = tonumber(knownRaw)
    if inc < known then return {'F', knownRaw .. ':' .. newestRaw} end
    if inc > known then
      redis.call('HSET', KEYS[1], field, incRaw)
      newest = 0
    end
  end
  if revision < newest then return {'F', newestRaw} end
  if revision > newest then redis.call('SET', KEYS[2], revisionRaw) end
  return nil
end
return fence() or 'ok'
`;

const logger = pino({ level: "silent" });
const servers = withServers({ after });
let redisUrl = "";
let admin: Redis | undefined;
const guards: Guard[] = [];
before(async () => {
  redisUrl = (await servers.startRedis({ appendonly: true })).url;
  admin = new Redis(redisUrl);
});
after(async () => {
  await Promise.all(guards.map((g) => g.stop()));
  admin?.disconnect();
});

async function space() {
  const scope = uniqueName("B:FENCE");
  const keys = new GroupKeys(scope, 0);
  const guard = new RedisGuard(
    { kind: "redis", url: redisUrl },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: true },
    { logger, scope, linkName: "t" },
  );
  guards.push(guard);
  await guard.start();
  let n = 0;
  return {
    keys,
    /** A claim of a new id by this version's guard under (incarnation, lease revision): passed, or refused by the fence. */
    async claim(incarnation: number, leaseRevision: number): Promise<"passed" | "fenced"> {
      try {
        const rs: ClaimResult[] = await guard.claim([{ id: `i${n++}` }], undefined, {
          leaseRevision,
          incarnation,
        });
        assert.equal(rs[0]?.decision, "relay");
        return "passed";
      } catch (err) {
        if (isRelayError(err, "LEASE_FENCED")) return "fenced";
        throw err;
      }
    },
    /** The fence as a relay of the version before this one applies it. */
    async older(incarnation: number, leaseRevision: number): Promise<"passed" | "fenced"> {
      const reply = await admin!.eval(
        OLD_FENCE,
        2,
        keys.meta,
        keys.fence("t"),
        `${incarnation}:${leaseRevision}`,
      );
      return reply === "ok" ? "passed" : "fenced";
    },
    seen: async () => (await admin!.hget(keys.meta, `incs:${keys.fence("t")}`)) ?? "",
  };
}

test("a clock gone back: relays of the version before refuse every token of a bucket this version's fence has seen (the ex-owner cannot move it back through them)", async () => {
  const s = await space();
  assert.equal(await s.claim(5_000, 500), "passed");
  assert.equal(await s.claim(2_000, 3), "passed", "a bucket re-created with an earlier time is not fenced");
  assert.equal(await s.older(5_000, 900), "fenced", "the old bucket's owner, as a relay before this version");
  assert.equal(await s.claim(5_000, 900), "fenced");
  assert.equal(await s.claim(2_000, 4), "passed", "the new bucket's owner goes on");
  assert.equal(await s.seen(), "5000,2000");
});

test("a newer bucket taken by a relay of the version before is followed: the bucket it left is refused", async () => {
  const s = await space();
  assert.equal(await s.claim(5_000, 500), "passed");
  assert.equal(await s.claim(2_000, 3), "passed");
  // Clocks went forward again: the older relay takes a bucket stamped after every one seen.
  assert.equal(await s.older(9_000, 2), "passed");
  assert.equal(await s.claim(2_000, 4), "fenced", "the bucket before it is older now");
  assert.equal(await s.claim(9_000, 1), "fenced", "within that bucket lease revisions compare");
  assert.equal(await s.claim(9_000, 3), "passed");
  assert.equal(await s.seen(), "5000,2000,9000");
  assert.equal(
    await s.older(9_000, 4),
    "passed",
    "and the older relay goes on in it while clocks go forward",
  );
});

test("a fence written by relays of the version before alone: the incarnation it holds is the one it has seen; an unseen earlier one is newer; the list stays bounded", async () => {
  const s = await space();
  assert.equal(await s.older(7_000, 50), "passed");
  assert.equal(await s.claim(7_000, 49), "fenced", "their lease revision is the fence's");
  assert.equal(await s.claim(7_000, 60), "passed");
  assert.equal(await s.claim(3_000, 1), "passed", "re-created with an earlier time: not fenced for good");
  assert.equal(await s.older(7_000, 70), "fenced");
  assert.equal(await s.claim(7_000, 70), "fenced");
  for (let i = 0; i < FENCE_SEEN + 4; i++) assert.equal(await s.claim(10_000 + i, 1), "passed");
  const seen = (await s.seen()).split(",");
  assert.equal(seen.length, FENCE_SEEN, `at most ${FENCE_SEEN} incarnations kept`);
  assert.equal(seen.at(-1), String(10_000 + FENCE_SEEN + 3));
  assert.equal(
    await s.claim(10_000 + FENCE_SEEN, 5),
    "fenced",
    "one kept and seen before the fence's own is refused",
  );
});
