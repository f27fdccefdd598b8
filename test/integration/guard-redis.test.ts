import assert from "node:assert/strict";
import { after, test } from "node:test";
import { inspect as utilInspect } from "node:util";
import { Redis } from "ioredis";
import { pino } from "pino";
import type { Logger } from "pino";
import { isRelayError } from "../../src/errors.js";
import { digest } from "../../src/guard/layout.js";
import { guardKeys } from "../../src/guard/lua.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import type { RedisTuning } from "../../src/guard/redis-connection.js";
import type { RedisGuardConnection } from "../../src/config/types.js";
import type { GuardItem } from "../../src/guard/types.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";

/** What only Redis has: round trips, lost replies, outages, persistence, passwords. */

const stops: (() => Promise<unknown> | void)[] = [];
// Registered before withServers' hook so clients close before their servers do.
after(async () => {
  for (const stop of stops.reverse()) await stop();
});
const servers = withServers({ after });

function capture(): { logger: Logger; lines: Record<string, unknown>[]; text: () => string } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { logger, lines, text: () => JSON.stringify(lines) };
}

function guard(
  store: Omit<RedisGuardConnection, "kind">,
  opts: { logger?: Logger; strict?: boolean; scope?: string; tuning?: Partial<RedisTuning> } = {},
): RedisGuard {
  const g = new RedisGuard(
    { kind: "redis", ...store },
    { idTtlMs: 60_000, claimTtlMs: 30_000, strict: opts.strict ?? false },
    {
      logger: opts.logger ?? pino({ level: "silent" }),
      scope: opts.scope ?? uniqueName("B:S"),
      linkName: "t",
      ...(opts.tuning ? { tuning: opts.tuning } : {}),
    },
  );
  stops.push(() => g.stop());
  return g;
}

function client(url: string): Redis {
  const c = new Redis(url);
  c.on("error", () => undefined); // a test may kill its server under it
  stops.push(() => c.disconnect());
  return c;
}

/** Calls per command since the server started, from INFO commandstats. */
async function commandCalls(c: Redis): Promise<Map<string, number>> {
  const info = await c.info("commandstats");
  return new Map([...info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].map((m) => [m[1]!, Number(m[2])]));
}
/** Commands other than INFO executed between two snapshots. */
function delta(before: Map<string, number>, afterwards: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, calls] of afterwards) {
    const d = calls - (before.get(name) ?? 0);
    if (d > 0 && name !== "info") out[name] = d;
  }
  return out;
}
const scripts = (d: Record<string, number>) => (d.eval ?? 0) + (d.evalsha ?? 0);

/**
 * The commands clients send, as MONITOR shows them, minus those run inside scripts (MONITOR
 * reports those with source "lua"). `take()` returns what arrived since the last take().
 */
async function monitorCommands(url: string): Promise<{ take(): Promise<string[]> }> {
  // monitor() opens a second connection in monitor mode; the lazy original never connects.
  const mon = await new Redis(url, { lazyConnect: true }).monitor();
  stops.push(() => mon.disconnect());
  const marker = client(url);
  let seen: string[] = [];
  mon.on("monitor", (_time: string, args: string[], source: string) => {
    if (source !== "lua") seen.push(String(args[0]).toLowerCase());
  });
  let n = 0;
  return {
    async take() {
      // MONITOR streams in execution order: once our marker shows up, everything before it has.
      const tag = `marker-${++n}`;
      await marker.echo(tag);
      await check(() => seen.includes("echo"), { name: "MONITOR shows the marker", timeoutMs: 2_000 });
      const out = seen.slice(0, seen.indexOf("echo"));
      seen = [];
      return out;
    },
  };
}

