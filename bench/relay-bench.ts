/**
 * npm run bench — relays a backlog of 200,000 × 512-byte messages between two local nats-servers and
 * prints, from this one run on this machine, every figure as a ratio to native JetStream sourcing:
 *   native sourcing (leafnode + domains, `sources: [{ external }]`)   = the baseline
 *   raw JetStream publish ceiling (pipelined publish + PubAck parse)  = what filling a stream costs
 *   relay, broker dedup only                                           = msgs/s and peak RSS
 *   relay with the Redis guard                                         = msgs/s and peak RSS
 *   relay with an ack per message (sourceAcks: each)                   = msgs/s and peak RSS
 *   relay with to.order: strict (Nats-Expected-Last-Sequence chain)    = msgs/s, and its ratio to the default
 * and, for context, what the NATS client alone does on this machine in one process:
 *   consume + ack each message (no publishing)                         = the source side's ceiling
 *   one process doing both sides: 1 / (1/consume + 1/publish)          = the client's bound for a relay
 * The relays run with the default link settings (batchSize 500; a self-sizing window up to inFlight 16384, 2048 with a guard), compiled (dist/).
 * Each relay variant runs BENCH_REPEAT times (default 3), alternating, on fresh servers: the table
 * shows the median rate and the highest peak RSS of its runs (a shared machine is noisy).
 * BENCH_MESSAGES overrides the count (e.g. 20000 for a quick look).
 * Then the topology users run (bench/topology.ts): both regions 3-node clusters with R3 streams, on
 * loopback (r3) and with a WAN of BENCH_WAN_ONE_WAY_MS × 2 round trip injected by a delay proxy on every
 * cross-region connection (r3-wan, with a strict-order row and its ratio to the default relay), and the replication lag at BENCH_LAG_RATE msgs/s over that WAN (lag).
 * Then what a relay costs per link it holds (bench/idle-links.ts): 100 and 1,000 idle links (links).
 * Then KV links (bench/kv.ts): key updates/s of one KV link against the stream link on the same servers,
 * and the time to converge after the last write with writers in both regions, on loopback and with a
 * BENCH_KV_WAN_ONE_WAY_MS × 2 round trip (kv).
 * BENCH_ONLY=loopback,r3,r3-wan,lag,audit,links,kv selects row groups (all by default).
 */
import { spawnSync } from "node:child_process";
import { cpus } from "node:os";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { LocalBackend } from "../test/helpers/local-backend.js";
import { RelayProcess } from "../test/helpers/relays.js";
import { idleLinkRows } from "./idle-links.js";
import { printStrictRatio, topologyRows } from "./topology.js";
import { auditCostRows } from "./audit-cost.js";
import { kvRows } from "./kv.js";
import { addStream, BENCH_PAYLOAD, cpuSeconds, fill, peakRssMb, relayCpuMeter, serverLabel, timeUntilFull, writeBenchConfig } from "./common.js";

const COUNT = Number(process.env.BENCH_MESSAGES ?? 200_000);
const REPEAT = Math.max(1, Number(process.env.BENCH_REPEAT ?? 3));
const SIZE = BENCH_PAYLOAD.length;
/** BENCH_ONLY=loopback,r3,r3-wan,lag,audit,links,kv (comma-separated): the row groups to run; all by default. */
const ONLY = new Set((process.env.BENCH_ONLY ?? "loopback,r3,r3-wan,lag,audit,links,kv").split(",").map((x) => x.trim()).filter(Boolean));
/** Messages of the R3 rows (3-node clusters fill and relay slower than single servers). */
const TOPOLOGY_COUNT = Number(process.env.BENCH_TOPOLOGY_MESSAGES ?? 50_000);
/** Half the WAN round trip the delay proxy adds between the regions; several (100,150): a WAN group each. */
const WAN_ONE_WAY_MS = (process.env.BENCH_WAN_ONE_WAY_MS ?? "20").split(",").filter(Boolean).map(Number);
/** Runs of each R3 row, in rotation within its group; the median is shown. */
const TOPOLOGY_RUNS = Math.max(1, Number(process.env.BENCH_TOPOLOGY_RUNS ?? 1));

interface Result {
  name: string;
  msgsPerSec: number;
  seconds: number;
  peakRssMb?: number;
  /** Every run's rate, when the figure is a median. */
  runs?: number[];
  /** CPU seconds per 100,000 messages: the nats-servers (and Redis), and the relay process. */
  serverCpu?: number;
  relayCpu?: number;
  /** The relay process's CPU before its first relayed message (start, connect, consumer). */
  relayStartCpu?: number;
  /** The client rows: this process's own CPU per 100,000 messages (measured, not derived from the rate). */
  clientCpu?: number;
}

