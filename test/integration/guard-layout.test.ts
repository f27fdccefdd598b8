import assert from "node:assert/strict";
import { after, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Redis } from "ioredis";
import { pino } from "pino";
import {
  bucketSpanMs,
  BUCKET_FILL,
  MIN_FANOUT,
  GroupKeys,
  digest,
  inspectId,
  inspectVersion,
  parseDirectory,
} from "../../src/guard/layout.js";
import { parseConfigText } from "../../src/config/load.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { ClaimResult, GuardItem } from "../../src/guard/types.js";
import { CLAIM_LUA as V1_CLAIM, COMMIT_LUA as V1_COMMIT } from "../../bench/fixtures/guard-v1-lua.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";

/**
 * The compact Redis layout (src/guard/layout.ts): ids as fields of bucket hashes that expire as a
 * whole, buckets opened by time and by fill, versions in hashes whose fan-out a scope keeps, and
 * the previous layout's keys honoured during a rolling upgrade.
 */

const stops: (() => Promise<unknown> | void)[] = [];
after(async () => {
  for (const stop of stops.reverse()) await stop();
});
const servers = withServers({ after });

async function redis(): Promise<{ url: string; admin: Redis }> {
  const server = await servers.startRedis({ appendonly: true });
  const admin = new Redis(server.url);
  stops.push(() => admin.disconnect());
  return { url: server.url, admin };
}

async function guard(
  url: string,
  scope: string,
  opts: { idTtlMs?: number; expectedEntities?: number } = {},
): Promise<RedisGuard> {
  const versions =
    opts.expectedEntities === undefined
      ? {}
      : {
          versions: {
            entity: { kind: "header", name: "E" },
            version: { kind: "header", name: "V" },
            expectedEntities: opts.expectedEntities,
          } as const,
        };
  const g = new RedisGuard(
    { kind: "redis", url },
    { idTtlMs: opts.idTtlMs ?? 60_000, claimTtlMs: 30_000, strict: false, ...versions },
    { logger: pino({ level: "silent" }), scope, linkName: "t" },
  );
  stops.push(() => g.stop());
  await g.start();
  return g;
}

const decisions = (rs: ClaimResult[]) => rs.map((r) => r.decision);

/** Claims and commits `items`; asserts they were all new. */
async function relay(g: RedisGuard, items: GuardItem[]): Promise<void> {
  const rs = await g.claim(items);
  assert.deepEqual([...new Set(decisions(rs))], ["relay"]);
  await g.commit(items.map((item, i) => ({ ...item, token: rs[i]!.token! })));
}

async function scopeKeys(admin: Redis, scope: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, batch] = await admin.scan(cursor, "MATCH", `relay:{${scope}}:*`, "COUNT", 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== "0");
  return keys;
}