test("one round trip per batch: 500 claims, commits and releases are one script call each", async () => {
  const redis = await servers.startRedis({ appendonly: true });
  const g = guard({ url: redis.url });
  await g.start();
  const items: GuardItem[] = Array.from({ length: 500 }, (_, i) => ({
    id: `m${i}`,
    entity: `e${i % 50}`,
    version: i,
  }));
  const mon = await monitorCommands(redis.url);
  await mon.take();

  // The first calls of a scope read its bucket directory and open its first bucket (the commit
  // answers "M", the client reloads and commits); each script's first use on a connection is an
  // EVAL (ioredis tracks them per socket).
  const warm = await g.claim([{ id: "warm", entity: "w", version: 1 }]);
  await g.commit([{ id: "warm", entity: "w", version: 1, token: warm[0]!.token! }]);
  await g.release([{ id: "warm", token: warm[0]!.token! }]);
  const first = await mon.take();
  assert.deepEqual(first.filter((c) => c === "eval").length, 3, `first use of each script is an EVAL: ${first}`);

  const rs = await g.claim(items);
  assert.deepEqual(await mon.take(), ["evalsha"]);
  assert.equal(rs.filter((r) => r.decision === "relay").length, 500);
  const claimed = items.map((item, i) => ({ ...item, token: rs[i]!.token! }));

  await g.commit(claimed.slice(0, 250));
  assert.deepEqual(await mon.take(), ["evalsha"]);
  await g.release(claimed.slice(250));
  assert.deepEqual(await mon.take(), ["evalsha"]);
  const again = await g.claim(items);
  assert.deepEqual(await mon.take(), ["evalsha"]);
  const kinds = (rs: typeof again) => [...new Set(rs.map((r) => r.decision))];
  assert.deepEqual(kinds(again.slice(0, 250)), ["duplicate"]);
  assert.deepEqual(kinds(again.slice(250)), ["relay"]);
});

test("a claim whose reply was lost is re-sent by ioredis and recognised as our own claim", async () => {
  const redis = await servers.startRedis({ appendonly: true });
  const c = client(redis.url);
  const proxy = await startTcpProxy({ port: redis.port });
  stops.push(() => proxy.close());
  const scope = uniqueName("B:S");
  const g = guard({ url: `redis://127.0.0.1:${proxy.port}` }, { scope });
  await g.start();
  // The scope's bucket directory is read on first use: done here, so the next request is the script.
  await g.claim([{ id: "warm-up" }]);
  const before = await commandCalls(c);

  const dropped = proxy.dropAfterNextRequest();
  const rs = await g.claim([{ id: "r1" }, { id: "r2" }]);
  await dropped;
  // The script ran twice (once per connection): without the token check the second run would
  // have answered "in-flight", and the messages would wait for the claim TTL.
  assert.equal(scripts(delta(before, await commandCalls(c))), 2);
  assert.equal(proxy.accepted, 2);
  const token = rs[0]?.token;
  assert.deepEqual(rs, [
    { decision: "relay", token, key: digest("r1") },
    { decision: "relay", token, key: digest("r2") },
  ]);
  assert.equal(await c.get(guardKeys(scope).id("r1")), `c:${token}`);
});

