import assert from "node:assert/strict";
import { test } from "node:test";
import type { Redis } from "ioredis";
import { pino } from "pino";
import type { Logger } from "pino";
import { isRelayError } from "../../src/errors.js";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { GroupKeys, inspectId } from "../../src/guard/layout.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import { check, uniqueName } from "../helpers/check.js";
import { startRedisReplicated } from "../helpers/local-redis-cluster.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";
import { watch } from "../faults/process-harness.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { streamCount } from "../helpers/streams.js";

/** guard.redis.waitReplicas: a commit counts only once WAIT reports enough replicas. */

function capture(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { logger, lines };
}

test("waitReplicas 1: a commit passes with its replica; with the replica paused it fails naming the node and the count; resumed, it passes", async (t) => {
  const { primary, replicas } = await startRedisReplicated(t, { replicas: 1 });
  const replica = replicas[0]!;
  const scope = uniqueName("B:WAIT");
  const { logger, lines } = capture();
  const g = new RedisGuard(
    { kind: "redis", url: primary.url, waitReplicas: 1, waitTimeoutMs: 500 },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: false },
    { logger, scope, linkName: "t" },
  );
  t.after(() => g.stop());
  await g.start();
  const commitNew = async (id: string) => {
    const [r] = await g.claim([{ id }]);
    assert.equal(r?.decision, "relay");
    return () => g.commit([{ id, token: r!.token! }]);
  };

  await (
    await commitNew("w1")
  )();
  // Replicated when the commit returned: the replica has it.
  assert.equal((await inspectId(replica.client(t), scope, "w1")).state, "d");

  const w2 = await commitNew("w2");
  await replica.proc.pause();
  try {
    const t0 = Date.now();
    await assert.rejects(w2(), (err) => {
      assert.ok(isRelayError(err, "GUARD_UNAVAILABLE"), String(err));
      assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${primary.port}`));
      assert.match(err.message, /1 replica required, 0 acknowledged/);
      return true;
    });
    assert.ok(Date.now() - t0 >= 450, "WAIT waited for its timeout");
    assert.ok(
      lines.some(
        (l) =>
          l.level === 40 && /not replicated/.test(String(l.msg)) && l.required === 1 && l.acknowledged === 0,
      ),
      "a warning names the shortfall",
    );
  } finally {
    await replica.proc.resume();
  }
  // The same commit, retried (as the pipeline does), counts once the replica acknowledges it.
  await check(() => w2().then(() => true), {
    name: "the retried commit passes after SIGCONT",
    timeoutMs: 15_000,
    intervalMs: 250,
  });
  assert.equal((await inspectId(replica.client(t), scope, "w2")).state, "d");
  assert.ok(lines.some((l) => /replicated again/.test(String(l.msg))));
  // The retry did not count the id as committed under a lost claim: the first attempt had written it.
  assert.ok(!lines.some((l) => /claims expired before commit/.test(String(l.msg))));
});

test("a link with waitReplicas 1: its replica paused mid-transfer, the link pauses; resumed, it finishes exactly once", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const { primary, replicas } = await startRedisReplicated(t, { replicas: 1 });
  // Enough that the link's whole window (2048, pulled at once) is far from the end when the replica stops.
  const ids = await publishIds(nca, src, "m", 12_000);
  const guard = `    batchSize: 100\n    guard: { redis: { url: "${primary.url}", waitReplicas: 1, waitTimeout: 300ms } }\n`;
  const { relay, url } = await startRelay(t, yaml(guard), "b", { http: true });
  await waitForCount(ncb, dst, 300, 30_000);
  const live = watch(t, url);
  await replicas[0]!.proc.pause();
  try {
    await check(() => relay.status().links[0]?.state === "paused", {
      name: "link paused",
      timeoutMs: 20_000,
    });
    const during = await streamCount(ncb, dst);
    await new Promise((r) => setTimeout(r, 1_000));
    // Published messages wait for their commit; nothing new is claimed while the guard fails.
    assert.ok(
      (await streamCount(ncb, dst)) - during <= 2048,
      "at most the in-flight window lands while paused",
    );
    assert.ok(during < ids.length, "paused mid-transfer");
  } finally {
    await replicas[0]!.proc.resume();
  }
  await waitForCount(ncb, dst, ids.length, 60_000, "after the replica came back");
  await check(() => relay.status().links[0]?.state === "live", {
    name: "link live again",
    timeoutMs: 20_000,
  });
  await assertExactlyOnce(ncb, dst, ids);
  // Order overall and per subject, versions, and /healthz answering while the link was paused.
  const liveness = await live.stop();
  assertDelivery({ ...(await checkDelivery({ fault: "guard replica paused", dest: ncb, stream: dst, source: await readSource(nca, src) })), liveness });
  assert.ok((await metricValue(relay, "relay_errors_total", { code: "GUARD_UNAVAILABLE" })) > 0);
});

test("claims stay on the primary: the replica and the AOF get the commits and the lease fence, never a claim key", async (t) => {
  const { primary, replicas } = await startRedisReplicated(t, { replicas: 1 });
  const replica = replicas[0]!.client(t);
  const admin = primary.client(t);
  const scope = uniqueName("B:LOCAL");
  const g = new RedisGuard(
    { kind: "redis", url: primary.url, waitReplicas: 1, waitTimeoutMs: 2_000 },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: false },
    { logger: pino({ level: "silent" }), scope, linkName: "t" },
  );
  t.after(() => g.stop());
  await g.start();
  const keys = new GroupKeys(scope, 0);
  // Claimed with keys (a caller without a lease; a link with one claims by it while it is its scope's
  // only writer, guard-writers.test.ts), committed under a lease.
  const [claimed, released] = await g.claim([{ id: "k1" }, { id: "k2" }]);
  assert.equal(claimed?.decision, "relay");
  assert.equal(await admin.get(keys.claim("k1")), `c:${claimed!.token}`, "the primary holds the claim");
  await g.release([{ id: "k2", token: released!.token! }]);
  await g.commit([{ id: "k1", token: claimed!.token! }], { leaseRevision: 7 });
  // The commit waited for the replica: everything replicated before it is there now.
  assert.equal((await inspectId(replica, scope, "k1")).state, "d", "the replica has the commit");
  assert.equal(await replica.get(keys.fence("t")), "7", "and the lease fence");
  assert.equal(await admin.exists(keys.claim("k1"), keys.claim("k2")), 0, "the commit and the release ended the claims");
  const aofDir = join(primary.dir, "appendonlydir");
  const readAof = async () => (await Promise.all((await readdir(aofDir)).filter((f) => f.endsWith(".incr.aof")).map((f) => readFile(join(aofDir, f), "latin1")))).join("");
  // With appendfsync everysec Redis may postpone an AOF write by up to 2 s while a background fsync
  // runs (seen once in CI): wait for the commit to reach the file rather than read it once.
  let aof = "";
  await check(async () => (aof = await readAof()).includes(`relay:{${scope}}:i:`), { name: "the AOF holds the commit", timeoutMs: 5_000, intervalMs: 100 });
  assert.ok(!aof.includes(keys.claim("k1")) && !aof.includes(keys.claim("k2")), "the AOF holds no claim key (set, deleted or released)");
  assert.ok(!(await replicaHasKey(replica, keys.claim("k1"))), "the replica never saw the claim");
});

/** A key on a replica, whether expired or not (a replica keeps expired keys until its primary deletes them). */
async function replicaHasKey(replica: Redis, key: string): Promise<boolean> {
  const [, keys] = await replica.scan("0", "MATCH", key.replace(/[[\]*?{}\\]/g, "\\$&"), "COUNT", 10_000);
  return keys.length > 0;
}
