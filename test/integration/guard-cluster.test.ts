import assert from "node:assert/strict";
import { test } from "node:test";
import type { Redis } from "ioredis";
import { pino } from "pino";
import { isRelayError } from "../../src/errors.js";
import { CLUSTER_GROUPS, GroupKeys } from "../../src/guard/layout.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { ClaimResult, GuardItem } from "../../src/guard/types.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";
import { watch } from "../faults/process-harness.js";
import { check, uniqueName } from "../helpers/check.js";
import { startRedisCluster } from "../helpers/local-redis-cluster.js";
import type { LocalRedisCluster, LocalRedisServer } from "../helpers/local-redis-cluster.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { createCursorFromStart, streamCount } from "../helpers/streams.js";

/**
 * The guard on a real local Redis Cluster (3 masters): a scope's keys spread over 16 slot groups, one
 * script call per group of a batch; exactly-once through a relay link; and a master killed under load
 * with waitReplicas 1, its replica promoted, losing nothing.
 */

const decisions = (rs: ClaimResult[]) => rs.map((r) => r.decision);

/** Keys of `scope` (all its groups' tags) on one node. */
async function keysOn(node: Redis, scope: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, batch] = await node.scan(cursor, "MATCH", `relay:{${scope}*`, "COUNT", 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== "0");
  return keys;
}

/**
 * A scope whose 16 group tags land on all three masters. A random scope does with probability
 * 1 - 3 × (2/3)^16 ≈ 99.5%; picking one keeps the spread assertion below deterministic.
 */
async function spreadScope(cluster: LocalRedisCluster, admin: Redis): Promise<string> {
  for (;;) {
    const scope = uniqueName("B:CLUSTER");
    const owners = new Set<number>();
    for (let g = 0; g < CLUSTER_GROUPS; g++) {
      const slot = Number(await admin.call("CLUSTER", "KEYSLOT", new GroupKeys(scope, g).meta));
      owners.add((await cluster.ownerOf(slot)).port);
    }
    if (owners.size === 3) return scope;
  }
}

function clusterGuard(
  t: { after(fn: () => unknown): void },
  cluster: LocalRedisCluster,
  scope: string,
  linkName = "t",
): RedisGuard {
  const g = new RedisGuard(
    { kind: "redis", cluster: { nodes: cluster.seeds } },
    { idTtlMs: 600_000, claimTtlMs: 30_000, strict: false },
    { logger: pino({ level: "silent" }), scope, linkName, fence: "lease-a" },
  );
  t.after(() => g.stop());
  return g;
}

test("Redis Cluster: ids and versions spread over all three masters; duplicates, stale versions and the lease fence hold across slot groups", async (t) => {
  const cluster = await startRedisCluster(t, { masters: 3 });
  const masters = await cluster.masters();
  assert.equal(masters.length, 3);
  const admins = new Map<LocalRedisServer, Redis>(masters.map((m) => [m, m.client(t)]));
  const scope = await spreadScope(cluster, admins.get(masters[0]!)!);
  const g = clusterGuard(t, cluster, scope);
  await g.start();

  const items: GuardItem[] = Array.from({ length: 3_000 }, (_, i) => ({
    id: `order-${i}`,
    entity: `customer-${i % 500}`,
    version: i,
  }));
  const rs = await g.claim(items);
  assert.deepEqual([...new Set(decisions(rs))], ["relay"]);
  await g.commit(items.map((item, i) => ({ ...item, token: rs[i]!.token! })));

  for (const [master, admin] of admins) {
    const keys = await keysOn(admin, scope);
    const ids = keys.filter((k) => k.includes(":i:")).length;
    const versions = keys.filter((k) => k.includes(":v:")).length;
    assert.ok(
      ids > 0 && versions > 0,
      `master :${master.port} holds ${ids} id hashes and ${versions} version hashes`,
    );
    assert.equal(keys.filter((k) => k.includes(":id:")).length, 0, "no claim keys left after the commit");
  }

  // Duplicates in every group; an older version of an entity is stale whichever group its id is in.
  const again = await g.claim([
    ...items.slice(0, 100),
    { id: "late-1", entity: "customer-7", version: 3 },
    { id: "new-1", entity: "customer-7", version: 3_000 },
  ]);
  assert.deepEqual([...new Set(decisions(again.slice(0, 100)))], ["duplicate"]);
  assert.deepEqual(decisions(again.slice(100)), ["stale", "relay"]);
  assert.equal(again[100]?.storedVersion, 2_507);

  // Fencing: the new owner's first claim (lease revision 9) reaches every group, so the ex-owner (lease revision 5)
  // is refused whatever groups its items fall in.
  const exOwner = clusterGuard(t, cluster, scope, "ex");
  const newOwner = clusterGuard(t, cluster, scope, "new");
  await exOwner.start();
  await newOwner.start();
  const [held] = await exOwner.claim([{ id: "fenced-1" }], undefined, { leaseRevision: 5 });
  assert.equal(held?.decision, "relay");
  assert.deepEqual(decisions(await newOwner.claim([{ id: "other-1" }], undefined, { leaseRevision: 9 })), ["relay"]);
  const fenced = (err: unknown) =>
    isRelayError(err, "LEASE_FENCED") && /lease revision 5 is older than lease revision 9/.test(err.message);
  for (let i = 0; i < 20; i++)
    await assert.rejects(exOwner.claim([{ id: `fenced-more-${i}` }], undefined, { leaseRevision: 5 }), fenced);
  await assert.rejects(exOwner.commit([{ id: "fenced-1", token: held!.token! }], { leaseRevision: 5 }), fenced);
});