test("Redis killed: claims fail fast with GUARD_UNAVAILABLE; after restart the same guard works", async () => {
  // Killed right after the commit: with everysec the commit may not be in the AOF file yet on a busy
  // machine (seen in CI), and the test is about the guard's behaviour, not Redis's fsync policy.
  const redis = await servers.startRedis({ appendonly: true, appendfsync: "always" });
  const { logger, lines } = capture();
  const g = guard({ url: redis.url }, { logger });
  await g.start();
  const rs = await g.claim([{ id: "k1", entity: "E", version: 7 }]);
  await g.commit([{ id: "k1", entity: "E", version: 7, token: rs[0]!.token! }]);

  await redis.kill();
  const t0 = Date.now();
  await assert.rejects(g.claim([{ id: "k2" }]), (err) => {
    assert.ok(isRelayError(err, "GUARD_UNAVAILABLE"), String(err));
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${redis.port}`));
    return true;
  });
  assert.ok(Date.now() - t0 < 3_000, `took ${Date.now() - t0} ms`);
  // The close event may trail the failed write by a tick.
  await check(() => lines.some((l) => l.level === 40 && String(l.msg).includes("unavailable")), {
    name: "a warning that Redis is unavailable",
    timeoutMs: 2_000,
  });

  await redis.restart();
  const after = await check(
    () =>
      g.claim([
        { id: "k1", entity: "E", version: 8 },
        { id: "k3", entity: "E", version: 6 },
      ]),
    {
      name: "the same guard claims again after the restart",
      timeoutMs: 10_000,
    },
  );
  // The AOF brought back the done id and the version.
  assert.deepEqual(
    after.map((r) => r.decision),
    ["duplicate", "stale"],
  );
  assert.ok(lines.some((l) => String(l.msg).includes("connection restored")));
});

test("Redis paused (no answer): the claim times out with GUARD_UNAVAILABLE", async () => {
  const redis = await servers.startRedis();
  const g = guard({ url: redis.url }, { tuning: { commandTimeoutMs: 500 } });
  await g.start();
  await redis.pause();
  try {
    const t0 = Date.now();
    await assert.rejects(g.claim([{ id: "p1" }]), { code: "GUARD_UNAVAILABLE", message: /timed out/ });
    assert.ok(Date.now() - t0 < 2_000);
  } finally {
    await redis.resume();
  }
  await check(() => g.claim([{ id: "p2" }]), { name: "claims work after resume" });
});

test("persistence: appendonly no warns (or fails under strict); appendonly yes is aof", async () => {
  const volatile = await servers.startRedis({ appendonly: false });
  const { logger, lines } = capture();
  const g = guard({ url: volatile.url }, { logger });
  await g.start();
  assert.equal(g.persistence, "none");
  const warn = lines.find((l) => l.level === 40);
  assert.match(String(warn?.msg), /without AOF/);
  assert.equal(warn?.persistence, "none");

  const strict = guard({ url: volatile.url }, { strict: true });
  await assert.rejects(strict.start(), { code: "GUARD_NOT_DURABLE" });

  const durable = await servers.startRedis({ appendonly: true });
  const d = guard({ url: durable.url }, { strict: true });
  await d.start();
  assert.equal(d.persistence, "aof");
});

test("persistence: CONFIG refused (managed Redis) is reported as unknown with a warning", async () => {
  const redis = await servers.startRedis({ appendonly: true });
  const admin = client(redis.url);
  await admin.call("ACL", "SETUSER", "default", "-config");
  const { logger, lines } = capture();
  const g = guard({ url: redis.url }, { logger, strict: true });
  await g.start();
  assert.equal(g.persistence, "unknown");
  assert.ok(lines.some((l) => l.level === 40 && String(l.msg).includes("could not verify")));
});

test("passwords never appear in errors or logs of a failed connection", async () => {
  const redis = await servers.startRedis({ password: "server-pw-1" });
  const attempts: Omit<RedisGuardConnection, "kind">[] = [
    { url: `redis://127.0.0.1:${redis.port}`, password: "wrong-pw-2" },
    { url: `redis://:wrong-url-pw-3@127.0.0.1:${redis.port}` },
    { url: `redis://127.0.0.1:${redis.port}` },
  ];
  for (const store of attempts) {
    const { logger, text } = capture();
    const g = guard(store, { logger, tuning: { startTimeoutMs: 2_000 } });
    const err = await g.start().then(
      () => assert.fail("start() succeeded without the right password"),
      (e: unknown) => e,
    );
    assert.ok(isRelayError(err, "GUARD_UNAVAILABLE"), String(err));
    assert.match(err.message, /WRONGPASS|NOAUTH/);
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${redis.port}`));
    await assert.rejects(g.claim([{ id: "x" }]), { code: "GUARD_UNAVAILABLE" });
    await g.stop();
    const everything = utilInspect(err, { depth: 10 }) + text();
    for (const pw of ["server-pw-1", "wrong-pw-2", "wrong-url-pw-3"]) assert.ok(!everything.includes(pw), pw);
  }
  const ok = guard({ url: `redis://:${encodeURIComponent("server-pw-1")}@127.0.0.1:${redis.port}` });
  await ok.start();
  assert.equal(ok.persistence, "none");
});
