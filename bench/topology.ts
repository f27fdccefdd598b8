/**
 * The topology users run, for `npm run bench`: both regions 3-node JetStream clusters with R3 streams,
 * on loopback and with a WAN between them (a delay proxy of the test harness on every cross-region
 * connection: native sourcing's leafnodes and the relay's connections to the remote region alike).
 *
 *   r3      backlog of COUNT messages, native sourcing vs relay, both regions R3 on loopback
 *   r3-wan  the same with 2 × oneWayMs round trip between the regions
 *   lag     steady state at LAG_RATE msgs/s for LAG_SECONDS over the WAN: replication lag p50/p99
 *           (destination store time − publish time), native vs relay
 */
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { headers } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";
import { check } from "../test/helpers/check.js";
import { startDelayProxy } from "../test/helpers/delay-proxy.js";
import type { DelayProxy } from "../test/helpers/delay-proxy.js";
import type { LocalBackend, LocalCluster } from "../test/helpers/local-backend.js";
import { REPO_ROOT, RelayProcess } from "../test/helpers/relays.js";
import { analyse, measureLag, printSteps, printTimeline, readProbe, schedMeter } from "./lag.js";
import type { LagResult } from "./lag.js";
import { addStream, BENCH_PAYLOAD, expectEmpty, fill, peakRssMb, relayCpuMeter, timeUntilFull, writeBenchConfig } from "./common.js";

export interface TopologyRow {
  readonly name: string;
  readonly msgsPerSec?: number;
  readonly seconds?: number;
  readonly relayCpu?: number;
  readonly peakRssMb?: number;
  readonly lagP50Ms?: number;
  readonly lagP99Ms?: number;
  /** Lag rows: the worst 1-second window and, for the relay, the breakdown by step. */
  readonly lag?: LagResult;
  /** The row could not be measured (the machine could not carry the rate): why. */
  readonly failed?: string;
}

interface Regions {
  readonly a: LocalCluster;
  readonly b: LocalCluster;
  /** Region a's client URLs as region b reaches them (through the WAN proxies when there are any). */
  readonly aFromB: string[];
  readonly proxies: DelayProxy[];
  close(): Promise<void>;
}

/**
 * Two 3-node clusters, domains a and b, and the relay's way from b to a's client ports, through the WAN
 * when oneWayMs > 0. `leafnodes` (native sourcing): every b node is also a leafnode of a, through the
 * same WAN. Relay rows have none: over a leafnode, a's publishes to src.> would reach b's DST, which
 * binds the same subjects, before the relay moved anything.
 */
export async function twoClusters(servers: LocalBackend, oneWayMs: number, leafnodes: boolean): Promise<Regions> {
  // a tells nobody its direct URLs: b's leafnodes and the relay's client must stay on the proxied ones.
  const a = await servers.startNatsCluster({ domain: "a", node: () => ({ leafListen: true, noAdvertise: oneWayMs > 0 }) });
  const proxies: DelayProxy[] = [];
  const via = async (port: number) => {
    if (oneWayMs === 0) return port;
    const p = await startDelayProxy({ port, oneWayMs });
    proxies.push(p);
    return p.port;
  };
  const leafPorts = leafnodes ? await Promise.all(a.nodes.map((n) => via(n.leafPort ?? -1))) : [];
  const clientPorts = await Promise.all(a.nodes.map((n) => via(Number(new URL(n.url).port))));
  const b = await servers.startNatsCluster({
    domain: "b",
    node: () => (leafnodes ? { leafRemotes: leafPorts.map((p) => `nats-leaf://127.0.0.1:${p}`) } : {}),
  });
  return {
    a,
    b,
    aFromB: clientPorts.map((p) => `nats://127.0.0.1:${p}`),
    proxies,
    close: async () => {
      await Promise.all(proxies.map((p) => p.close()));
      await Promise.all([a.stop(), b.stop()]);
    },
  };
}

/** Waits until every node of b has its leafnode connection up (sourcing needs $JS.a.API). */
async function leafnodesUp(b: LocalCluster): Promise<void> {
  await check(
    async () => {
      const counts = await Promise.all(b.nodes.map(async (n) => ((await n.monitor("/leafz")).body as { leafnodes?: number }).leafnodes ?? 0));
      return counts.every((c) => c > 0);
    },
    { name: "region b's leafnodes connected to region a", timeoutMs: 90_000, intervalMs: 100 },
  );
}

