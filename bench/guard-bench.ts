/**
 * npm run bench:guard — what the guard costs Redis: memory per committed id and per entity version,
 * and claim+commit throughput, for the current layout (src/guard/layout.ts) and, as the baseline in
 * the same run, the previous one (one key per id and per entity; its scripts are kept verbatim in
 * bench/fixtures/guard-v1-lua.ts). The current layout runs twice: "keyed", claims by a key per id (a
 * scope with several live writers, or a caller without a lease), and "lease", claims by the link's
 * lease (a scope's only writer: no claim key per id; lua.ts WRITERS), as a link runs it.
 *
 * It starts its own redis-server (default settings: no maxmemory, no AOF) and, per layout:
 *   ids       GUARD_BENCH_IDS (default 1,000,000) new ids, claimed and committed in batches of 500
 *             through the guard (two batches in flight, as a link has one claim and one commit)
 *   entities  as many again, each carrying its own entity (version 1): ids and versions
 * `used_memory` (INFO memory) is read before and after each phase, on an emptied database:
 *   bytes/id      = ids phase growth / ids
 *   bytes/entity  = (entities phase growth - ids × bytes/id) / entities
 *   ops/s         = ids claimed and committed per second, and the CPU it took per 100,000 ids in
 *                   Redis and in this process (the client side: the guard's encoding and ioredis)
 * Then a steady rate, for the current layout, keyed and by lease: ids claimed and committed as fast
 * as they go for GUARD_BENCH_STEADY_S seconds (default 24) with an idTtl of 4 s (buckets of 4 s), so that buckets open
 * and expire as they do over hours in production and a claim reads every live bucket. The first half
 * warms up (the fan-out adapts, old buckets expire); the second half is measured: ids/s, live
 * buckets, Redis and client CPU per id, and from Redis's INFO commandstats the commands the scripts
 * ran per id (calls × µs each) and the scripts' own work around them.
 * Last, the floor under the lease row (guard-floor.ts): the same commands per id in scripts that do
 * nothing else, in two calls per batch as the protocol needs and merged into one.
 * Every figure is from this one run on this machine; the ratios compare the layouts.
 */
import { Redis } from "ioredis";
import { pino } from "pino";
import { RedisGuard } from "../src/guard/redis-guard.js";
import type { ClaimedItem, GuardItem } from "../src/guard/types.js";
import { LocalBackend } from "../test/helpers/local-backend.js";
import { CLAIM_LUA as V1_CLAIM, COMMIT_LUA as V1_COMMIT } from "./fixtures/guard-v1-lua.js";
import { BUCKETS_PER_TTL, GroupKeys } from "../src/guard/layout.js";
import { cpuSeconds, redisCommandStats, scriptInnerCommands } from "./common.js";
import { guardFloor } from "./guard-floor.js";

const COUNT = Number(process.env.GUARD_BENCH_IDS ?? 1_000_000);
const BATCH = 500;
const IN_FLIGHT = 2;
const ID_TTL_MS = 3_600_000;
const CLAIM_TTL_MS = 60_000;
const STEADY_SECONDS = Number(process.env.GUARD_BENCH_STEADY_S ?? 24);
const STEADY_ID_TTL_MS = 4_000;

/** A relayed id's claim: its token and, from the current guard, its key (see GuardItem.key). */
interface Claimed {
  token: string;
  key?: string | undefined;
}

