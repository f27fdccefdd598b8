import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Redis } from "ioredis";
import { pino } from "pino";
import { parseConfigText } from "../../src/config/load.js";
import { leaseKey } from "../../src/config/lease-key.js";
import { markerKeys } from "../../src/guard/marker.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import { runPreflight } from "../../src/preflight/preflight.js";
import { check, uniqueName } from "../helpers/check.js";
import { startRedisCluster } from "../helpers/local-redis-cluster.js";
import { RelayProcess, metricValue, startRelay, writeConfig } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { HasAfter } from "../helpers/servers.js";
import { readStream, streamCount } from "../helpers/streams.js";

/**
 * Loss detection (issue #12 item 5): the guard's scope marker. A Redis that forgot everything
 * (FLUSHALL, restarted without its data) while the link has history pauses the link with
 * GUARD_STATE_LOST; nothing is published until `jetstream-relay guard resume` (accept the loss, or
 * --resync); a new link writes its marker entry without a word.
 */

type Setup = Awaited<ReturnType<typeof setup>>;

async function setup(t: HasAfter, opts: { appendonly?: boolean } = {}) {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: opts.appendonly ?? true });
  const admin = new Redis(redis.url);
  admin.on("error", () => undefined); // the test restarts its server under it
  t.after(() => admin.disconnect());
  const yaml = r.yaml(`    guard: { redis: { url: "${redis.url}" }, idTtl: 1h }\n`);
  const configPath = await writeConfig(yaml);
  const config = parseConfigText(yaml, "test.yaml");
  const link = config.links[0]!;
  const key = `relay:{b:${r.dst}}:marker`;
  const field = `link:${leaseKey(link)}`;
  return { ...r, redis, admin, yaml, configPath, config, key, field };
}

/** `jetstream-relay guard ...` as an operator runs it. */
async function guardCli(s: Setup, ...args: string[]): Promise<{ code: number | null; out: string }> {
  const p = new RelayProcess(["guard", ...args, "--config", s.configPath]);
  const code = await p.exited;
  return { code, out: p.output() };
}

async function pausedLost(
  relay: Awaited<ReturnType<typeof startRelay>>["relay"],
  what: string,
): Promise<void> {
  await check(
    () => {
      const l = relay.status().links[0];
      return l?.state === "paused" && l.lastError?.code === "GUARD_STATE_LOST";
    },
    { name: `link paused with GUARD_STATE_LOST (${what})`, timeoutMs: 20_000 },
  ).catch((err: unknown) => {
    throw new Error(`${String(err)}; link: ${JSON.stringify(relay.status().links[0])}`);
  });
}

/** Nothing reaches the destination for a while (the link is paused and must publish nothing). */
async function assertStill(s: Setup, count: number, what: string): Promise<void> {
  await delay(2_000);
  assert.equal(await streamCount(s.ncb, s.dst), count, what);
}