test("a committed id is a field of its bucket's hash, not a key of its own; the hashes stay listpack-encoded and expire with their bucket", async () => {
  const { url, admin } = await redis();
  const scope = uniqueName("B:LAYOUT");
  // As many ids as the first bucket holds (its hashes about full), and versions sized for 3,000 entities.
  const g = await guard(url, scope, { expectedEntities: 3_000 });
  const count = Math.floor((MIN_FANOUT * (BUCKET_FILL - 1)) / 500) * 500;
  for (let from = 0; from < count; from += 500) {
    await relay(
      g,
      Array.from({ length: 500 }, (_, i) => ({
        id: `order-${from + i}`,
        entity: `customer-${(from + i) % 3000}`,
        version: from + i,
      })),
    );
  }
  const keys = await scopeKeys(admin, scope);
  const ids = keys.filter((k) => k.includes(":i:"));
  const versions = keys.filter((k) => k.includes(":v:"));
  assert.equal(
    keys.filter((k) => k.includes(":id:")).length,
    0,
    "no key per id: claims are deleted by the commit",
  );
  assert.equal(keys.filter((k) => k.includes(":ver:")).length, 0, "no key per entity");
  assert.ok(ids.length > 0 && ids.length < count / 3, `${ids.length} bucket hashes for ${count} ids`);
  assert.ok(
    versions.length > 0 && versions.length < 3000,
    `${versions.length} version hashes for 3000 entities`,
  );
  assert.deepEqual(
    keys.filter((k) => !k.includes(":i:") && !k.includes(":v:")).sort(),
    [`relay:{${scope}}:meta`, `relay:{${scope}}:w`],
    "besides: the bucket directory and the writers",
  );

  const where = await inspectId(admin, scope, "order-42");
  assert.equal(where.state, "d");
  assert.ok(where.key?.startsWith(`relay:{${scope}}:i:`), where.key);
  const field = await admin.hexists(where.key!, Buffer.from(digest("order-42"), "latin1"));
  assert.equal(field, 1, "the id's 16-byte digest is a field of that hash");
  const usage = async (list: string[]) => {
    let fields = 0;
    let bytes = 0;
    for (const key of list) {
      assert.equal(await admin.object("ENCODING", key), "listpack", `${key} is listpack-encoded`);
      fields += await admin.hlen(key);
      bytes += Number(await admin.call("MEMORY", "USAGE", key));
    }
    return { fields, bytes };
  };
  const idUsage = await usage(ids);
  const versionUsage = await usage(versions);
  assert.equal(idUsage.fields, count + ids.length, "one field per id, plus each hash's marker");
  assert.equal(versionUsage.fields, 3000);
  for (const key of ids.slice(0, 50)) {
    const ttl = await admin.pttl(key);
    assert.ok(ttl > 60_000 - 5_000 && ttl <= 60_000 + bucketSpanMs(60_000), `bucket hash ${key} expires in ${ttl} ms`);
  }
  for (const key of versions.slice(0, 50)) assert.equal(await admin.pttl(key), -1, "versions have no TTL");
  // The keys' own memory (MEMORY USAGE: without the keyspace's dict entries, which `npm run
  // bench:guard` counts): a fraction of the ~180 and ~105 bytes of a key per id and per entity.
  assert.ok(idUsage.bytes / count < 40, `${(idUsage.bytes / count).toFixed(1)} bytes per id`);
  assert.ok(versionUsage.bytes / 3000 < 32, `${(versionUsage.bytes / 3000).toFixed(1)} bytes per entity`);
});

test("buckets: one opens when the current one's span ends; ids of every live bucket are duplicates; a bucket is forgotten idTtl after its span", async () => {
  const { url, admin } = await redis();
  const scope = uniqueName("B:SPAN");
  // idTtl 4 s: each bucket takes commits for its span (4 s) and expires 4 s after that.
  const g = await guard(url, scope, { idTtlMs: 4_000 });
  const span = bucketSpanMs(4_000);
  const first = Array.from({ length: 50 }, (_, i) => ({ id: `a${i}` }));
  const second = Array.from({ length: 50 }, (_, i) => ({ id: `b${i}` }));
  await relay(g, first);
  const dir1 = parseDirectory(await admin.hgetall(new GroupKeys(scope, 0).meta), Date.now());
  assert.equal(dir1.buckets.length, 1);
  // Two generations: a bucket takes commits for a whole idTtl and is kept for one more.
  const b1 = dir1.buckets[0]!;
  assert.equal(b1.end - b1.start, 4_000, JSON.stringify(b1));
  assert.equal(b1.expiresAt - b1.end, 4_000, JSON.stringify(b1));
  await delay(span + 200);
  // The commit finds the span over, opens a bucket (the script answers "M") and retries in it.
  await relay(g, second);
  const dir2 = parseDirectory(await admin.hgetall(new GroupKeys(scope, 0).meta), Date.now());
  assert.equal(dir2.buckets.length, 2, JSON.stringify(dir2));
  assert.notEqual(dir2.current?.id, dir1.current?.id);
  assert.equal(dir2.current?.fanout, MIN_FANOUT, "sized for 50 ids in the previous span: the minimum");
  assert.deepEqual([...new Set(decisions(await g.claim([...first, ...second])))], ["duplicate"]);
  // The first bucket expires span + 4 s after it opened; the second one a span later.
  const bucketOfA = (await inspectId(admin, scope, "a0")).key;
  assert.ok(bucketOfA);
  await check(async () => (await admin.exists(bucketOfA)) === 0, {
    name: "the first bucket's hashes expired",
    timeoutMs: 10_000,
    intervalMs: 100,
  });
  const after = await g.claim([...first.slice(0, 3), ...second.slice(0, 3)]);
  assert.deepEqual(decisions(after).slice(0, 3), ["relay", "relay", "relay"], "forgotten with its bucket");
  assert.deepEqual(
    decisions(after).slice(3),
    ["duplicate", "duplicate", "duplicate"],
    "the second bucket is still live",
  );
});