const R3 = { num_replicas: 3 };

async function nativeRow(servers: LocalBackend, name: string, count: number, oneWayMs: number): Promise<TopologyRow> {
  const r = await twoClusters(servers, oneWayMs, true);
  const nca = await connect({ servers: r.a.urls });
  const ncb = await connect({ servers: r.b.urls });
  try {
    await addStream(nca, "SRC", ["src.>"], R3);
    await fill(nca, "src", count, "n");
    await leafnodesUp(r.b);
    await addStream(ncb, "DST", [], { ...R3, sources: [{ name: "SRC", external: { api: "$JS.a.API" } }] });
    const seconds = await timeUntilFull(ncb, "DST", count);
    return { name, msgsPerSec: count / seconds, seconds };
  } finally {
    await Promise.all([nca.close(), ncb.close()]);
    await r.close();
  }
}

async function relayRow(servers: LocalBackend, name: string, count: number, oneWayMs: number, linkExtra = "", toExtra = ""): Promise<TopologyRow> {
  const r = await twoClusters(servers, oneWayMs, false);
  const nca = await connect({ servers: r.a.urls });
  const ncb = await connect({ servers: r.b.urls });
  try {
    await addStream(nca, "SRC", ["src.>"], R3);
    await addStream(ncb, "DST", ["src.>"], R3);
    await fill(nca, "src", count, "r");
    await expectEmpty(ncb, "DST");
    const proc = startRelay(r, await relayConfig(r, linkExtra, toExtra));
    try {
      const cpu = relayCpuMeter(proc.pid, count);
      const seconds = await timeUntilFull(ncb, "DST", count, undefined, cpu.first);
      const rss = peakRssMb(proc.pid);
      return { name, msgsPerSec: count / seconds, seconds, relayCpu: cpu.per100k(), ...(rss ? { peakRssMb: rss } : {}) };
    } finally {
      proc.signal("SIGTERM");
      await proc.exited;
    }
  } finally {
    await Promise.all([nca.close(), ncb.close()]);
    await r.close();
  }
}

/** The relay in region b reads region a through the WAN (as a relay deployed in b would). */
function relayConfig(r: Regions, linkExtra = "", toExtra = "", logLevel = "warn"): Promise<string> {
  return writeBenchConfig(r.aFromB.join('", "'), r.b.urls.join('", "'), linkExtra, `http: { listen: "127.0.0.1:0" }\nlog: { level: ${logLevel} }`, toExtra);
}

/** BENCH_RELAY_NODE_ARGS adds node flags to the relay (e.g. "--trace-gc", kept in BENCH_LAG_LOG's file). */
function startRelay(_r: Regions, config: string, probeOut?: string): RelayProcess {
  const nodeArgs = (process.env.BENCH_RELAY_NODE_ARGS ?? "").split(" ").filter(Boolean);
  if (!probeOut) return new RelayProcess(["run", "--config", config, "--region", "b"], {}, { compiled: true, nodeArgs });
  const probe = pathToFileURL(join(REPO_ROOT, "bench/lag-probe.mjs")).href;
  return new RelayProcess(["run", "--config", config, "--region", "b"], { LAG_PROBE_OUT: probeOut }, { compiled: true, nodeArgs: [...nodeArgs, "--import", probe] });
}

let probeRuns = 0;

