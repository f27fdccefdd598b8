/**
 * npm run bench:profile — where the relay's CPU goes on the hot path.
 *
 * Relays a backlog of PROFILE_MESSAGES (default 200,000) × 512-byte messages between two local
 * nats-servers with the compiled relay under `node --cpu-prof` (PROFILE_NODE_ARGS adds node options),
 * then prints the relay's peak RSS, CPU seconds per 100,000 messages, its garbage collections by kind
 * and their time (bench/gc-probe.mjs), and the functions with the most self time (and their share), grouped as the
 * hot path reads: the relay's own code, the NATS client, prom-client, Node internals.
 * The profile is written to bench/profiles/relay-<guard>.cpuprofile: open it in Chrome DevTools or
 * speedscope for the flame graph. PROFILE_GUARD=redis profiles the guarded relay. PROFILE_STRACE=1
 * also counts the relay's socket system calls (strace -c): how many writes carry the messages and acks.
 * PROFILE_RATE=5000 profiles the steady state instead of a backlog: the relay starts first, then
 * PROFILE_MESSAGES are published at that rate (small batches, the relay mostly caught up); the CPU
 * per 100k counts from the first published message; for a backlog, from the first relayed one (like the rate).
 * PROFILE_WAN_ONE_WAY_MS=150 puts the source region behind the test kit's delay proxy (a 300 ms round
 * trip): the relay then holds its whole window, which shows what the relay does per message held.
 * PROFILE_ALLOC=1 also prints what the relay allocated per relayed message, by function (V8's sampling
 * heap profiler with collected objects included, bench/alloc-probe.mjs; it slows the relay down).
 * PROFILE_LINK adds a link setting (e.g. "inFlight: 1024"); PROFILE_LOG_LEVEL=info logs the window's
 * decisions, and PROFILE_GC_LOG=<file> writes the relay's output there.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { LocalBackend } from "../test/helpers/local-backend.js";
import { REPO_ROOT, RelayProcess } from "../test/helpers/relays.js";
import { startDelayProxy } from "../test/helpers/delay-proxy.js";
import type { DelayProxy } from "../test/helpers/delay-proxy.js";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers } from "@nats-io/nats-core";
import { addStream, BENCH_PAYLOAD, cpuSeconds, fill, peakRssMb, redisCommandStats, relayCpuMeter, scriptInnerCommands, timeUntilFull, writeBenchConfig } from "./common.js";

const COUNT = Number(process.env.PROFILE_MESSAGES ?? 200_000);
const GUARD = process.env.PROFILE_GUARD ?? "none";
const RATE = Number(process.env.PROFILE_RATE ?? 0);
const WAN_ONE_WAY_MS = Number(process.env.PROFILE_WAN_ONE_WAY_MS ?? 0);
/** PROFILE_ALLOC=1: also what the relay allocated, by function (bench/alloc-probe.mjs). */
const ALLOC = process.env.PROFILE_ALLOC === "1";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** What bench/gc-probe.mjs writes: GCs by kind, and the relay's memory when its RSS peaked. */
interface GcProbe {
  gc: Record<string, { count: number; ms: number }>;
  peak: { rss: number; heapTotal?: number; heapUsed?: number; external?: number; arrayBuffers?: number; spaces?: Record<string, number> };
}

function printPeak(peak: GcProbe["peak"]): void {
  const mb = (n: number | undefined) => `${((n ?? 0) / 1048576).toFixed(0)} MB`;
  const spaces = Object.entries(peak.spaces ?? {})
    .filter(([, size]) => size >= 1048576)
    .map(([name, size]) => `${name.replace(/_space$/, "")} ${mb(size)}`)
    .join(", ");
  console.log(
    `memory at the relay's peak RSS ${mb(peak.rss)} (sampled every 20 ms): V8 heap ${mb(peak.heapTotal)} (${spaces}; ${mb(peak.heapUsed)} used), ` +
      `Buffers ${mb(peak.arrayBuffers)}, other memory outside the heap ${mb((peak.external ?? 0) - (peak.arrayBuffers ?? 0))}, ` +
      `the rest (code, stacks, allocator) ${mb(peak.rss - (peak.heapTotal ?? 0) - (peak.external ?? 0))}`,
  );
}