test("a bucket that fills before its span ends is closed; the next one has 4 × its hashes", async () => {
  const { url, admin } = await redis();
  const scope = uniqueName("B:FILL");
  const g = await guard(url, scope);
  const cap = MIN_FANOUT * BUCKET_FILL;
  for (let from = 0; from < cap + 1_000; from += 1_000) {
    await relay(
      g,
      Array.from({ length: 1_000 }, (_, i) => ({ id: `f-${from + i}` })),
    );
  }
  const dir = parseDirectory(await admin.hgetall(new GroupKeys(scope, 0).meta), Date.now());
  assert.equal(dir.buckets.length, 2, JSON.stringify(dir));
  assert.equal(g.liveBuckets, 2, "what relay_guard_buckets shows: a claim reads both");
  const closed = dir.buckets[1]!;
  assert.equal(closed.fanout, MIN_FANOUT);
  assert.equal(dir.current?.fanout, 4 * MIN_FANOUT);
  // Closed when the new one opened, and remembered idTtl (60 s here) from then: not from the end
  // its span would have had (claims would read it for up to another idTtl for nothing).
  assert.ok(closed.end <= dir.current!.start && closed.end > closed.start, JSON.stringify(dir));
  assert.ok(closed.end < closed.start + bucketSpanMs(60_000), JSON.stringify(dir));
  assert.equal(closed.expiresAt, closed.end + 60_000);
  assert.deepEqual(
    [...new Set(decisions(await g.claim([{ id: "f-0" }, { id: `f-${cap - 1}` }, { id: `f-${cap + 999}` }])))],
    ["duplicate"],
  );
});

test("rolling upgrade: what the previous layout's scripts wrote is honoured until it expires, and its version keys advance", async () => {
  const { url, admin } = await redis();
  const scope = uniqueName("B:UPGRADE");
  const prefix = `relay:{${scope}}:`;
  // A relay of the previous version, running its own scripts (kept verbatim in the bench fixture).
  const v1 = new Redis(url) as Redis & {
    v1Claim(...args: (string | number)[]): Promise<[string, string]>;
    v1Commit(...args: (string | number)[]): Promise<unknown>;
  };
  stops.push(() => v1.disconnect());
  v1.defineCommand("v1Claim", { lua: V1_CLAIM });
  v1.defineCommand("v1Commit", { lua: V1_COMMIT });
  const v1Claim = async (token: string, items: [string, string, string][]) =>
    (
      await v1.v1Claim(
        1,
        prefix,
        `c:${token}`,
        30_000,
        items.length,
        items.map((i) => `${i.join("\n")}\n`).join(""),
        "0",
        "",
        "t",
      )
    )[0];
  const v1Commit = (token: string, ttl: number, items: [string, string, string][]) =>
    v1.v1Commit(
      1,
      prefix,
      ttl,
      items.length,
      items.map((i) => `c:${token}\n${i.join("\n")}\n`).join(""),
      "",
      "t",
    );
  assert.equal(
    await v1Claim("old.1", [
      ["done-1", "", ""],
      ["done-short", "", ""],
      ["v-10", "E", "10"],
      ["held", "", ""],
    ]),
    "rrrr",
  );
  await v1Commit("old.1", 60_000, [
    ["done-1", "", ""],
    ["v-10", "E", "10"],
  ]);
  await v1Commit("old.1", 1_500, [["done-short", "", ""]]);
  assert.equal(await admin.get(`${prefix}id:done-1`), "d");
  assert.equal(await admin.get(`${prefix}ver:E`), "10");

  const g = await guard(url, scope);
  const rs = await g.claim([
    { id: "done-1" },
    { id: "done-short" },
    { id: "held" },
    { id: "v-9", entity: "E", version: 9 },
    { id: "v-11", entity: "E", version: 11 },
    { id: "fresh", entity: "F", version: 1 },
  ]);
  assert.deepEqual(decisions(rs), ["duplicate", "duplicate", "in-flight", "stale", "relay", "relay"]);
  assert.equal(rs[3]?.storedVersion, 10, "the previous layout's version is the stored one");
  // A takeover takes the old relay's claim, as it would a new one's.
  assert.deepEqual(decisions(await g.claim([{ id: "held" }], undefined, { takeover: true })), ["relay"]);
  await g.commit([
    { id: "v-11", entity: "E", version: 11, token: rs[4]!.token! },
    { id: "fresh", entity: "F", version: 1, token: rs[5]!.token! },
  ]);
  assert.equal(
    await admin.get(`${prefix}ver:E`),
    "11",
    "an existing old version key advances with the commit",
  );
  assert.equal(await admin.exists(`${prefix}ver:F`), 0, "old version keys are never created");
  assert.equal((await inspectVersion(admin, scope, "F")).version, "1");
  // The old relay sees the version advance (stale), and a claim the new relay holds (in-flight).
  const pending = await g.claim([{ id: "new-claim" }]);
  assert.equal(pending[0]?.decision, "relay");
  assert.equal(
    await v1Claim("old.2", [
      ["v-11b", "E", "11"],
      ["new-claim", "", ""],
    ]),
    "si",
  );
  // Until they expire: the old "done" expired after 1.5 s, and the id is new again.
  await check(async () => (await admin.exists(`${prefix}id:done-short`)) === 0, {
    name: "the old done key expired",
    timeoutMs: 10_000,
  });
  assert.deepEqual(decisions(await g.claim([{ id: "done-short" }, { id: "done-1" }])), [
    "relay",
    "duplicate",
  ]);
});