interface BenchGuard {
  claim(items: GuardItem[]): Promise<(Claimed | undefined)[]>;
  commit(items: ClaimedItem[]): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The current guard. `lease`: as a link runs it, with its lease (the scope's only writer: its lease
 * is the claim, no claim key per id); without: claims by a key per id, as a scope with several
 * writers (or a caller without a lease) has them.
 */
async function currentGuard(url: string, scope: string, lease: boolean, idTtlMs = ID_TTL_MS): Promise<BenchGuard> {
  const g = new RedisGuard(
    { kind: "redis", url },
    { idTtlMs, claimTtlMs: CLAIM_TTL_MS, strict: false },
    { logger: pino({ level: "silent" }), scope, linkName: "bench" },
  );
  await g.start();
  const opts = lease ? { leaseRevision: 1 } : {};
  return {
    claim: async (items) => (await g.claim(items, undefined, opts)).map((r) => (r.token === undefined ? undefined : { token: r.token, key: r.key })),
    commit: (items) => g.commit(items, opts),
    stop: () => g.stop(),
  };
}

/** The previous guard's calls (its redis-guard.ts claim/commit, over the fixture scripts). */
async function previousGuard(url: string, scope: string): Promise<BenchGuard> {
  const client = new Redis(url) as Redis & {
    v1Claim(...args: (string | number)[]): Promise<[string, string]>;
    v1Commit(...args: (string | number)[]): Promise<unknown>;
  };
  client.defineCommand("v1Claim", { lua: V1_CLAIM });
  client.defineCommand("v1Commit", { lua: V1_COMMIT });
  const prefix = `relay:{${scope}}:`;
  const versionField = (item: GuardItem) =>
    item.entity !== undefined && item.version !== undefined ? `${item.entity}\n${item.version}` : "\n";
  let seq = 0;
  return {
    async claim(items) {
      const token = `bench.${++seq}`;
      const packed = items.map((item) => `${item.id}\n${versionField(item)}\n`).join("");
      const [codes] = await client.v1Claim(
        1,
        prefix,
        `c:${token}`,
        CLAIM_TTL_MS,
        items.length,
        packed,
        "0",
        "",
        "bench",
      );
      return items.map((_, i) => (codes[i] === "r" ? { token } : undefined));
    },
    async commit(items) {
      const packed = items.map((item) => `c:${item.token}\n${item.id}\n${versionField(item)}\n`).join("");
      await client.v1Commit(1, prefix, ID_TTL_MS, items.length, packed, "", "bench");
    },
    async stop() {
      await client.quit();
    },
  };
}

/**
 * Claims and commits `count` items made by `item(i)`, IN_FLIGHT batches at a time; returns seconds.
 * `until` (performance.now() ms): stops starting batches then, whatever the count.
 */
async function drive(guard: BenchGuard, count: number, item: (i: number) => GuardItem, until = Infinity): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    for (;;) {
      const from = next;
      if (from >= count || performance.now() >= until) return;
      next = Math.min(count, from + BATCH);
      const items = Array.from({ length: next - from }, (_, k) => item(from + k));
      const claims = await guard.claim(items);
      // Built as the relay builds them (link/stages/common.ts claimedItem): object literals, the key
      // handed back. (A spread `{ ...it, token }` here cost more client CPU than the guard's own work.)
      const claimed: ClaimedItem[] = [];
      items.forEach((it, k) => {
        const c = claims[k];
        if (!c) return;
        const { id, entity, version } = it;
        claimed.push(entity === undefined || version === undefined ? { id, token: c.token, key: c.key } : { id, entity, version, token: c.token, key: c.key });
      });
      if (claimed.length !== items.length)
        throw new Error(`only ${claimed.length} of ${items.length} new ids were claimed`);
      await guard.commit(claimed);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return (performance.now() - started) / 1000;
}

async function usedMemory(admin: Redis): Promise<number> {
  const info = await admin.info("memory");
  return Number(/^used_memory:(\d+)/m.exec(info)?.[1]);
}

interface LayoutResult {
  name: string;
  bytesPerId: number;
  bytesPerEntity: number;
  idsPerSec: number;
  versionedPerSec: number;
  redisCpuPer100k: number;
  clientCpuPer100k: number;
}

async function measure(
  name: string,
  make: (scope: string) => Promise<BenchGuard>,
  admin: Redis,
  redisPid: number | undefined,
): Promise<LayoutResult> {
  await admin.flushall();
  const base = await usedMemory(admin);
  const guard = await make(`bench:${name}:ids`);
  const cpu0 = cpuSeconds(redisPid);
  const client0 = process.cpuUsage();
  const idSeconds = await drive(guard, COUNT, (i) => ({ id: `${name}-msg-${i}` }));
  const cpu = cpuSeconds(redisPid) - cpu0;
  const clientUsage = process.cpuUsage(client0);
  const clientCpu = (clientUsage.user + clientUsage.system) / 1e6;
  const bytesPerId = ((await usedMemory(admin)) - base) / COUNT;
  await guard.stop();

  await admin.flushall();
  const base2 = await usedMemory(admin);
  const versioned = await make(`bench:${name}:entities`);
  const entitySeconds = await drive(versioned, COUNT, (i) => ({
    id: `${name}-ver-${i}`,
    entity: `customer-${i}`,
    version: 1,
  }));
  const grown = (await usedMemory(admin)) - base2;
  await versioned.stop();
  await admin.flushall();
  return {
    name,
    bytesPerId,
    bytesPerEntity: (grown - bytesPerId * COUNT) / COUNT,
    idsPerSec: COUNT / idSeconds,
    versionedPerSec: COUNT / entitySeconds,
    redisCpuPer100k: (cpu * 100_000) / COUNT,
    clientCpuPer100k: (clientCpu * 100_000) / COUNT,
  };
}

interface SteadyResult {
  name: string;
  /** Per command the scripts ran: calls per id × µs per call (INFO commandstats, measured half only). */
  commands: string[];
  /** The scripts' own work per id: their usec less that of the commands they ran. */
  scriptUsPerId: number;
  liveBuckets: number;
  idsPerSec: number;
  redisCpuPer100k: number;
  clientCpuPer100k: number;
}

/** The current layout at a steady rate: buckets opening and expiring (see the header). */
async function steady(url: string, admin: Redis, redisPid: number | undefined, lease: boolean): Promise<SteadyResult> {
  await admin.flushall();
  const name = lease ? "lease" : "keyed";
  const scope = `bench:steady:${name}`;
  const guard = await currentGuard(url, scope, lease, STEADY_ID_TTL_MS);
  let n = 0;
  const item = () => ({ id: `steady-${name}-${n++}` });
  const half = (STEADY_SECONDS * 1_000) / 2;
  await drive(guard, Infinity, item, performance.now() + half);
  await admin.config("RESETSTAT");
  const cpu0 = cpuSeconds(redisPid);
  const client0 = process.cpuUsage();
  const from = n;
  const seconds = await drive(guard, Infinity, item, performance.now() + half);
  const count = n - from;
  const cpu = cpuSeconds(redisPid) - cpu0;
  const clientUsage = process.cpuUsage(client0);
  const commands = await redisCommandStats(admin);
  const directory = await admin.hkeys(new GroupKeys(scope, 0).meta);
  await guard.stop();
  await admin.flushall();
  const inner = scriptInnerCommands(commands);
  const innerUsec = inner.reduce((sum, [, c]) => sum + c.usec, 0);
  return {
    name,
    commands: inner
      .filter(([, c]) => c.calls / count >= 0.01)
      .map(([cmd, c]) => `${cmd} ${(c.calls / count).toFixed(2)} × ${(c.usec / c.calls).toFixed(2)} µs`),
    scriptUsPerId: ((commands.get("evalsha")?.usec ?? 0) + (commands.get("eval")?.usec ?? 0) - innerUsec) / count,
    liveBuckets: directory.filter((k) => k.startsWith("b")).length,
    idsPerSec: count / seconds,
    redisCpuPer100k: (cpu * 100_000) / count,
    clientCpuPer100k: (((clientUsage.user + clientUsage.system) / 1e6) * 100_000) / count,
  };
}

async function main(): Promise<void> {
  const servers = new LocalBackend();
  try {
    const redis = await servers.startRedis();
    const admin = new Redis(redis.url);
    const version = /^redis_version:(\S+)/m.exec(await admin.info("server"))?.[1];
    console.log(
      `guard bench: ${COUNT} ids and ${COUNT} entities per layout, batches of ${BATCH}, ${IN_FLIGHT} in flight, redis-server ${version} (default settings)\n`,
    );
    const previous = await measure("previous", (scope) => previousGuard(redis.url, scope), admin, redis.pid);
    const keyed = await measure("keyed", (scope) => currentGuard(redis.url, scope, false), admin, redis.pid);
    const current = await measure("lease", (scope) => currentGuard(redis.url, scope, true), admin, redis.pid);
    const row = (r: LayoutResult) =>
      `${r.name.padEnd(10)}${r.bytesPerId.toFixed(1).padStart(10)}${r.bytesPerEntity.toFixed(1).padStart(14)}` +
      `${Math.round(r.idsPerSec).toString().padStart(10)}${Math.round(r.versionedPerSec).toString().padStart(16)}` +
      `${r.redisCpuPer100k.toFixed(2).padStart(16)} s${r.clientCpuPer100k.toFixed(2).padStart(16)} s`;
    console.log(
      `${"layout".padEnd(10)}${"bytes/id".padStart(10)}${"bytes/entity".padStart(14)}${"ids/s".padStart(10)}${"versioned ids/s".padStart(16)}${"Redis CPU/100k".padStart(18)}${"client CPU/100k".padStart(18)}`,
    );
    console.log(row(previous));
    console.log(row(keyed));
    console.log(row(current));
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
    console.log(
      `\nlease / keyed: ids/s ${ratio(current.idsPerSec, keyed.idsPerSec)}, Redis CPU per id ${ratio(current.redisCpuPer100k, keyed.redisCpuPer100k)}, client CPU per id ${ratio(current.clientCpuPer100k, keyed.clientCpuPer100k)}`,
    );
    console.log(
      `lease / previous: bytes/id ${ratio(current.bytesPerId, previous.bytesPerId)}, bytes/entity ${ratio(current.bytesPerEntity, previous.bytesPerEntity)}, ` +
        `ids/s ${ratio(current.idsPerSec, previous.idsPerSec)}, versioned ids/s ${ratio(current.versionedPerSec, previous.versionedPerSec)}, ` +
        `Redis CPU per id ${ratio(current.redisCpuPer100k, previous.redisCpuPer100k)}, client CPU per id ${ratio(current.clientCpuPer100k, previous.clientCpuPer100k)}`,
    );
    console.log(
      "(ops/s: ids claimed and committed per second, claim + commit as the relay runs them; the bench process shares the machine with Redis)",
    );
    if (STEADY_SECONDS > 0) {
      const runs = [await steady(redis.url, admin, redis.pid, false), await steady(redis.url, admin, redis.pid, true)];
      console.log(
        `\nsteady rate, current layout, ${BUCKETS_PER_TTL} buckets per idTtl (idTtl ${STEADY_ID_TTL_MS / 1000} s, ${STEADY_SECONDS / 2} s measured after ${STEADY_SECONDS / 2} s):`,
      );
      console.log(`${"claims".padEnd(10)}${"live buckets".padStart(14)}${"ids/s".padStart(10)}${"Redis CPU per id".padStart(18)}${"client CPU per id".padStart(19)}`);
      for (const r of runs) {
        console.log(
          `${r.name.padEnd(10)}${String(r.liveBuckets).padStart(14)}${Math.round(r.idsPerSec).toString().padStart(10)}` +
            `${(r.redisCpuPer100k * 10).toFixed(2).padStart(15)} µs${(r.clientCpuPer100k * 10).toFixed(2).padStart(16)} µs`,
        );
      }
      for (const r of runs)
        console.log(`${r.name}: Redis per id: ${r.commands.join(", ")}; the scripts' own work ${r.scriptUsPerId.toFixed(2)} µs`);
      const [base, now] = runs as [SteadyResult, SteadyResult];
      console.log(
        `lease / keyed: ids/s ${ratio(now.idsPerSec, base.idsPerSec)}, Redis CPU per id ${ratio(now.redisCpuPer100k, base.redisCpuPer100k)}, client CPU per id ${ratio(now.clientCpuPer100k, base.clientCpuPer100k)}`,
      );
      // As many ids per bucket as the lease row's buckets took: the same live ids, hash sizes and key count.
      const perBucket = Math.round((now.idsPerSec * STEADY_ID_TTL_MS) / 1000);
      const floors = await guardFloor(admin, redis.pid, perBucket, BATCH, IN_FLIGHT);
      console.log(
        `\nthe floor under the lease row: only the commands a new id needs (HEXISTS in both live buckets, HSET into the current one), ` +
          `in scripts that do nothing else; ${perBucket} ids (a bucket's at the lease row's rate) after as many filled the previous bucket (guard-floor.ts):`,
      );
      for (const f of floors)
        console.log(`${f.name.padEnd(40)}${f.redisUsPerId.toFixed(2).padStart(8)} µs Redis CPU per id (${f.commands.join(", ")}; the scripts' own work ${f.scriptUsPerId.toFixed(2)} µs)`);
      const [twoCalls] = floors;
      if (twoCalls) console.log(`lease / floor: Redis CPU per id ${ratio(now.redisCpuPer100k * 10, twoCalls.redisUsPerId)}`);
    }
    admin.disconnect();
  } finally {
    await servers.cleanup();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