/** V8's sampling heap profile (HeapProfiler.stopSampling). */
interface AllocationNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: AllocationNode[];
}
interface AllocationProfile {
  head: AllocationNode;
}

/** What the relay allocated over its whole run (start included), by function, per relayed message. */
function printAllocations(profile: AllocationProfile, messages: number): void {
  const byFn = new Map<string, number>();
  let total = 0;
  const walk = (node: AllocationNode) => {
    if (node.selfSize > 0) {
      const f = node.callFrame;
      const key = `${area(f.url).padEnd(13)} ${f.functionName || "(anonymous)"} ${f.url.replace(/^.*\/(dist|node_modules)\//, "$1/")}:${f.lineNumber + 1}`;
      byFn.set(key, (byFn.get(key) ?? 0) + node.selfSize);
      total += node.selfSize;
    }
    for (const c of node.children) walk(c);
  };
  walk(profile.head);
  console.log(`\nallocated by the relay (sampled, collected objects included): ${Math.round(total / messages)} bytes per relayed message; by function:`);
  for (const [fn, bytes] of [...byFn].sort((x, y) => y[1] - x[1]).slice(0, 25)) {
    console.log(`  ${String(Math.round(bytes / messages)).padStart(6)} B  ${fn}`);
  }
}

function area(url: string): string {
  if (url.includes("/dist/")) return "relay";
  if (url.includes("@nats-io")) return "nats client";
  if (url.includes("prom-client")) return "prom-client";
  if (url.includes("ioredis")) return "ioredis";
  if (url.includes("pino")) return "pino";
  if (url === "" || url.startsWith("node:")) return "node/runtime";
  return "other";
}

/**
 * `relayCpuPer100k`: the relay's measured CPU per 100,000 messages; the relay's own functions' share
 * of the profile is also printed in those terms (the profile spans the whole process, its start
 * included, so this slightly understates the share during the relaying itself).
 */