/** This process's CPU seconds per 100,000 messages since `from` (a process.cpuUsage() reading). */
function ownCpuPer100k(from: NodeJS.CpuUsage, count: number): number {
  const used = process.cpuUsage(from);
  return ((used.user + used.system) / 1e6) * (100_000 / count);
}

/** Reads the CPU time of `pids` now; calling the result gives the seconds used since, per 100k messages. */
function cpuMeter(pids: (number | undefined)[]): () => number {
  const start = pids.map(cpuSeconds);
  return () => {
    let used = 0;
    pids.forEach((pid, i) => (used += cpuSeconds(pid) - (start[i] ?? 0)));
    return (used * 100_000) / COUNT;
  };
}

async function nativeSourcing(servers: LocalBackend): Promise<Result> {
  const hub = await servers.startNats({ domain: "a", leafListen: true });
  const leaf = await servers.startNats({ domain: "b", leafRemotes: [`nats-leaf://127.0.0.1:${hub.leafPort}`] });
  const nca = await connect({ servers: hub.url });
  const ncb = await connect({ servers: leaf.url });
  await addStream(nca, "SRC", ["src.>"]);
  await fill(nca, "src", COUNT, "n");
  // The leafnode connection must be up before the destination can reach $JS.a.API.
  for (let i = 0; i < 100; i++) {
    const leafz = (await (await fetch(`http://127.0.0.1:${leaf.monitorPort}/leafz`)).json()) as { leafnodes?: number };
    if ((leafz.leafnodes ?? 0) > 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const serverCpu = cpuMeter([hub.pid, leaf.pid]);
  await addStream(ncb, "DST", [], { sources: [{ name: "SRC", external: { api: "$JS.a.API" } }] });
  const seconds = await timeUntilFull(ncb, "DST", COUNT);
  const result = { name: "native JetStream sourcing", msgsPerSec: COUNT / seconds, seconds, serverCpu: serverCpu() };
  await Promise.all([nca.close(), ncb.close()]);
  return result;
}

/** Consumes a backlog with the client's consume() and acks every message: the source side alone. */
async function consumeAndAck(servers: LocalBackend): Promise<Result> {
  const a = await servers.startNats();
  const nc = await connect({ servers: a.url });
  await addStream(nc, "SRC", ["src.>"]);
  await fill(nc, "src", COUNT, "k");
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add("SRC", { durable_name: "ceiling", ack_policy: AckPolicy.Explicit, max_ack_pending: 1024 });
  const consumer = await jetstream(nc).consumers.get("SRC", "ceiling");
  const started = performance.now();
  const cpu0 = process.cpuUsage();
  let seen = 0;
  const done = new Promise<void>((resolve) => {
    void consumer.consume({
      max_messages: 500,
      callback: (m) => {
        m.ack();
        if (++seen === COUNT) resolve();
      },
    });
  });
  await done;
  const seconds = (performance.now() - started) / 1000;
  const clientCpu = ownCpuPer100k(cpu0, COUNT);
  await nc.close();
  return { name: "client: consume + ack alone", msgsPerSec: COUNT / seconds, seconds, clientCpu };
}

/** Runs each variant `REPEAT` times, alternating; the median rate and the highest peak RSS. */
async function repeated(variants: [string, () => Promise<Result>][]): Promise<Result[]> {
  const runs = new Map<string, Result[]>(variants.map(([name]) => [name, []]));
  for (let i = 0; i < REPEAT; i++) for (const [name, run] of variants) runs.get(name)?.push(await run());
  return variants.map(([name]) => {
    const rs = runs.get(name) ?? [];
    const sorted = [...rs].sort((x, y) => x.msgsPerSec - y.msgsPerSec);
    const median: Result = sorted[Math.floor(sorted.length / 2)] ?? { name, msgsPerSec: 0, seconds: 0 };
    const rss = rs.map((r) => r.peakRssMb ?? 0);
    return { ...median, name, peakRssMb: Math.max(...rss), runs: rs.map((r) => r.msgsPerSec) };
  });
}

let relayRuns = 0;

async function relay(servers: LocalBackend, name: string, guardYaml: string, redisPid?: number, toExtra = ""): Promise<Result> {
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const nca = await connect({ servers: a.url });
  const ncb = await connect({ servers: b.url });
  await addStream(nca, "SRC", ["src.>"]);
  await addStream(ncb, "DST", ["src.>"]);
  // Ids differ per run: the guard's Redis is shared by the runs and would rightly call a repeat a duplicate.
  await fill(nca, "src", COUNT, `r${++relayRuns}`);
  const config = await writeBenchConfig(a.url, b.url, guardYaml, `http: { listen: "127.0.0.1:0" }\nlog: { level: warn }`, toExtra);
  const serverCpu = cpuMeter([a.pid, b.pid, redisPid]);
  const proc = new RelayProcess(["run", "--config", config, "--region", "b"], {}, { compiled: true });
  try {
    const cpu = relayCpuMeter(proc.pid, COUNT);
    const seconds = await timeUntilFull(ncb, "DST", COUNT, undefined, cpu.first);
    const rss = peakRssMb(proc.pid);
    return { name, msgsPerSec: COUNT / seconds, seconds, ...(rss ? { peakRssMb: rss } : {}), serverCpu: serverCpu(), relayCpu: cpu.per100k(), relayStartCpu: cpu.startup() };
  } finally {
    proc.signal("SIGTERM");
    await proc.exited;
    await Promise.all([nca.close(), ncb.close()]);
  }
}

async function main(): Promise<void> {
  const build = spawnSync("npm", ["run", "build", "--silent"], { stdio: "inherit" });
  if (build.status !== 0) throw new Error("npm run build failed");
  const servers = new LocalBackend();
  try {
    console.log(`jetstream-relay benchmark: ${COUNT} messages of ${SIZE} bytes, ${serverLabel()}; rows: ${[...ONLY].join(", ")}\n`);
    if (ONLY.has("loopback")) await loopbackRows(servers);
    if (ONLY.has("r3") || ONLY.has("r3-wan") || ONLY.has("lag")) {
      const rtts = WAN_ONE_WAY_MS.map((ms) => `${2 * ms} ms`).join(", ");
      const runs = TOPOLOGY_RUNS > 1 ? `medians of ${TOPOLOGY_RUNS} runs in rotation` : "one run each";
      console.log(`\nboth regions 3-node clusters, R3 streams; ${TOPOLOGY_COUNT} messages; WAN = delay proxy, ${rtts} round trip (${runs}):`);
    }
    await topologyRows(servers, {
      count: TOPOLOGY_COUNT,
      only: ONLY,
      oneWayMs: WAN_ONE_WAY_MS,
      lagRate: Number(process.env.BENCH_LAG_RATE ?? 5_000),
      lagSeconds: Number(process.env.BENCH_LAG_SECONDS ?? 10),
      lagFloor: process.env.BENCH_LAG_FLOOR !== "0",
      lagNative: process.env.BENCH_LAG_NATIVE !== "0",
      lagLoopbackRates: (process.env.BENCH_LAG_LOOPBACK_RATES ?? "5000").split(",").map(Number).filter((x) => x > 0),
      runs: TOPOLOGY_RUNS,
      wanDefaultsOnly: process.env.BENCH_WAN_ROWS === "defaults",
    });
    if (ONLY.has("audit")) await auditCostRows(servers, COUNT);
    if (ONLY.has("links")) await idleLinkRows(servers, (process.env.BENCH_LINKS ?? "100,1000").split(",").map(Number));
    if (ONLY.has("kv")) {
      await kvRows(servers, {
        puts: Number(process.env.BENCH_KV_PUTS ?? 50_000),
        keys: Number(process.env.BENCH_KV_KEYS ?? 1_000),
        convergeRate: Number(process.env.BENCH_KV_RATE ?? 500),
        convergeSeconds: Number(process.env.BENCH_KV_SECONDS ?? 5),
        convergeKeys: Number(process.env.BENCH_KV_CONVERGE_KEYS ?? 1_000),
        runs: Math.max(1, Number(process.env.BENCH_KV_RUNS ?? 3)),
        oneWayMs: (process.env.BENCH_KV_WAN_ONE_WAY_MS ?? "100").split(",").filter(Boolean).map(Number),
      });
    }
  } finally {
    await servers.cleanup();
  }
}

/** Today's rows: R1 single servers on loopback, native sourcing as the baseline. */
async function loopbackRows(servers: LocalBackend): Promise<void> {
  {
    const native = await nativeSourcing(servers);
    const [fa] = await Promise.all([servers.startNats()]);
    const ncf = await connect({ servers: fa.url });
    await addStream(ncf, "FILL", ["fill.>"]);
    const fillCpu0 = process.cpuUsage();
    const ceiling = await fill(ncf, "fill", COUNT, "c");
    const publishCpu = ownCpuPer100k(fillCpu0, COUNT);
    await ncf.close();
    const consume = await consumeAndAck(servers);
    const bound = 1 / (1 / consume.msgsPerSec + 1 / ceiling);
    const redis = await servers.startRedis({ appendonly: true });
    const guardYaml = `    guard: { redis: { url: "${redis.url}" }, idTtl: 1h }`;
    const results: Result[] = [
      native,
      { name: "raw JetStream publish ceiling", msgsPerSec: ceiling, seconds: COUNT / ceiling, clientCpu: publishCpu },
      consume,
      { name: "client: both sides in one process", msgsPerSec: bound, seconds: COUNT / bound, clientCpu: publishCpu + (consume.clientCpu ?? NaN) },
      ...(await repeated([
        ["relay (broker dedup only)", () => relay(servers, "relay (broker dedup only)", "")],
        ["relay + Redis guard", () => relay(servers, "relay + Redis guard", guardYaml, redis.pid)],
        ["relay, an ack per message", () => relay(servers, "relay, an ack per message", "    sourceAcks: each")],
        ["relay, strict order", () => relay(servers, "relay, strict order", "", undefined, ", order: strict")],
      ])),
    ];
    const base = native.msgsPerSec;
    const cpu = (v: number | undefined) => (v === undefined ? "-" : `${v.toFixed(2)} s`).padStart(13);
    console.log(
      `${"".padEnd(34)}${"msgs/s".padStart(10)}${"seconds".padStart(10)}${"vs native".padStart(11)}${"peak RSS".padStart(11)}` +
        `${"server CPU".padStart(13)}${"relay CPU".padStart(13)}`,
    );
    for (const r of results) {
      console.log(
        `${r.name.padEnd(34)}${Math.round(r.msgsPerSec).toString().padStart(10)}${r.seconds.toFixed(2).padStart(10)}` +
          `${(r.msgsPerSec / base).toFixed(2).padStart(10)}x${(r.peakRssMb ? `${r.peakRssMb.toFixed(0)} MB` : "-").padStart(11)}` +
          `${cpu(r.serverCpu)}${cpu(r.relayCpu ?? r.clientCpu)}`,
      );
    }
    const start = results.find((r) => r.relayStartCpu !== undefined)?.relayStartCpu;
    console.log(
      `(CPU: seconds per 100,000 messages; server = the nats-servers, and Redis for the guarded relay; relay CPU from its first relayed message, like the rate: its start took ${start?.toFixed(2) ?? "?"} s once; ` +
        "for the client rows, the CPU this process used doing the client's work)",
    );
    const [unguarded, guarded] = [results[4], results[5]];
    console.log(`\nrelay runs (msgs/s): ${results.filter((r) => r.runs).map((r) => `${r.name}: ${r.runs?.map((x) => Math.round(x)).join(", ")}`).join("; ")}`);
    if (unguarded) console.log(`relay / client bound for one process: ${(unguarded.msgsPerSec / bound).toFixed(2)}x`);
    const clientBoth = results[3]?.clientCpu;
    if (unguarded?.relayCpu !== undefined && clientBoth !== undefined) {
      // Like with like: CPU per message, whatever the machine's other processes took from the cores.
      console.log(
        `relay CPU per message / the client's own work (consume + ack, publish + PubAck, measured in this process): ` +
          `${unguarded.relayCpu.toFixed(2)} s / ${clientBoth.toFixed(2)} s per 100k = ${(unguarded.relayCpu / clientBoth).toFixed(2)}x`,
      );
    }
    if (unguarded?.serverCpu !== undefined) {
      // What the servers spent per message in the relay run, plus the client's own cost of the four
      // protocol operations (measured in the two client rows), on every core of this machine.
      const clientCpu = clientBoth ?? 100_000 / consume.msgsPerSec + 100_000 / ceiling;
      const machineBound = (cpus().length * 100_000) / (unguarded.serverCpu + clientCpu);
      console.log(
        `estimated CPU bound of a relay that adds nothing to the client's own work, on ${cpus().length} cores shared with both servers: ` +
          `${Math.round(machineBound)} msgs/s (${(machineBound / base).toFixed(2)}x native); the relay moved ${(unguarded.msgsPerSec / machineBound).toFixed(2)}x of it`,
      );
    }
    if (unguarded && guarded) console.log(`guarded / unguarded relay: ${(guarded.msgsPerSec / unguarded.msgsPerSec).toFixed(2)}x`);
    printStrictRatio(unguarded, results[7]);
    const each = results[6];
    if (unguarded && each) {
      console.log(
        `cumulative (default) / per-message source acks: ${(unguarded.msgsPerSec / each.msgsPerSec).toFixed(2)}x msgs/s, ` +
          `server CPU ${((unguarded.serverCpu ?? 0) / (each.serverCpu ?? 1)).toFixed(2)}x, relay CPU ${((unguarded.relayCpu ?? 0) / (each.relayCpu ?? 1)).toFixed(2)}x`,
      );
    }
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