/** The lag row's relay output, kept as <dir>/<row name>.log (BENCH_LAG_LOG). */
function keepRelayLog(dir: string, row: string, output: string): void {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${row.replace(/[^A-Za-z0-9._-]+/g, "-")}.log`);
  writeFileSync(file, output);
  console.log(`${"".padEnd(6)}relay log: ${file}`);
}

/**
 * The floor (bench/floor-forwarder.mjs): a bare client process in region b reading region a as the
 * relay does: a core subscription on the source subjects, core publishes, no acks.
 */
function startFloor(r: Regions): ChildProcess {
  const child = spawn(process.execPath, [join(REPO_ROOT, "bench/floor-forwarder.mjs")], {
    cwd: REPO_ROOT,
    env: { ...process.env, FLOOR_SOURCE: r.aFromB.join(","), FLOOR_DEST: r.b.urls.join(",") },
    stdio: ["ignore", "inherit", "inherit"],
  });
  return child;
}

async function stopFloor(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

async function lagRow(servers: LocalBackend, name: string, kind: "native" | "relay" | "floor", oneWayMs: number, rate: number, seconds: number): Promise<TopologyRow> {
  const r = await twoClusters(servers, oneWayMs, kind === "native");
  const nca = await connect({ servers: r.a.urls });
  const ncb = await connect({ servers: r.b.urls });
  let proc: RelayProcess | undefined;
  let floor: ChildProcess | undefined;
  try {
    await addStream(nca, "SRC", ["src.>"], R3);
    const probeOut = join(tmpdir(), `lag-probe-${process.pid}-${++probeRuns}.json`);
    if (kind === "native") {
      await leafnodesUp(r.b);
      await addStream(ncb, "DST", [], { ...R3, sources: [{ name: "SRC", external: { api: "$JS.a.API" } }] });
    } else if (kind === "floor") {
      await addStream(ncb, "DST", ["src.>"], R3);
      floor = startFloor(r);
      // Its subscription is live once a warm-up message reaches DST (sent again until one does: one id).
      const warm = headers();
      warm.set("Nats-Msg-Id", "warm-up");
      const jsm = await jetstreamManager(ncb);
      await check(
        async () => {
          await jetstream(nca).publish("src.warm", BENCH_PAYLOAD, { headers: warm });
          return (await jsm.streams.info("DST")).state.messages >= 1;
        },
        { name: "the floor forwarder's subscription is live", timeoutMs: 60_000, intervalMs: 250 },
      );
    } else {
      await addStream(ncb, "DST", ["src.>"], R3);
      // BENCH_LAG_PROBE=0: without bench/lag-probe.mjs (what the probe itself costs the relay).
      // BENCH_LAG_LINK: link settings for the lag rows' relay (YAML lines, e.g. "    inFlight: 4096").
      const linkExtra = (process.env.BENCH_LAG_LINK ?? "").replace(/\\n/g, "\n");
      // BENCH_LAG_LOG=<dir>: the relay logs at info (the window's decisions) into <dir>, one file per row.
      proc = startRelay(r, await relayConfig(r, linkExtra, "", process.env.BENCH_LAG_LOG ? "info" : "warn"), process.env.BENCH_LAG_PROBE === "0" ? undefined : probeOut);
      // Live before the clock starts: the link has placed its consumer and relayed a first message.
      const warm = headers();
      warm.set("Nats-Msg-Id", "warm-up");
      await jetstream(nca).publish("src.warm", BENCH_PAYLOAD, { headers: warm });
      // Kept, not purged: a purge is a change of the destination, which holds the link's publishing
      // until it has read the stream again (up to a poll), and the measurement would start with that.
      await timeUntilFull(ncb, "DST", 1, 60_000);
    }
    const pid = proc?.pid ?? floor?.pid;
    const relayThread = schedMeter(pid, pid ?? "all");
    const all = await measureLag(nca, ncb, rate, seconds, kind === "native" ? 0 : 1).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
    if (all instanceof Error) return { name, failed: `the servers did not carry ${rate} msgs/s (${all.message})` };
    const samples = all.filter((s) => !s.warm);
    const thread = relayThread();
    if (proc) {
      proc.signal("SIGTERM"); // the probe writes its file at exit
      await proc.exited;
      if (process.env.BENCH_LAG_LOG) keepRelayLog(process.env.BENCH_LAG_LOG, name, proc.output());
      proc = undefined;
    }
    const probe = readProbe(probeOut);
    if (process.env.BENCH_LAG_TIMELINE === "1") printTimeline(all, probe);
    const lag = { ...analyse(samples, probe), ...(thread ? { relayThread: thread } : {}) };
    return { name, lagP50Ms: lag.p50, lagP99Ms: lag.p99, lag };
  } finally {
    if (proc) {
      proc.signal("SIGTERM");
      await proc.exited;
    }
    if (floor) await stopFloor(floor);
    await Promise.all([nca.close(), ncb.close()]);
    await r.close();
  }
}

export interface TopologyOptions {
  readonly count: number;
  /** Row groups to run: r3, r3-wan, lag. */
  readonly only: ReadonlySet<string>;
  /** Half of each WAN round trip: r3-wan and lag run once per entry. */
  readonly oneWayMs: readonly number[];
  readonly lagRate: number;
  readonly lagSeconds: number;
  /**
   * Lag rows also run the floor: bench/floor-forwarder.mjs, a bare client process (an ordered consumer,
   * core publishes, no acks) in the relay's place.
   */
  readonly lagFloor?: boolean;
  /** The native rows of the lag groups (BENCH_LAG_NATIVE=0 leaves them out: a quick look at the relay alone). */
  readonly lagNative?: boolean;
  /** Rates of the loopback lag rows (no WAN); empty: none. */
  readonly lagLoopbackRates: readonly number[];
  /** Runs of each row, in rotation within its group: the median is shown (a shared machine is noisy). */
  readonly runs: number;
  /** r3-wan: only the default link settings (not the variants with other acks or caps). */
  readonly wanDefaultsOnly?: boolean;
}

/**
 * Each row `runs` times, in rotation (row 1, row 2, …, row 1, …), so a slow minute of a shared machine
 * falls on every row alike. Each row is its median run (by rate, or by lag p99), with the highest peak
 * RSS of its runs.
 */
async function inRotation(runs: number, rows: readonly (() => Promise<TopologyRow>)[]): Promise<TopologyRow[]> {
  const results: TopologyRow[][] = rows.map(() => []);
  for (let i = 0; i < runs; i++) for (const [k, row] of rows.entries()) results[k]?.push(await row());
  return results.map((r) => {
    const key = (x: TopologyRow) => x.msgsPerSec ?? -(x.lagP99Ms ?? 0);
    const median = [...r].sort((x, y) => key(x) - key(y))[Math.floor((r.length - 1) / 2)] as TopologyRow;
    const rss = Math.max(...r.map((x) => x.peakRssMb ?? 0));
    const name = runs > 1 ? `${median.name} (median of ${runs})` : median.name;
    return { ...median, name, ...(rss > 0 ? { peakRssMb: rss } : {}) };
  });
}

/** Runs the selected rows; each pair (native, relay) on fresh clusters, native first; prints each group as it ends. */
export async function topologyRows(servers: LocalBackend, o: TopologyOptions): Promise<TopologyRow[][]> {
  const groups: TopologyRow[][] = [];
  const add = (group: TopologyRow[]) => {
    printTopology([group]);
    printFloorRatio(group);
    groups.push(group);
  };
  const rotation = (rows: readonly (() => Promise<TopologyRow>)[]) => inRotation(o.runs, rows);
  if (o.only.has("r3")) {
    add(await rotation([() => nativeRow(servers, "R3 loopback: native sourcing", o.count, 0), () => relayRow(servers, "R3 loopback: relay", o.count, 0)]));
  }
  if (o.only.has("lag")) {
    // Loopback: no WAN at all, at each rate of lagLoopbackRates.
    for (const rate of o.lagLoopbackRates) {
      add(
        await rotation([
          ...(o.lagNative === false ? [] : [() => lagRow(servers, `lag at ${rate}/s, R3 loopback: native`, "native", 0, rate, o.lagSeconds)]),
          () => lagRow(servers, `lag at ${rate}/s, R3 loopback: relay`, "relay", 0, rate, o.lagSeconds),
          ...(o.lagFloor ? [() => lagRow(servers, `lag at ${rate}/s, R3 loopback: floor`, "floor", 0, rate, o.lagSeconds)] : []),
        ]),
      );
    }
  }
  for (const oneWayMs of o.oneWayMs) {
    const rtt = `${2 * oneWayMs} ms RTT`;
    if (o.only.has("r3-wan")) {
      const relay = (label: string, extra = "", toExtra = "") => () => relayRow(servers, `R3 + ${rtt}: relay${label}`, o.count, oneWayMs, extra, toExtra);
      const group = await rotation([
        () => nativeRow(servers, `R3 + ${rtt}: native sourcing`, o.count, oneWayMs),
        relay(""),
        // Publishes chained by Nats-Expected-Last-Sequence (to.order: strict): its cost over a WAN.
        relay(", strict order", "", ", order: strict"),
        ...(o.wanDefaultsOnly
          ? []
          : [
              relay(", an ack each", "    sourceAcks: each"),
              // A window held at 4,096 messages whatever the round trip needs.
              relay(", inFlight 4096, 4GiB", "    inFlight: 4096\n    inFlightBytes: 4GiB"),
            ]),
      ]);
      add(group);
      printStrictRatio(group[1], group[2]);
    }
    if (o.only.has("lag")) {
      add(
        await rotation([
          ...(o.lagNative === false ? [] : [() => lagRow(servers, `lag at ${o.lagRate}/s, R3 + ${rtt}: native`, "native", oneWayMs, o.lagRate, o.lagSeconds)]),
          () => lagRow(servers, `lag at ${o.lagRate}/s, R3 + ${rtt}: relay`, "relay", oneWayMs, o.lagRate, o.lagSeconds),
          ...(o.lagFloor ? [() => lagRow(servers, `lag at ${o.lagRate}/s, R3 + ${rtt}: floor`, "floor", oneWayMs, o.lagRate, o.lagSeconds)] : []),
        ]),
      );
    }
  }
  return groups;
}

/** A lag group's relay p99 against its floor's (the bare client process), when the group has one. */
function printFloorRatio(group: readonly TopologyRow[]): void {
  const relay = group.find((r) => / relay/.test(r.name) && r.lagP99Ms !== undefined);
  const floor = group.find((r) => /floor/.test(r.name) && r.lagP99Ms !== undefined);
  if (relay?.lagP99Ms && floor?.lagP99Ms) console.log(`relay lag p99 / floor's (a bare client process): ${(relay.lagP99Ms / floor.lagP99Ms).toFixed(2)}x`);
}