test("a scope keeps the version fan-out it was created with: a relay configured for another size finds the versions", async () => {
  const { url } = await redis();
  const scope = uniqueName("B:VFAN");
  const small = await guard(url, scope, { expectedEntities: 1_000 });
  await relay(
    small,
    Array.from({ length: 200 }, (_, i) => ({ id: `s${i}`, entity: `e${i}`, version: 5 })),
  );
  const large = await guard(url, scope, { expectedEntities: 50_000_000 });
  const rs = await large.claim(
    Array.from({ length: 200 }, (_, i) => ({ id: `l${i}`, entity: `e${i}`, version: 5 })),
  );
  assert.deepEqual([...new Set(decisions(rs))], ["stale"]);
  assert.deepEqual([...new Set(rs.map((r) => r.storedVersion))], [5]);
});

test("guard.versions.expectedEntities is compiled into the link's guard config; 0 is refused", () => {
  const text = (n: string) => `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - name: l
    from: { region: a, stream: S }
    to: { region: b, stream: D }
    guard: { memory: true, versions: { entity: "header:E", version: "header:V", expectedEntities: ${n} } }
`;
  assert.equal(
    parseConfigText(text("50000000"), "t").links[0]?.guard?.versions?.expectedEntities,
    50_000_000,
  );
  assert.throws(
    () => parseConfigText(text("0"), "t"),
    /versions\.expectedEntities: must be an integer from 1/,
  );
});

test("a claim hands back each relayed id's digest (ClaimResult.key); a commit with it stores the id under that digest without computing it again", async () => {
  const { url, admin } = await redis();
  const scope = uniqueName("B:KEY");
  const g = await guard(url, scope);
  const items = [{ id: "order-1" }, { id: "order-2" }];
  const rs = await g.claim(items);
  assert.deepEqual(decisions(rs), ["relay", "relay"]);
  assert.deepEqual(
    rs.map((r) => r.key),
    items.map((i) => digest(i.id)),
    "the key is the id's 16-byte digest",
  );
  // A commit uses the key it is given: order-2 is committed under order-1's digest, so its own
  // digest is absent (a guard that computed it again would have stored it).
  await g.commit([
    { ...items[0]!, token: rs[0]!.token!, key: rs[0]!.key! },
    { ...items[1]!, token: rs[1]!.token!, key: rs[0]!.key! },
  ]);
  assert.equal((await inspectId(admin, scope, "order-1")).state, "d");
  assert.equal((await inspectId(admin, scope, "order-2")).state, null, "committed under the key it was given");
  // A key that is not a digest (another guard's, or none) is not used: the id's own digest is.
  const more = [{ id: "order-3" }];
  const r3 = await g.claim(more);
  await g.commit([{ ...more[0]!, token: r3[0]!.token!, key: "not-a-digest" }]);
  assert.equal((await inspectId(admin, scope, "order-3")).state, "d");
  assert.deepEqual(decisions(await g.claim([{ id: "order-1" }, { id: "order-3" }])), ["duplicate", "duplicate"]);
});