test("a relay link with the Cluster guard: exactly once; a replay past the duplicate window is all guard duplicates", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const cluster = await startRedisCluster(t, { masters: 3 });
  const guard = `    guard: { redis: { cluster: { nodes: [${cluster.seeds.map((s) => `"${s}"`).join(", ")}] } }, versions: { entity: "header:Test-Entity", version: "header:Test-Version" } }\n`;
  const ids = await publishIds(nca, src, "m", 2_000);
  const first = await startRelay(t, yaml(`    durable: first\n${guard}`), "b");
  await waitForCount(ncb, dst, ids.length, 60_000);
  await assertExactlyOnce(ncb, dst, ids);
  await first.relay.stop();
  const windowOver = Date.now() + 2_000;
  await check(() => Date.now() > windowOver, {
    name: "past the destination's duplicate window",
    timeoutMs: 5_000,
  });
  await createCursorFromStart(nca, src, "second");
  const second = await startRelay(t, yaml(`    durable: second\n${guard}`), "b");
  await check(
    async () =>
      (await metricValue(second.relay, "relay_corrections_total", { kind: "guard_duplicate" })) ===
      ids.length,
    {
      name: `${ids.length} guard duplicates counted`,
      timeoutMs: 60_000,
    },
  );
  await assertExactlyOnce(ncb, dst, ids);
});

test("a Cluster master killed under load (its replica promoted), waitReplicas 1: nothing lost or duplicated, order kept, every id still known", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const cluster = await startRedisCluster(t, { masters: 3, replicas: 1, nodeTimeoutMs: 1_000 });
  const redis = `redis: { cluster: { nodes: [${cluster.seeds.map((s) => `"${s}"`).join(", ")}] }, waitReplicas: 1, waitTimeout: 500ms }`;
  const guard = `    batchSize: 100\n    guard: { ${redis}, versions: { entity: "header:Test-Entity", version: "header:Test-Version" } }\n`;
  const ids = await publishIds(nca, src, "m", 6_000);
  const { relay, url } = await startRelay(t, yaml(`    durable: first\n${guard}`), "b", { http: true });
  await waitForCount(ncb, dst, 1_000, 60_000);
  const live = watch(t, url);

  const victim = (await cluster.masters())[0]!;
  await victim.proc.kill();
  const atKill = await streamCount(ncb, dst);
  // Its replica takes over after cluster-node-timeout; the killed node comes back as a replica of it
  // (waitReplicas 1 needs one for every master).
  await cluster.waitHealthy(60_000);
  await victim.proc.start();
  await cluster.waitHealthy(60_000);

  await waitForCount(ncb, dst, ids.length, 120_000, "after the failover");
  await check(() => relay.status().links[0]?.state === "live", { name: "link live", timeoutMs: 30_000 });
  const liveness = await live.stop();
  const report = {
    ...(await checkDelivery({
      fault: "cluster master killed",
      dest: ncb,
      stream: dst,
      source: await readSource(nca, src),
    })),
    liveness,
  };
  assertDelivery(report);
  assert.ok(atKill < ids.length, `the master died mid-transfer (${atKill} of ${ids.length} relayed)`);
  assert.ok(
    (await metricValue(relay, "relay_errors_total", { code: "GUARD_UNAVAILABLE" })) > 0,
    "the guard failed while the slots moved",
  );
  await relay.stop();

  // Every commit counted only once a replica had it: after the failover the guard still knows every
  // id (a replay past the duplicate window is all duplicates, none stale or relayed).
  await createCursorFromStart(nca, src, "replay");
  const replay = await startRelay(t, yaml(`    durable: replay\n${guard}`), "b");
  await check(
    async () =>
      (await metricValue(replay.relay, "relay_corrections_total", { kind: "guard_duplicate" })) ===
      ids.length,
    {
      name: `${ids.length} guard duplicates in the replay`,
      timeoutMs: 90_000,
    },
  );
  assert.equal(await metricValue(replay.relay, "relay_messages_total", { outcome: "stale" }), 0);
  assert.equal(await metricValue(replay.relay, "relay_messages_total", { outcome: "relayed" }), 0);
  await assertExactlyOnce(ncb, dst, ids);
});
