import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Redis } from "ioredis";
import { pino } from "pino";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { GroupKeys, inspectId } from "../../src/guard/layout.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { ClaimedItem, ClaimResult, GuardItem } from "../../src/guard/types.js";

/**
 * Claims by lease (src/guard/lua.ts WRITERS): a link that is its guard scope's only live writer claims
 * no key per id, its lease is the claim; a second writer (another cursor into the same destination
 * stream, or `repair`) makes both claim with keys, and never relays an id the first may still be
 * publishing by its lease. On a real redis-server.
 */

const servers = withServers({ after });
let redisUrl = "";
let admin: Redis | undefined;
const guards: RedisGuard[] = [];

before(async () => {
  const redis = await servers.startRedis({ appendonly: true });
  redisUrl = redis.url;
  admin = new Redis(redis.url);
});
after(async () => {
  await Promise.all(guards.map((g) => g.stop()));
  admin?.disconnect();
});

async function guard(scope: string, fence: string, claimTtlMs = 30_000): Promise<RedisGuard> {
  const g = new RedisGuard(
    { kind: "redis", url: redisUrl },
    { idTtlMs: 60_000, claimTtlMs, strict: true },
    { logger: pino({ level: "silent" }), scope, linkName: fence, fence },
  );
  guards.push(g);
  await g.start();
  return g;
}

const decisions = (rs: ClaimResult[]) => rs.map((r) => r.decision);
function claimed(items: GuardItem[], rs: ClaimResult[]): ClaimedItem[] {
  return items.flatMap((item, i) => (rs[i]?.token ? [{ ...item, token: rs[i].token }] : []));
}
const ids = (prefix: string, n: number): GuardItem[] => Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}` }));
async function claimKeys(scope: string): Promise<string[]> {
  return admin!.keys(`relay:{${scope}}:id:*`);
}
async function word(scope: string, fence: string): Promise<string | undefined> {
  const v = await admin!.hget(new GroupKeys(scope, 0).writers, fence);
  return v?.split(":")[0];
}

test("a scope's only writer claims by its lease: no claim key per id, the same decisions, its word L while it holds ids and l after", async () => {
  const scope = uniqueName("W:ONE");
  const a = await guard(scope, "a");
  const lease = { leaseRevision: 3 };
  const items = [...ids("m", 200), { id: "v1", entity: "E", version: 5 }, { id: "v0", entity: "E", version: 4 }, { id: "m-0" }];
  const rs = await a.claim(items, undefined, lease);
  assert.deepEqual(decisions(rs).slice(-3), ["relay", "stale", "in-flight"], "versions and repeats within a batch as keyed");
  assert.ok(decisions(rs).slice(0, 200).every((d) => d === "relay"));
  assert.deepEqual(await claimKeys(scope), [], "no claim key for 201 relayed ids");
  assert.equal(await word(scope, "a"), "L", "holding ids claimed by its lease");
  await a.commit(claimed(items, rs), lease);
  assert.equal(await word(scope, "a"), "l", "holding none");
  assert.equal((await inspectId(admin!, scope, "m-7")).state, "d", "committed into its bucket");
  const again = await a.claim([{ id: "m-7" }, { id: "v2", entity: "E", version: 5 }, { id: "new" }], undefined, lease);
  assert.deepEqual(decisions(again), ["duplicate", "stale", "relay"]);
  // Released, an id is simply forgotten (no key to delete) and can be claimed again.
  await a.release(claimed([{ id: "new" }], again.slice(2)));
  assert.deepEqual(decisions(await a.claim([{ id: "new" }], undefined, lease)), ["relay"]);
  assert.deepEqual(await claimKeys(scope), []);
});

test("a second writer: it waits while the first holds ids claimed by its lease, then both claim with keys; alone again, the first goes back to its lease", async () => {
  const scope = uniqueName("W:TWO");
  const claimTtlMs = 1_500;
  const a = await guard(scope, "a", claimTtlMs);
  const b = await guard(scope, "b", claimTtlMs);
  const leaseA = { leaseRevision: 1 };
  const leaseB = { leaseRevision: 1 };
  const first = ids("x", 50);
  const ra = await a.claim(first, undefined, leaseA);
  assert.ok(decisions(ra).every((d) => d === "relay"));
  assert.deepEqual(await claimKeys(scope), [], "a claimed by its lease");

  // b cannot see which ids a holds: everything it would relay is in-flight, nothing is claimed.
  const overlap = [{ id: "x-3" }, { id: "y-1" }];
  assert.deepEqual(decisions(await b.claim(overlap, undefined, leaseB)), ["in-flight", "in-flight"]);
  assert.deepEqual(await claimKeys(scope), [], "b took no claim while a holds ids by its lease");
  assert.equal(await word(scope, "b"), "K");

  // a's next claim sees b: it claims with keys, and still says L (its first 50 are unconfirmed).
  const rk = await a.claim([{ id: "x-100" }], undefined, leaseA);
  assert.deepEqual(decisions(rk), ["relay"]);
  assert.equal(await word(scope, "a"), "L");
  assert.deepEqual(await claimKeys(scope), [new GroupKeys(scope, 0).claim("x-100")], "a claims with a key now");
  assert.deepEqual(decisions(await b.claim(overlap, undefined, leaseB)), ["in-flight", "in-flight"], "still held");

  // a commits its lease-claimed ids: its word is K, and b goes on with keys.
  await a.commit(claimed(first, ra), leaseA);
  assert.equal(await word(scope, "a"), "K");
  const rb = await b.claim([...overlap, { id: "x-100" }], undefined, leaseB);
  assert.deepEqual(decisions(rb), ["duplicate", "relay", "in-flight"], "a's commit is seen, a's claim key holds x-100");
  assert.equal(await admin!.exists(new GroupKeys(scope, 0).claim("y-1")), 1, "b claimed y-1 with a key");
  await b.commit(claimed(overlap, rb), leaseB);
  await a.commit(claimed([{ id: "x-100" }], rk), leaseA);

  // b goes silent: a claim TTL later, a is alone again and claims by its lease.
  await check(
    async () => {
      const probe = [{ id: `z-${Date.now()}` }];
      await a.release(claimed(probe, await a.claim(probe, undefined, leaseA)));
      return (await word(scope, "a")) === "L" || (await word(scope, "a")) === "l";
    },
    { name: "a back to claims by its lease", timeoutMs: 10_000, intervalMs: 200 },
  );
  const keysBefore = (await claimKeys(scope)).length;
  const rl = await a.claim(ids("after", 20), undefined, leaseA);
  assert.ok(decisions(rl).every((d) => d === "relay"));
  assert.equal((await claimKeys(scope)).length, keysBefore, "no new claim key");
});

test("a caller without a lease (repair, tools) always claims with keys, and counts as a writer", async () => {
  const scope = uniqueName("W:KEYED");
  const a = await guard(scope, "a");
  const tool = await guard(scope, "tool");
  const rt = await tool.claim([{ id: "k1" }]);
  assert.deepEqual(decisions(rt), ["relay"]);
  assert.equal(await admin!.exists(new GroupKeys(scope, 0).claim("k1")), 1);
  // a sees a live writer: keyed, and the tool's claim holds k1.
  assert.deepEqual(decisions(await a.claim([{ id: "k1" }, { id: "k2" }], undefined, { leaseRevision: 2 })), ["in-flight", "relay"]);
  assert.equal(await admin!.exists(new GroupKeys(scope, 0).claim("k2")), 1, "a claimed k2 with a key");
});