function summarize(profile: CpuProfile, relayCpuPer100k: number): void {
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const byFn = new Map<string, { us: number; area: string }>();
  const byArea = new Map<string, number>();
  let total = 0;
  for (const n of profile.nodes) {
    const us = self.get(n.id) ?? 0;
    if (us === 0) continue;
    const { functionName, url, lineNumber } = n.callFrame;
    if (functionName === "(idle)" || functionName === "(program)") continue;
    total += us;
    const where = url.replace(/^.*\/(dist|node_modules)\//, "$1/");
    const key = `${functionName || "(anonymous)"} ${where}:${lineNumber + 1}`;
    const a = area(url);
    byFn.set(key, { us: (byFn.get(key)?.us ?? 0) + us, area: a });
    byArea.set(a, (byArea.get(a) ?? 0) + us);
  }
  const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
  console.log("\nbusy time by area:");
  for (const [a, us] of [...byArea].sort((x, y) => y[1] - x[1])) console.log(`  ${pct(us)}  ${a}`);
  const own = (byArea.get("relay") ?? 0) / total;
  console.log(
    `the relay's own functions (dist/, self time): about ${(own * relayCpuPer100k).toFixed(2)} s of its ${relayCpuPer100k.toFixed(2)} s per 100k; ` +
      `the rest (${((1 - own) * relayCpuPer100k).toFixed(2)} s) is the NATS client, Node, the garbage collector and the libraries`,
  );
  console.log("\ntop functions by self time:");
  for (const [fn, v] of [...byFn].sort((x, y) => y[1].us - x[1].us).slice(0, 30)) console.log(`  ${pct(v.us)}  ${v.area.padEnd(13)} ${fn}`);
}

async function main(): Promise<void> {
  const build = spawnSync("npm", ["run", "build", "--silent"], { stdio: "inherit" });
  if (build.status !== 0) throw new Error("npm run build failed");
  const servers = new LocalBackend();
  const outDir = join(REPO_ROOT, "bench/profiles");
  const tmp = join(outDir, `.tmp-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  let wan: DelayProxy | undefined;
  try {
    const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
    const nca = await connect({ servers: a.url });
    const ncb = await connect({ servers: b.url });
    await addStream(nca, "SRC", ["src.>"]);
    await addStream(ncb, "DST", ["src.>"]);
    if (RATE === 0) await fill(nca, "src", COUNT, "p");
    let guardYaml = "";
    let redisUrl: string | undefined;
    let redisPid: number | undefined;
    if (GUARD === "redis") {
      const redis = await servers.startRedis({ appendonly: true });
      guardYaml = `    guard: { redis: { url: "${redis.url}" }, idTtl: 1h }`;
      redisUrl = redis.url;
      redisPid = redis.pid;
    }
    const redisCpu0 = cpuSeconds(redisPid);
    if (WAN_ONE_WAY_MS > 0) wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: WAN_ONE_WAY_MS });
    const sourceUrl = wan ? `nats://127.0.0.1:${wan.port}` : a.url;
    const linkYaml = [guardYaml, process.env.PROFILE_LINK ? `    ${process.env.PROFILE_LINK}` : ""].filter(Boolean).join("\n");
    const config = await writeBenchConfig(sourceUrl, b.url, linkYaml, `http: { listen: "127.0.0.1:0" }\nlog: { level: ${process.env.PROFILE_LOG_LEVEL ?? "warn"} }`);
    const gcOut = join(tmp, "gc.json");
    const allocOut = ALLOC ? join(tmp, "relay.heapprofile") : undefined;
    const proc = new RelayProcess(["run", "--config", config, "--region", "b"], { GC_PROBE_OUT: gcOut, ...(allocOut ? { ALLOC_PROBE_OUT: allocOut } : {}) }, {
      compiled: true,
      nodeArgs: [
        ...(process.env.PROFILE_NODE_ARGS ?? "").split(" ").filter(Boolean),
        "--import",
        join(REPO_ROOT, "bench/gc-probe.mjs"),
        ...(allocOut ? ["--import", join(REPO_ROOT, "bench/alloc-probe.mjs")] : []),
        "--cpu-prof",
        `--cpu-prof-dir=${tmp}`,
      ],
    });
    const strace = process.env.PROFILE_STRACE === "1" && proc.pid ? spawn("strace", ["-c", "-f", "-e", "trace=write,writev,read,readv", "-p", String(proc.pid)], { stdio: ["ignore", "ignore", "pipe"] }) : undefined;
    const straceOut: string[] = [];
    strace?.stderr?.on("data", (d: Buffer) => straceOut.push(d.toString()));
    const cpu = relayCpuMeter(proc.pid, COUNT);
    let seconds: number;
    if (RATE > 0) {
      nca.publish("src.warm", BENCH_PAYLOAD);
      await timeUntilFull(ncb, "DST", 1, 60_000);
      cpu.first(0);
      const started = performance.now();
      await publishAtRate(nca, RATE, COUNT);
      await timeUntilFull(ncb, "DST", COUNT + 1);
      seconds = (performance.now() - started) / 1000; // from the first publish: the rate is the publisher's
    } else {
      // Like the rate: from the first relayed message (the process's start is a one-time cost).
      seconds = await timeUntilFull(ncb, "DST", COUNT, undefined, cpu.first);
    }
    if (strace) {
      strace.kill("SIGINT");
      await new Promise((resolve) => strace.once("exit", resolve));
      console.log(`system calls of the relay while it relayed ${COUNT} messages:\n${straceOut.join("")}`);
    }
    const relayCpu = cpu.per100k(); // before the SIGTERM: the process's CPU is read from /proc
    const peakRss = peakRssMb(proc.pid);
    if (redisUrl) await printGuardCalls(redisUrl, ((cpuSeconds(redisPid) - redisCpu0) * 100_000) / COUNT);
    proc.signal("SIGTERM");
    await proc.exited;
    if (process.env.PROFILE_GC_LOG) writeFileSync(process.env.PROFILE_GC_LOG, proc.output());
    await Promise.all([nca.close(), ncb.close()]);
    console.log(`relay (guard ${GUARD}${RATE > 0 ? `, published at ${RATE}/s` : ", backlog"}${wan ? `, ${2 * WAN_ONE_WAY_MS} ms round trip to the source` : ""}): ${COUNT} messages in ${seconds.toFixed(2)} s (${Math.round(COUNT / seconds)} msgs/s), relay CPU ${relayCpu.toFixed(2)} s per 100k, peak RSS ${peakRss?.toFixed(0) ?? "-"} MB`);
    const probe = JSON.parse(readFileSync(gcOut, "utf8")) as GcProbe;
    console.log(`garbage collection in the relay (the whole process): ${Object.entries(probe.gc).map(([kind, g]) => `${g.count} ${kind} ${Math.round(g.ms)} ms`).join(", ")}`);
    printPeak(probe.peak);
    if (allocOut) {
      const kept = join(outDir, `relay-${GUARD}.heapprofile`);
      renameSync(allocOut, kept);
      printAllocations(JSON.parse(readFileSync(kept, "utf8")) as AllocationProfile, COUNT);
      console.log(`allocation profile: ${kept} (Chrome DevTools, Memory tab, "Load")`);
    }
    const file = readdirSync(tmp).find((f) => f.endsWith(".cpuprofile"));
    if (!file) throw new Error("the relay wrote no .cpuprofile (did it exit cleanly?)");
    const dest = join(outDir, `relay-${GUARD}.cpuprofile`);
    renameSync(join(tmp, file), dest);
    console.log(`profile: ${dest}`);
    summarize(JSON.parse(readFileSync(dest, "utf8")) as CpuProfile, relayCpu);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    await wan?.close();
    await servers.cleanup();
  }
}

/** Publishes `count` messages (each with its Nats-Msg-Id) at `rate` msgs/s, in 10 ms ticks. */
async function publishAtRate(nc: NatsConnection, rate: number, count: number): Promise<void> {
  const started = performance.now();
  for (let sent = 0; sent < count; ) {
    const wait = started + (sent / rate) * 1000 - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const due = Math.min(count, Math.floor(((performance.now() - started) / 1000) * rate) + 1);
    for (; sent < due; sent++) {
      const h = headers();
      h.set("Nats-Msg-Id", `p-${sent}`);
      nc.publish(`src.${sent % 16}`, BENCH_PAYLOAD, { headers: h });
    }
  }
  await nc.flush();
}

/** How the guard used Redis: script calls, ids per call, commands per id, Redis CPU (what batching buys). */
async function printGuardCalls(url: string, cpuPer100k: number): Promise<void> {
  const admin = new Redis(url);
  try {
    const calls = await redisCommandStats(admin);
    const scripts = (calls.get("evalsha")?.calls ?? 0) + (calls.get("eval")?.calls ?? 0);
    const inner = scriptInnerCommands(calls);
    console.log(
      `guard: ${scripts} script calls (${(COUNT / Math.max(1, scripts / 2)).toFixed(0)} ids per claim + commit pair), Redis CPU ${cpuPer100k.toFixed(2)} s per 100k; ` +
        `per id: ${inner.map(([name, c]) => `${name} ${(c.calls / COUNT).toFixed(2)}`).join(", ")}`,
    );
  } finally {
    admin.disconnect();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