/** The strict-order row's rate as a ratio to the default relay's (same group, same servers' settings). */
export function printStrictRatio(relay: { msgsPerSec?: number } | undefined, strict: { msgsPerSec?: number } | undefined): void {
  if (relay?.msgsPerSec && strict?.msgsPerSec) console.log(`strict order / default relay: ${(strict.msgsPerSec / relay.msgsPerSec).toFixed(2)}x msgs/s`);
}

/** Prints each group with its rates (or lags) as ratios to the group's native row. */
export function printTopology(groups: readonly TopologyRow[][]): void {
  for (const [native, ...others] of groups) {
    if (!native) continue;
    for (const r of [native, ...others]) {
      if (r.failed !== undefined) {
        console.log(`${r.name.padEnd(52)}not measured: ${r.failed}`);
      } else if (r.msgsPerSec !== undefined) {
        const ratio = native.msgsPerSec ? (r.msgsPerSec / native.msgsPerSec).toFixed(2) : "-";
        const cpu = r.relayCpu === undefined ? "" : `, relay CPU ${r.relayCpu.toFixed(2)} s per 100k`;
        const rss = r.peakRssMb === undefined ? "" : `, peak RSS ${r.peakRssMb.toFixed(0)} MB`;
        console.log(`${r.name.padEnd(52)}${Math.round(r.msgsPerSec).toString().padStart(10)} msgs/s  ${ratio}x native${cpu}${rss}`);
      } else {
        const ratio = native.lagP99Ms ? ((r.lagP99Ms ?? NaN) / native.lagP99Ms).toFixed(2) : "-";
        const goal = Math.max(1.2 * (native.lagP99Ms ?? NaN), (native.lagP99Ms ?? NaN) + 25);
        const vs = r === native ? "" : `, goal <= ${goal.toFixed(0)} ms: ${(r.lagP99Ms ?? NaN) <= goal ? "met" : "NOT met"}`;
        console.log(`${r.name.padEnd(52)}lag p50 ${(r.lagP50Ms ?? NaN).toFixed(0).padStart(6)} ms, p99 ${(r.lagP99Ms ?? NaN).toFixed(0).padStart(6)} ms  (p99 ${ratio}x native${vs})`);
        const w = r.lag?.worst;
        if (w) {
          console.log(
            `${"".padEnd(6)}max ${r.lag?.max.toFixed(0)} ms; worst 1-s window (second ${w.at}): max ${w.max.toFixed(0)} ms, p99 ${w.p99.toFixed(0)} ms, mean ${w.mean.toFixed(0)} ms = ` +
              `${(w.max / w.median).toFixed(2)}x the run's median lag (goal <= 3x: ${w.max <= 3 * w.median ? "met" : "NOT met"})`,
          );
        }
        const t = r.lag?.relayThread;
        if (t) console.log(`${"".padEnd(6)}relay event loop over the run: on a CPU ${t.ranPct.toFixed(0)} % of the time, runnable but waiting for a CPU ${t.waitedPct.toFixed(0)} %`);
        if (r.lag?.steps) printSteps(r.lag.steps);
      }
    }
  }
}