test("a new link writes its marker entry silently; FLUSHALL while it runs pauses it (GUARD_STATE_LOST) until `guard resume`, then nothing is lost", async (t) => {
  const s = await setup(t);
  const { relay, logs } = await startRelay(t, s.yaml, "b");
  const first = await publishIds(s.nca, s.src, "m", 100);
  await waitForCount(s.ncb, s.dst, 100, 30_000);
  // The fresh link wrote its entry (and the scope's creation fields), quietly.
  const marker = await s.admin.hgetall(s.key);
  assert.match(marker[s.field] ?? "", /^joined \d{4}-\d\d-\d\dT/);
  assert.ok(marker.created && /^[0-9a-f]{16}$/.test(marker.id ?? ""), JSON.stringify(marker));
  assert.ok(!logs.text().includes("GUARD_STATE_LOST"));
  assert.equal(await metricValue(relay, "relay_guard_state_lost", { link: "a-to-b" }), 0);
  // A new scope: one bucket, opened by the first commit (the gauge is set after claims and commits).
  await check(async () => (await metricValue(relay, "relay_guard_buckets", { link: "a-to-b" })) === 1, {
    name: "relay_guard_buckets 1 once the first commit's answer is in",
    timeoutMs: 10_000,
  });
  assert.equal(await s.admin.ttl(s.key), -1, "the marker never expires");

  await s.admin.flushall();
  await pausedLost(relay, "after FLUSHALL");
  assert.equal(await metricValue(relay, "relay_guard_state_lost", { link: "a-to-b" }), 1);
  assert.equal(
    await metricValue(relay, "relay_errors_total", { link: "a-to-b", code: "GUARD_STATE_LOST" }),
    1,
  );
  const error = logs.lines
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l.code === "GUARD_STATE_LOST" && l.level === 50);
  assert.ok(error, "an error-level log line");
  assert.equal(error.key, s.key);
  assert.match(
    String(error.msg),
    /guard state lost: .*has relayed source messages up to seq 100.*jetstream-relay guard resume --config FILE --link a-to-b/,
  );
  assert.match(relay.status().links[0]?.stateReason ?? "", /guard state lost/);

  const second = await publishIds(s.nca, s.src, "m", 100, 100);
  await assertStill(s, 100, "a link with a lost guard publishes nothing");
  const status = await guardCli(s, "status");
  assert.equal(status.code, 1, status.out);
  assert.match(status.out, /a-to-b: no marker entry/);

  const resumed = await guardCli(s, "resume", "--link", "a-to-b");
  assert.equal(resumed.code, 0, resumed.out);
  assert.match(
    resumed.out,
    /a-to-b: resumed .*For the next 1h \(idTtl\), redeliveries of messages relayed before the loss are caught only by the destination's duplicate window/,
  );
  await waitForCount(s.ncb, s.dst, 200, 30_000, "after the resume");
  await check(() => relay.status().links[0]?.state === "live", {
    name: "link live again",
    timeoutMs: 20_000,
  });
  await assertExactlyOnce(s.ncb, s.dst, [...first, ...second]);
  assert.equal(await metricValue(relay, "relay_guard_state_lost", { link: "a-to-b" }), 0);
  assert.ok(logs.lines.some((l) => l.includes("guard state loss accepted by an operator")));
  assert.match((await s.admin.hget(s.key, s.field)) ?? "", /^resumed /);
  // Resuming a link that has its entry changes nothing.
  const again = await guardCli(s, "resume", "--link", "a-to-b");
  assert.equal(again.code, 0);
  assert.match(again.out, /nothing to resume/);
});

test("restarted after FLUSHALL: the link starts paused, check --live says GUARD_STATE_LOST, and `guard resume` lets it go on", async (t) => {
  const s = await setup(t);
  const before = await startRelay(t, s.yaml, "b");
  const first = await publishIds(s.nca, s.src, "m", 100);
  await waitForCount(s.ncb, s.dst, 100, 30_000);
  await before.relay.stop();
  await s.admin.flushall();
  const second = await publishIds(s.nca, s.src, "m", 100, 100);

  const report = await runPreflight(s.config, { redisTimeoutMs: 5_000, connectTimeoutMs: 5_000 });
  const row = report.links[0]?.rows.find((r) => r.name === "guard marker");
  assert.equal(row?.level, "error");
  assert.match(
    row?.detail ?? "",
    /no scope marker entry, but the consumer has acked up to source seq 100.*GUARD_STATE_LOST/,
  );
  assert.match(row?.fix ?? "", /jetstream-relay guard resume --config FILE --link a-to-b/);

  const { relay } = await startRelay(t, s.yaml, "b");
  await pausedLost(relay, "at start");
  await assertStill(s, 100, "nothing published before the operator decides");
  const resumed = await guardCli(s, "resume", "--all");
  assert.equal(resumed.code, 0, resumed.out);
  await waitForCount(s.ncb, s.dst, 200, 30_000, "after the resume");
  await assertExactlyOnce(s.ncb, s.dst, [...first, ...second]);
});

test("Redis restarted without its data: the reconnect finds the marker gone; `guard resume --resync` resyncs the link", async (t) => {
  const s = await setup(t, { appendonly: false });
  const { relay } = await startRelay(t, s.yaml, "b");
  const first = await publishIds(s.nca, s.src, "m", 100);
  await waitForCount(s.ncb, s.dst, 100, 30_000);
  await s.redis.restart(); // no AOF: it comes back empty
  await pausedLost(relay, "after the reconnect");
  const second = await publishIds(s.nca, s.src, "m", 50, 100);
  await assertStill(s, 100, "paused");

  const resync = await guardCli(s, "resume", "--link", "a-to-b", "--resync");
  assert.equal(resync.code, 0, resync.out);
  assert.match(resync.out, /resync requested/);
  await check(() => relay.status().links[0]?.lastResync?.reason === "guard_state_lost", {
    name: "the link resynced",
    timeoutMs: 30_000,
  });
  await check(async () => /^resynced /.test((await s.admin.hget(s.key, s.field)) ?? ""), {
    name: "marker entry says resynced",
    timeoutMs: 10_000,
  });
  // A resync relays the latest message per subject (publishIds: five subjects) and goes on live after
  // it: the older deltas of the backlog are skipped, as for onGap: resync.
  const latest = second.slice(-5);
  await waitForCount(s.ncb, s.dst, 105, 30_000, "after the resync");
  const third = await publishIds(s.nca, s.src, "m", 20, 150);
  await waitForCount(s.ncb, s.dst, 125, 30_000, "live after the resync");
  await assertExactlyOnce(s.ncb, s.dst, [...first, ...latest, ...third]);
  const snapshot = (await readStream(s.ncb, s.dst)).filter((m) => m.headers["Relay-Snapshot"] !== undefined);
  assert.deepEqual(snapshot.map((m) => m.headers["Nats-Msg-Id"]).sort(), [...latest].sort());
  await check(() => relay.status().links[0]?.state === "live", {
    name: "link live again",
    timeoutMs: 20_000,
  });
});

