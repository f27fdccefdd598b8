import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { pino } from "pino";
import type { Logger } from "pino";
import type { RedisGuardConnection } from "../../src/config/types.js";
import { parseConfigText } from "../../src/config/load.js";
import { isRelayError } from "../../src/errors.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import { evictionFinding, replicationFinding } from "../../src/guard/safety.js";
import { runPreflight } from "../../src/preflight/preflight.js";
import { check, uniqueName } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";

/**
 * The guard's settings checks (issue #12 item 4): maxmemory-policy, AOF, replication for waitReplicas,
 * at guard start, while the relay runs (relay_guard_unsafe{reason}), under `strict`, and in
 * `check --live`.
 */

const stops: (() => Promise<unknown> | void)[] = [];
after(async () => {
  for (const stop of stops.reverse()) await stop();
});
const servers = withServers({ after });

function capture(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { logger, lines };
}

function guard(
  store: Omit<RedisGuardConnection, "kind">,
  opts: { logger?: Logger; strict?: boolean } = {},
): RedisGuard {
  const g = new RedisGuard(
    { kind: "redis", ...store },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: opts.strict ?? false },
    { logger: opts.logger ?? pino({ level: "silent" }), scope: uniqueName("B:S"), linkName: "t" },
  );
  stops.push(() => g.stop());
  return g;
}

function admin(url: string): Redis {
  const c = new Redis(url);
  c.on("error", () => undefined);
  stops.push(() => c.disconnect());
  return c;
}

test("eviction verdicts: only noeviction keeps every guard key at a memory limit; maxmemory 0 never evicts", () => {
  assert.equal(evictionFinding({ policy: "noeviction", maxmemory: 1 << 30 }).level, "ok");
  for (const policy of ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"]) {
    const f = evictionFinding({ policy, maxmemory: 1 << 30 });
    assert.equal(f.level, "unsafe", policy);
    assert.equal(f.reason, "eviction");
    assert.match(f.detail, /keys with a TTL: committed ids and claims/);
  }
  for (const policy of ["allkeys-lru", "allkeys-lfu", "allkeys-random"]) {
    const f = evictionFinding({ policy, maxmemory: 1 << 30 });
    assert.equal(f.level, "unsafe", policy);
    assert.match(f.detail, /any key: .*versions/);
  }
  const unlimited = evictionFinding({ policy: "allkeys-lru", maxmemory: 0 });
  assert.equal(unlimited.level, "ok");
  assert.match(unlimited.detail, /maxmemory 0 \(no limit\): nothing is ever evicted.*set noeviction/);
  assert.equal(evictionFinding({ reason: "NOPERM" }).level, "unknown");

  assert.equal(replicationFinding({ role: "master", replicas: 0 }, 0).level, "ok");
  assert.equal(replicationFinding({ role: "master", replicas: 1 }, 1).level, "ok");
  assert.equal(replicationFinding({ role: "master", replicas: 0 }, 1).reason, "replication");
  assert.equal(replicationFinding({ role: "slave", replicas: 2 }, 1).reason, "replication");
  assert.equal(replicationFinding({ reason: "NOPERM" }, 1).level, "unknown");
});

test("guard start: an evicting maxmemory-policy warns (unsafe: eviction), strict refuses with GUARD_NOT_DURABLE; noeviction is ok", async () => {
  const redis = await servers.startRedis({ appendonly: true });
  const a = admin(redis.url);
  for (const policy of ["volatile-lru", "allkeys-lru"]) {
    await a.config("SET", "maxmemory", "100mb");
    await a.config("SET", "maxmemory-policy", policy);
    const { logger, lines } = capture();
    const g = guard({ url: redis.url }, { logger });
    await g.start();
    assert.deepEqual(g.safety?.unsafe, ["eviction"], policy);
    const warn = lines.find((l) => l.level === 40 && String(l.msg).includes("maxmemory-policy"));
    assert.match(
      String(warn?.msg),
      new RegExp(`unsafe: maxmemory-policy ${policy} with maxmemory 104857600`),
    );
    await g.stop();

    const strict = guard({ url: redis.url }, { strict: true });
    await assert.rejects(strict.start(), (err) => {
      assert.ok(isRelayError(err, "GUARD_NOT_DURABLE"), String(err));
      assert.match(err.message, new RegExp(`maxmemory-policy ${policy}.*guard\\.strict is set`));
      assert.equal(err.isRetryable(), false);
      return true;
    });
  }
  // A limit without eviction: Redis refuses writes at the limit (the link pauses), nothing is lost.
  await a.config("SET", "maxmemory-policy", "noeviction");
  const ok = guard({ url: redis.url }, { strict: true });
  await ok.start();
  assert.deepEqual(ok.safety?.unsafe, []);
  // No limit: the policy never applies.
  await a.config("SET", "maxmemory", "0");
  await a.config("SET", "maxmemory-policy", "allkeys-lru");
  const unlimited = guard({ url: redis.url }, { strict: true });
  await unlimited.start();
  assert.deepEqual(unlimited.safety?.unsafe, []);
  assert.match(
    unlimited.safety?.findings.find((f) => f.check === "eviction")?.detail ?? "",
    /maxmemory 0 \(no limit\): nothing is ever evicted/,
  );
});

