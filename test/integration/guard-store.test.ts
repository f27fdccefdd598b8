import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Redis } from "ioredis";
import { pino } from "pino";
import { uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { isRelayError } from "../../src/errors.js";
import { inspectId, inspectVersion } from "../../src/guard/layout.js";
import { guardKeys } from "../../src/guard/lua.js";
import { MemoryGuard, MemoryGuardStore } from "../../src/guard/memory-guard.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { ClaimedItem, ClaimResult, Guard, GuardItem } from "../../src/guard/types.js";

/**
 * The guard's decisions, run against both stores: Redis (a real redis-server) and memory. Each
 * test gets a fresh scope; guards made from one Space share state like relays sharing one Redis.
 * Assertions look at the returned decisions and at what is stored: an id's state ("c:<token>"
 * claimed, "d" committed, null) and an entity's version, wherever the store keeps them (the memory
 * guard in one key per id; Redis in claim keys and bucket hashes, see src/guard/layout.ts).
 */

interface Space {
  guard(ttl?: { claimTtlMs?: number; idTtlMs?: number }): Promise<Guard>;
  /** An id's state: "c:<token>", "d" or null. */
  id(id: string): Promise<string | null>;
  /** Remaining TTL (ms) of what holds the id, -1 without expiry, -2 when absent. */
  idTtl(id: string): Promise<number>;
  /** An entity's stored version, or null. */
  version(entity: string): Promise<string | null>;
  /** Remaining TTL (ms) of what holds the version, -1 without expiry, -2 when absent. */
  versionTtl(entity: string): Promise<number>;
}

const logger = pino({ level: "silent" });
const ID_TTL = 60_000;
const CLAIM_TTL = 30_000;
const servers = withServers({ after });
let redisUrl = "";
let inspect: Redis | undefined;
const guards: Guard[] = [];

before(async () => {
  const redis = await servers.startRedis({ appendonly: true });
  redisUrl = redis.url;
  inspect = new Redis(redis.url);
});
after(async () => {
  await Promise.all(guards.map((g) => g.stop()));
  inspect?.disconnect();
});

const backends: Record<"memory" | "redis", () => Space> = {
  memory() {
    const scope = uniqueName("B:MEM");
    const store = new MemoryGuardStore();
    const keys = guardKeys(scope);
    return {
      async guard(ttl = {}) {
        const cfg = { idTtlMs: ttl.idTtlMs ?? ID_TTL, claimTtlMs: ttl.claimTtlMs ?? CLAIM_TTL };
        const g = new MemoryGuard(cfg, { logger, scope, linkName: "t", store });
        await g.start();
        return g;
      },
      id: async (id) => store.get(keys.id(id)) ?? null,
      idTtl: async (id) => store.ttl(keys.id(id)) ?? -2,
      version: async (entity) => store.get(keys.version(entity)) ?? null,
      versionTtl: async (entity) => store.ttl(keys.version(entity)) ?? -2,
    };
  },
  redis() {
    const scope = uniqueName("B:REDIS");
    const client = inspect!;
    return {
      async guard(ttl = {}) {
        const cfg = { idTtlMs: ttl.idTtlMs ?? ID_TTL, claimTtlMs: ttl.claimTtlMs ?? CLAIM_TTL, strict: true };
        const g = new RedisGuard({ kind: "redis", url: redisUrl }, cfg, { logger, scope, linkName: "t" });
        guards.push(g);
        await g.start();
        return g;
      },
      id: async (id) => (await inspectId(client, scope, id)).state,
      idTtl: async (id) => (await inspectId(client, scope, id)).pttl ?? -2,
      version: async (entity) => (await inspectVersion(client, scope, entity)).version,
      versionTtl: async (entity) => (await inspectVersion(client, scope, entity)).pttl ?? -2,
    };
  },
};

const decisions = (rs: ClaimResult[]) => rs.map((r) => r.decision);
/** The claimed items of a claim call, ready for commit/release. */
function claimed(items: GuardItem[], rs: ClaimResult[]): ClaimedItem[] {
  return items.flatMap((item, i) => (rs[i]?.token ? [{ ...item, token: rs[i].token }] : []));
}
const v = (id: string, version: number, entity = "E1"): GuardItem => ({ id, entity, version });

for (const [name, makeSpace] of Object.entries(backends)) {
  describe(`guard semantics (${name})`, () => {
    test("claim → relay with one token per call; commit → done with the id TTL; then duplicate", async () => {
      const s = makeSpace();
      const g = await s.guard();
      const items = [{ id: "a" }, { id: "b" }];
      const rs = await g.claim(items);
      assert.deepEqual(decisions(rs), ["relay", "relay"]);
      assert.ok(rs[0]?.token && rs[0].token === rs[1]?.token);
      assert.equal(await s.id("a"), `c:${rs[0].token}`);
      const claimTtl = await s.idTtl("a");
      assert.ok(claimTtl > CLAIM_TTL - 5_000 && claimTtl <= CLAIM_TTL, `claim ttl ${claimTtl}`);

      await g.commit(claimed(items, rs).slice(0, 1));
      assert.equal(await s.id("a"), "d");
      // Redis keeps a committed id with its bucket: for idTtl to 2 × idTtl (see layout.ts).
      const doneTtl = await s.idTtl("a");
      assert.ok(doneTtl > ID_TTL - 5_000 && doneTtl <= ID_TTL * 2, `done ttl ${doneTtl}`);

      // "b" is still claimed by the first call: a second call (other token) must not relay it too.
      const again = await g.claim(items);
      assert.deepEqual(decisions(again), ["duplicate", "in-flight"]);
      assert.notEqual(again[0]?.token, rs[0].token);
      assert.deepEqual(await g.claim([]), []);
    });

    test("lease revisions fence the guard: a claim or commit under an older lease revision than one seen is refused and changes nothing", async () => {
      const s = makeSpace();
      const [exOwner, newOwner] = [await s.guard(), await s.guard()]; // two relays of one group, on one link
      const item = v("m1", 1);
      // The ex-owner claimed under lease revision 5, then froze; the new owner took over under lease revision 9.
      const [claimedByEx] = await exOwner.claim([item], undefined, { leaseRevision: 5 });
      assert.equal(claimedByEx?.decision, "relay");
      const [taken] = await newOwner.claim([item], undefined, { leaseRevision: 9, takeover: true });
      assert.equal(taken?.decision, "relay");
      // Woken, the ex-owner's commit and any new claim are refused: nothing is written.
      const fenced = (err: unknown) => isRelayError(err, "LEASE_FENCED") && /lease revision 5 is older than lease revision 9/.test(err.message);
      await assert.rejects(exOwner.commit([{ ...item, token: claimedByEx?.token ?? "" }], { leaseRevision: 5 }), fenced);
      await assert.rejects(exOwner.claim([{ id: "m2" }], undefined, { leaseRevision: 5 }), fenced);
      // The new owner's claim: a claim key on memory; on Redis, where the link is its scope's only
      // writer, its lease (no key per id, guard-writers.test.ts).
      assert.equal(await s.id("m1"), name === "redis" ? null : `c:${taken?.token}`, "m1 is still the new owner's claim, not done");
      assert.equal(await s.version("E1"), null, "the version did not move");
      assert.equal(await s.id("m2"), null, "m2 was not claimed");
      // The new owner commits; calls without a lease revision (a relay outside a group) are not fenced.
      await newOwner.commit([{ ...item, token: taken?.token ?? "" }], { leaseRevision: 9 });
      assert.equal(await s.id("m1"), "d");
      assert.equal(await s.version("E1"), "1");
      assert.deepEqual(decisions(await exOwner.claim([{ id: "m3" }])), ["relay"]);
    });

    test("a lease bucket re-created: its incarnation is compared before the lease revision (a newer one resets the fence, an older one is refused); a fence from before incarnations is the oldest", async () => {
      const s = makeSpace();
      const [oldOwner, newOwner] = [await s.guard(), await s.guard()];
      const fenced = (re: RegExp) => (err: unknown) => isRelayError(err, "LEASE_FENCED") && re.test(err.message);
      const refusals = (g: Guard) => g.fenced?.refusals;
      // A fence written without an incarnation (relays before it): any incarnation is newer.
      assert.deepEqual(decisions(await oldOwner.claim([{ id: "i0" }], undefined, { leaseRevision: 700 })), ["relay"]);
      // Lease revision 500 of the bucket created at 1 s, then the bucket re-created at 2 s: its revisions start over.
      assert.deepEqual(decisions(await oldOwner.claim([{ id: "i1" }], undefined, { leaseRevision: 500, incarnation: 1_000 })), ["relay"]);
      assert.deepEqual(decisions(await newOwner.claim([{ id: "i2" }], undefined, { leaseRevision: 3, incarnation: 2_000 })), ["relay"]);
      assert.equal(refusals(newOwner), undefined);
      // The old bucket's lease revisions are refused now, however high; nothing is claimed or committed.
      const older = fenced(/lease revision 900 of lease bucket 1970-01-01T00:00:01\.000Z is older than lease revision 3 of lease bucket 1970-01-01T00:00:02\.000Z/);
      await assert.rejects(oldOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 900, incarnation: 1_000 }), older);
      await assert.rejects(oldOwner.commit([{ id: "i1", token: "t" }], { leaseRevision: 900, incarnation: 1_000 }), older);
      assert.equal(await s.id("i3"), null);
      assert.notEqual(await s.id("i1"), "d");
      assert.equal(refusals(oldOwner), 2, "the guard counts the refusals of that token");
      assert.equal(oldOwner.fenced?.leaseRevision, 900);
      // Within the new bucket, lease revisions compare as they always did.
      await assert.rejects(newOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 2, incarnation: 2_000 }), fenced(/lease revision 2 of .* is older than lease revision 3 of/));
      assert.equal(refusals(newOwner), 1);
      assert.deepEqual(decisions(await newOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 4, incarnation: 2_000 })), ["relay"]);
      assert.equal(refusals(newOwner), undefined, "a call that passes the fence ends the streak");
    });

    test("a lease bucket re-created with an earlier creation time (a server clock behind): one the fence never saw is the newer; an owner of one it saw is refused, however late its time or high its revision, and never moves it back", async () => {
      const s = makeSpace();
      const [oldOwner, newOwner, third] = [await s.guard(), await s.guard(), await s.guard()];
      const fenced = (re: RegExp) => (err: unknown) => isRelayError(err, "LEASE_FENCED") && re.test(err.message);
      // The old bucket was stamped 5 s; the bucket re-created after it, by a server whose clock is behind, 2 s.
      assert.deepEqual(decisions(await oldOwner.claim([{ id: "i1" }], undefined, { leaseRevision: 500, incarnation: 5_000 })), ["relay"]);
      assert.deepEqual(decisions(await newOwner.claim([{ id: "i2" }], undefined, { leaseRevision: 3, incarnation: 2_000 })), ["relay"]);
      const older = fenced(/lease revision 900 of lease bucket 1970-01-01T00:00:05\.000Z is older than lease revision 3 of lease bucket 1970-01-01T00:00:02\.000Z/);
      await assert.rejects(oldOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 900, incarnation: 5_000 }), older);
      await assert.rejects(oldOwner.commit([{ id: "i1", token: "t" }], { leaseRevision: 900, incarnation: 5_000 }), older);
      assert.equal(await s.id("i3"), null);
      assert.notEqual(await s.id("i1"), "d");
      // Within the new bucket, lease revisions compare as they always did.
      await assert.rejects(newOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 2, incarnation: 2_000 }), fenced(/lease revision 2 of .* is older than lease revision 3 of/));
      assert.deepEqual(decisions(await newOwner.claim([{ id: "i3" }], undefined, { leaseRevision: 4, incarnation: 2_000 })), ["relay"]);
      // Re-created once more, stamped earlier still: new again; both earlier buckets' owners are refused.
      assert.deepEqual(decisions(await third.claim([{ id: "i4" }], undefined, { leaseRevision: 1, incarnation: 1_000 })), ["relay"]);
      await assert.rejects(newOwner.claim([{ id: "i5" }], undefined, { leaseRevision: 9, incarnation: 2_000 }), fenced(/is older than lease revision 1 of lease bucket 1970-01-01T00:00:01\.000Z/));
      await assert.rejects(oldOwner.claim([{ id: "i5" }], undefined, { leaseRevision: 1_000_000, incarnation: 5_000 }), fenced(/is older than lease revision 1 of/));
      assert.equal(await s.id("i5"), null);
      assert.deepEqual(decisions(await third.claim([{ id: "i5" }], undefined, { leaseRevision: 1, incarnation: 1_000 })), ["relay"]);
    });

    test("another instance's open claim is in-flight; release frees it; results keep input order", async () => {
      const s = makeSpace();
      const [a, b] = [await s.guard(), await s.guard()];
      const ra = await a.claim([{ id: "x" }]);
      const mixed = [{ id: "new1" }, { id: "x" }, { id: "new2" }];
      const rb = await b.claim(mixed);
      assert.deepEqual(decisions(rb), ["relay", "in-flight", "relay"]);
      assert.equal(rb[1]?.token, undefined);
      await a.release(claimed([{ id: "x" }], ra));
      assert.equal(await s.id("x"), null);
      assert.deepEqual(decisions(await b.claim([{ id: "x" }])), ["relay"]);
    });

    test("an expired claim lets another instance take over; the late release keeps its claim", async () => {
      const s = makeSpace();
      const [a, b] = [await s.guard({ claimTtlMs: 150 }), await s.guard({ claimTtlMs: 150 })];
      const ra = await a.claim([{ id: "x" }]);
      assert.deepEqual(decisions(await b.claim([{ id: "x" }])), ["in-flight"]);
      await delay(250);
      const rb = await b.claim([{ id: "x" }]);
      assert.deepEqual(decisions(rb), ["relay"]);
      await a.release(claimed([{ id: "x" }], ra));
      assert.equal(await s.id("x"), `c:${rb[0]?.token}`, "a's release deleted b's claim");
      // a's late commit still marks it done: the message was published.
      await a.commit(claimed([{ id: "x" }], ra));
      assert.equal(await s.id("x"), "d");
      await b.release(claimed([{ id: "x" }], rb));
      assert.equal(await s.id("x"), "d");
    });

    test("versions across batches: 82 committed, then 81 and 82 are stale and take no claim", async () => {
      const s = makeSpace();
      const g = await s.guard();
      const r82 = await g.claim([v("m82", 82)]);
      // (The Redis guard also hands back the id's key, see guard-layout.test.ts; the memory guard has none.)
      assert.deepEqual(
        r82.map(({ key: _key, ...r }) => r),
        [{ decision: "relay", token: r82[0]?.token }],
      );
      assert.equal(await s.version("E1"), null, "a claim must not move the version");
      await g.commit(claimed([v("m82", 82)], r82));
      assert.equal(await s.version("E1"), "82");
      assert.equal(await s.versionTtl("E1"), -1, "versions have no TTL");

      const r = await g.claim([v("m81", 81), v("m82b", 82), v("m83", 83), v("other", 1, "E2")]);
      assert.deepEqual(
        r.map(({ decision, storedVersion }) => ({ decision, storedVersion })),
        [
          { decision: "stale", storedVersion: 82 },
          { decision: "stale", storedVersion: 82 },
          { decision: "relay", storedVersion: 82 },
          { decision: "relay", storedVersion: undefined },
        ],
      );
      assert.equal(await s.id("m81"), null);
      assert.equal(await s.id("m82b"), null);
    });

    test("versions within one batch: [82, 81] → 81 stale; [81, 82] → both relay", async () => {
      const s = makeSpace();
      const g = await s.guard();
      const down = await g.claim([v("d82", 82, "down"), v("d81", 81, "down")]);
      assert.deepEqual(decisions(down), ["relay", "stale"]);
      assert.equal(down[1]?.storedVersion, 82);
      assert.equal(await s.id("d81"), null);
      const up = await g.claim([v("u81", 81, "up"), v("u82", 82, "up"), v("u82", 82, "up")]);
      assert.deepEqual(
        decisions(up),
        ["relay", "relay", "in-flight"],
        "a repeated id is carried by its first copy",
      );
      assert.equal(await s.version("down"), null);
    });

    test("commit advances versions by compare-and-set only; a done id is a duplicate even if stale", async () => {
      const s = makeSpace();
      const [a, b] = [await s.guard(), await s.guard()];
      const r10 = await a.claim([v("v10", 10)]);
      const r9 = await b.claim([v("v9", 9)]);
      assert.deepEqual([...decisions(r10), ...decisions(r9)], ["relay", "relay"]);
      await a.commit(claimed([v("v10", 10)], r10));
      await b.commit(claimed([v("v9", 9)], r9));
      assert.equal(await s.version("E1"), "10", "an older commit lowered the version");

      const batch = [v("v12", 12), v("v11", 11)];
      await a.commit(
        claimed(batch, [
          { decision: "relay", token: "t" },
          { decision: "relay", token: "t" },
        ]),
      );
      assert.equal(await s.version("E1"), "12");
      assert.deepEqual(decisions(await a.claim([v("v10", 10), v("v12", 12), v("v12b", 12)])), [
        "duplicate",
        "duplicate",
        "stale",
      ]);
    });

    test("ids and entities with spaces, colons, braces, tabs and non-ASCII keep their keys; a line break is refused", async () => {
      const s = makeSpace();
      const g = await s.guard();
      const odd: GuardItem[] = [
        { id: "a b:{c}" },
        v("tab\tid", 3, "entité {x}"),
        { id: "ünïcødé-✓" },
        { id: "plain" },
      ];
      const rs = await g.claim(odd);
      assert.deepEqual(decisions(rs), ["relay", "relay", "relay", "relay"]);
      for (const item of odd) assert.equal(await s.id(item.id), `c:${rs[0]?.token}`, item.id);
      await g.commit(claimed(odd, rs));
      assert.equal(await s.version("entité {x}"), "3");
      const again = await g.claim([v("tab\tid-2", 2, "entité {x}"), { id: "a b:{c}" }]);
      assert.deepEqual(decisions(again), ["stale", "duplicate"]);
      assert.equal(again[0]?.storedVersion, 3, "the stored version compared against comes back");
      assert.equal(again[1]?.storedVersion, undefined);
      await assert.rejects(g.claim([{ id: "line\nbreak" }]), { code: "BAD_MESSAGE" });
      await assert.rejects(g.claim([{ id: "ok", entity: "E\n", version: 1 }]), { code: "BAD_MESSAGE" });
    });

    test("items without entity or version skip the version check", async () => {
      const s = makeSpace();
      const g = await s.guard();
      const items: GuardItem[] = [{ id: "n1", entity: "E" }, { id: "n2", version: 1 }, v("n3", 5, "E")];
      const rs = await g.claim(items);
      assert.deepEqual(decisions(rs), ["relay", "relay", "relay"]);
      await g.commit(claimed(items, rs));
      assert.equal(await s.version("E"), "5");
      await assert.rejects(g.claim([{ id: "nan", entity: "E", version: Number.NaN }]), {
        code: "BAD_MESSAGE",
      });
    });
  });
}