test("Redis Cluster: a marker per slot group, so one shard that lost its data alone is a lost state too", async (t) => {
  const cluster = await startRedisCluster(t, { masters: 3, appendonly: true });
  const scope = uniqueName("b:S");
  const g = new RedisGuard(
    { kind: "redis", cluster: { nodes: cluster.seeds } },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: false },
    { logger: pino({ level: "silent" }), scope, linkName: "l", fence: "a.SRC.relay-l" },
  );
  t.after(() => g.stop());
  await g.start();
  assert.equal(await g.readMarker(), undefined);
  assert.equal(await g.writeMarker("joined", { ifAbsent: true }), true);
  assert.equal((await g.readMarker())?.mark, "joined");
  const keys = markerKeys(scope, 16);
  // The groups' markers are spread over the shards (16 hash tags over 3 masters).
  const admin = new Redis(`redis://${cluster.seeds[0]}`);
  admin.on("error", () => undefined); // the cluster may stop before this client does
  t.after(() => admin.disconnect());
  const slots = await Promise.all(keys.map(async (k) => Number(await admin.call("CLUSTER", "KEYSLOT", k))));
  const owners = await Promise.all(slots.map((slot) => cluster.ownerOf(slot)));
  assert.ok(new Set(owners.map((o) => o.port)).size > 1, "markers on more than one shard");
  // One shard forgets everything; the others keep their markers.
  const lost = owners[owners.length - 1]!;
  const shard = new Redis(`redis://${lost.address}`);
  shard.on("error", () => undefined);
  t.after(() => shard.disconnect());
  await shard.flushall();
  assert.equal(await g.readMarker(), undefined, "an entry missing in one group is a missing entry");
  assert.equal(await g.writeMarker("joined", { ifAbsent: true }), true, "written again where it was missing");
  assert.equal((await g.readMarker())?.mark, "joined");
});

test("upgrading from relays before scope markers: the state they left is recognised, the entry written, nothing pauses", async (t) => {
  const s = await setup(t);
  const before = await startRelay(t, s.yaml, "b");
  const first = await publishIds(s.nca, s.src, "m", 100);
  await waitForCount(s.ncb, s.dst, 100, 30_000);
  await before.relay.stop();
  // What relays before markers leave: the link's lease-revision fence key, named `epoch:<lease key>` by
  // every version (claims under a lease), no marker, no directory.
  const fenceKeys = await s.admin.keys(`relay:{b:${s.dst}}:epoch:*`);
  assert.equal(fenceKeys.length, 1, "the link's lease-revision fence key");
  await s.admin.del(s.key, `relay:{b:${s.dst}}:meta`);
  const report = await runPreflight(s.config, { redisTimeoutMs: 5_000, connectTimeoutMs: 5_000 });
  const row = report.links[0]?.rows.find((r) => r.name === "guard marker");
  assert.equal(row?.level, "ok", row?.detail);
  assert.match(row?.detail ?? "", /relay before scope markers/);

  const second = await publishIds(s.nca, s.src, "m", 100, 100);
  const { relay } = await startRelay(t, s.yaml, "b");
  await waitForCount(s.ncb, s.dst, 200, 30_000, "relayed on after the upgrade");
  await assertExactlyOnce(s.ncb, s.dst, [...first, ...second]);
  assert.notEqual(relay.status().links[0]?.lastError?.code, "GUARD_STATE_LOST");
  assert.match(String(await s.admin.hget(s.key, s.field)), /^joined /);
  // A flushed Redis is a loss again, upgrade or not: the rule looks at the state, not at the version.
  await relay.stop();
  await s.admin.flushall();
  await publishIds(s.nca, s.src, "m", 10, 200);
  const after = await startRelay(t, s.yaml, "b");
  await pausedLost(after.relay, "flushed after the upgrade");
});