test("guard start: waitReplicas without replicas is unsafe (replication); strict waits (retryable), not a refusal for good", async () => {
  const redis = await servers.startRedis({ appendonly: true });
  const { logger, lines } = capture();
  const g = guard({ url: redis.url, waitReplicas: 1, waitTimeoutMs: 500 }, { logger });
  await g.start();
  assert.deepEqual(g.safety?.unsafe, ["replication"]);
  assert.ok(
    lines.some(
      (l) => l.level === 40 && /0 online replica\(s\), fewer than waitReplicas 1/.test(String(l.msg)),
    ),
  );
  const strict = guard({ url: redis.url, waitReplicas: 1, waitTimeoutMs: 500 }, { strict: true });
  await assert.rejects(strict.start(), (err) => {
    assert.ok(isRelayError(err, "GUARD_UNAVAILABLE"), String(err));
    assert.equal(err.isRetryable(), true);
    assert.match(err.message, /waiting for the replicas/);
    return true;
  });
  // Without waitReplicas, replication is not a concern.
  const none = guard({ url: redis.url });
  await none.start();
  assert.deepEqual(none.safety?.unsafe, []);
  assert.equal(
    none.safety?.findings.some((f) => f.check === "replication"),
    false,
  );
});

test("relay: relay_guard_unsafe{reason} is 1 for what is unsafe and 0 for the rest; a reconnect checks again", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: false });
  const a = admin(redis.url);
  await a.config("SET", "maxmemory", "100mb");
  await a.config("SET", "maxmemory-policy", "volatile-ttl");
  const { relay } = await startRelay(t, r.yaml(`    guard: { redis: { url: "${redis.url}" } }\n`), "b");
  const ids = await publishIds(r.nca, r.src, "m", 50);
  await waitForCount(r.ncb, r.dst, ids.length, 30_000);
  const unsafe = (reason: string) => metricValue(relay, "relay_guard_unsafe", { link: "a-to-b", reason });
  assert.equal(await unsafe("eviction"), 1);
  assert.equal(await unsafe("no_aof"), 1);
  assert.equal(await unsafe("replication"), 0, "every reason has a series");
  // Fixed while running: the next check (here: after a reconnect) clears them.
  await a.config("SET", "maxmemory-policy", "noeviction");
  await a.config("SET", "appendonly", "yes");
  await a.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
  await check(async () => (await unsafe("eviction")) === 0 && (await unsafe("no_aof")) === 0, {
    name: "relay_guard_unsafe back to 0 after the reconnect's check",
    timeoutMs: 20_000,
  });
  assert.equal(relay.status().links[0]?.state === "paused", false);
});

test("relay with guard.strict: an evicting policy refuses to start the link (GUARD_NOT_DURABLE)", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const a = admin(redis.url);
  await a.config("SET", "maxmemory", "100mb");
  await a.config("SET", "maxmemory-policy", "allkeys-lfu");
  await assert.rejects(
    startRelay(t, r.yaml(`    guard: { redis: { url: "${redis.url}" }, strict: true }\n`), "b"),
    (err) => {
      assert.ok(isRelayError(err, "GUARD_NOT_DURABLE"), String(err));
      assert.match(err.message, /maxmemory-policy allkeys-lfu/);
      return true;
    },
  );
});

test("check --live: guard eviction and replication rows say what is unsafe and how to fix it", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const a = admin(redis.url);
  await a.config("SET", "maxmemory", "64mb");
  await a.config("SET", "maxmemory-policy", "volatile-lru");
  const rows = async (guardYaml: string) => {
    const config = parseConfigText(r.yaml(guardYaml), "test.yaml");
    const report = await runPreflight(config, { redisTimeoutMs: 5_000, connectTimeoutMs: 5_000 });
    return report.links[0]?.rows ?? [];
  };
  const plain = await rows(`    guard: { redis: { url: "${redis.url}", waitReplicas: 1 } }\n`);
  const eviction = plain.find((row) => row.name === "guard eviction");
  assert.equal(eviction?.level, "warning");
  assert.match(
    eviction?.detail ?? "",
    /maxmemory-policy volatile-lru with maxmemory 67108864: at the limit Redis evicts keys with a TTL/,
  );
  assert.match(eviction?.fix ?? "", /maxmemory-policy noeviction/);
  const replication = plain.find((row) => row.name === "guard replication");
  assert.equal(replication?.level, "warning");
  assert.match(replication?.detail ?? "", /0 online replica\(s\), fewer than waitReplicas 1/);
  const strict = await rows(`    guard: { redis: { url: "${redis.url}" }, strict: true }\n`);
  assert.equal(strict.find((row) => row.name === "guard eviction")?.level, "error");
  assert.equal(
    strict.some((row) => row.name === "guard replication"),
    false,
    "no replication row without waitReplicas",
  );

  await a.config("SET", "maxmemory-policy", "noeviction");
  const fixed = await rows(`    guard: { redis: { url: "${redis.url}" } }\n`);
  assert.equal(fixed.find((row) => row.name === "guard eviction")?.level, "ok");
  // A new link: no marker entry yet, and no history, so nothing was lost.
  const marker = fixed.find((row) => row.name === "guard marker");
  assert.equal(marker?.level, "ok");
  assert.match(marker?.detail ?? "", /no scope marker entry yet; the link has no history/);
});
