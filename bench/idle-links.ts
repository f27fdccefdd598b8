/**
 * What a relay costs per link it holds (issue #23): one relay process (compiled), N links a/SRC_i →
 * b/DST_i between two single nats-servers, default link settings, no traffic. For each N:
 *   start     seconds from the process's start until every link is `live` in /status
 *   idle      steady state: every link relays one message first, then BENCH_IDLE_SETTLE_SECONDS (default
 *             30) of nothing, then relay CPU (% of one core) and the servers' CPU over BENCH_IDLE_SECONDS
 *             (default 60) with nothing to move: every periodic cost (lease rewrites every 15 s and their
 *             watch echoes, pull renewals, backlog reads, checkpoints) has come round several times
 *   RSS       the relay's resident set after the idle phase, and its peak
 *   burst     BENCH_BURST_PER_LINK (default 50) messages per link published at once (N × 50: 50,000 at
 *             1,000 links), and the seconds until every destination
 *             holds them all, as msgs/s
 * BENCH_LINKS=100,1000 sets the counts; BENCH_LINKS_YAML adds top-level config (e.g. "group: { renew: 2s }");
 * BENCH_LINKS_RUNS=3 runs each count three times in rotation and prints medians (see idleLinkRows);
 * BENCH_RELAY_NODE_ARGS passes node flags to the relay (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"); the
 * bench then prints the idle window as seconds before the relay's exit, for bench/profile-window.ts.
 * For a quick look: BENCH_IDLE_SETTLE_SECONDS=5 BENCH_IDLE_SECONDS=10.
 */
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { connect, headers } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import type { LocalBackend } from "../test/helpers/local-backend.js";
import { RelayProcess, writeConfig } from "../test/helpers/relays.js";
import { check } from "../test/helpers/check.js";
import { addStream, BENCH_PAYLOAD, cpuSeconds, peakRssMb, residentMb } from "./common.js";

const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 60);
const SETTLE_SECONDS = Number(process.env.BENCH_IDLE_SETTLE_SECONDS ?? 30);
const BURST_PER_LINK = Number(process.env.BENCH_BURST_PER_LINK ?? 50);
/** How long the burst may take before the row gives up on it (and says which links held it up). */
const BURST_TIMEOUT_MS = Number(process.env.BENCH_BURST_TIMEOUT_SECONDS ?? 120) * 1000;

export interface IdleLinksRow {
  links: number;
  startSeconds: number;
  idleRelayCpuPct: number;
  idleServerCpuPct: number;
  rssMb: number;
  peakRssMb: number;
  burstSeconds: number;
}

/** Messages held by the destination streams DST_0..DST_{n-1}, by one paged stream listing. */
async function destinationTotal(jsm: JetStreamManager): Promise<number> {
  let total = 0;
  for await (const si of jsm.streams.list()) if (si.config.name.startsWith("DST_")) total += si.state.messages;
  return total;
}

async function publishBurst(nc: NatsConnection, links: number, perLink: number, prefix: string): Promise<void> {
  const js = jetstream(nc);
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < links; i++) {
    for (let k = 0; k < perLink; k++) {
      const h = headers();
      h.set("Nats-Msg-Id", `${prefix}-${i}-${k}`);
      pending.push(js.publish(`src${i}.m`, BENCH_PAYLOAD, { headers: h }));
      if (pending.length >= 4_096) await Promise.all(pending.splice(0));
    }
  }
  await Promise.all(pending);
}

async function oneRow(servers: LocalBackend, links: number): Promise<IdleLinksRow> {
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const nca = await connect({ servers: a.url });
  const ncb = await connect({ servers: b.url });
  try {
    for (let i = 0; i < links; i++) await Promise.all([addStream(nca, `SRC_${i}`, [`src${i}.>`]), addStream(ncb, `DST_${i}`, [`src${i}.>`])]);
    const linkYaml = Array.from({ length: links }, (_, i) => `  - { name: l${i}, from: { region: a, stream: SRC_${i} }, to: { region: b, stream: DST_${i} } }`).join("\n");
    const config = await writeConfig(`
regions:
  a: { servers: ["${a.url}"] }
  b: { servers: ["${b.url}"] }
links:
${linkYaml}
http: { listen: "127.0.0.1:0" }
log: { level: info }
${process.env["BENCH_LINKS_YAML"] ?? ""}
`);
    const started = performance.now();
    // BENCH_RELAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof": profile the relay (written at its exit).
    const nodeArgs = (process.env.BENCH_RELAY_NODE_ARGS ?? "").split(" ").filter(Boolean);
    const proc = new RelayProcess(["run", "--config", config, "--region", "b"], {}, { compiled: true, nodeArgs });
    try {
      const url = await proc.httpUrl(120_000);
      await check(
        async () => {
          const status = (await (await fetch(`${url}/status`)).json()) as { links: { state: string }[] };
          return status.links.length === links && status.links.every((l) => l.state === "live");
        },
        { name: "every link live", timeoutMs: 300_000, intervalMs: 100 },
      );
      const startSeconds = (performance.now() - started) / 1000;
      // Steady state: every link has relayed a message (its checkpoint, acks and window have moved
      // once), then the periodic work has come round several times before the measurement starts.
      const jsm = await jetstreamManager(ncb);
      await publishBurst(nca, links, 1, "first");
      await check(async () => (await destinationTotal(jsm)) >= links, { name: "every link relayed one message", timeoutMs: 300_000, intervalMs: 200 });
      await new Promise((r) => setTimeout(r, SETTLE_SECONDS * 1000));
      const relayCpu0 = cpuSeconds(proc.pid);
      const serverCpu0 = cpuSeconds(a.pid) + cpuSeconds(b.pid);
      const idleStart = performance.now();
      await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
      const idleSeconds = (performance.now() - idleStart) / 1000;
      const idleRelayCpuPct = ((cpuSeconds(proc.pid) - relayCpu0) / idleSeconds) * 100;
      const idleServerCpuPct = ((cpuSeconds(a.pid) + cpuSeconds(b.pid) - serverCpu0) / idleSeconds) * 100;
      const idleEnd = performance.now();
      const rss = residentMb(proc.pid) ?? NaN;
      console.log(`(${links} links, idle: relay ${idleRelayCpuPct.toFixed(1)} % of a core, servers ${idleServerCpuPct.toFixed(1)} %, relay RSS ${rss.toFixed(0)} MB)`);
      const burstStart = performance.now();
      await publishBurst(nca, links, BURST_PER_LINK, "b");
      let burstSeconds = NaN;
      try {
        await check(async () => (await destinationTotal(jsm)) >= links * (BURST_PER_LINK + 1), { name: "the burst relayed", timeoutMs: BURST_TIMEOUT_MS, intervalMs: 100 });
        burstSeconds = (performance.now() - burstStart) / 1000;
      } catch {
        // Not drained: say which links hold it up and in what state, rather than lose the row.
        const status = (await (await fetch(`${url}/status`)).json()) as { links: { name: string; state: string; stateReason?: string }[] };
        const stuck = status.links.filter((l) => l.state !== "live");
        const reasons = [...new Set(stuck.map((l) => `${l.state}: ${l.stateReason ?? "-"}`))].join("; ");
        // The relay's log (level info), kept for whoever looks into it.
        const log = join(tmpdir(), `idle-links-relay-${proc.pid}.log`);
        writeFileSync(log, proc.output());
        console.log(
          `(the burst was not drained within ${BURST_TIMEOUT_MS / 1000} s: ${stuck.length} links not live (${reasons}): ` +
            `${stuck.map((l) => l.name).slice(0, 30).join(", ")}; the relay's log: ${log})`,
        );
      }
      const peak = peakRssMb(proc.pid) ?? NaN;
      if (process.env.BENCH_RELAY_NODE_ARGS) {
        proc.signal("SIGTERM");
        await proc.exited;
        const before = (t: number) => ((performance.now() - t) / 1000).toFixed(1);
        console.log(`(profiled relay, ${links} links: the idle window was ${before(idleStart)} s to ${before(idleEnd)} s before its exit)`);
      }
      return { links, startSeconds, idleRelayCpuPct, idleServerCpuPct, rssMb: rss, peakRssMb: peak, burstSeconds };
    } finally {
      proc.signal("SIGTERM");
      await proc.exited;
    }
  } finally {
    await Promise.all([nca.close(), ncb.close()]);
  }
}

/** The middle value (the lower of the two middle ones for an even count). */
function median(values: readonly number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN;
}

/**
 * Runs the idle-links rows and prints them. BENCH_LINKS_RUNS=N runs each count N times in rotation and
 * prints each column's median, with the idle CPU's range: on a shared machine the idle relay CPU of one
 * build varies by ±2 points from run to run, so one run per build cannot tell a change of that size.
 */
export async function idleLinkRows(servers: LocalBackend, counts: readonly number[]): Promise<IdleLinksRow[]> {
  const runs = Math.max(1, Number(process.env.BENCH_LINKS_RUNS ?? 1));
  const of = runs > 1 ? ` (median of ${runs} runs in rotation; idle relay CPU min–max)` : "";
  console.log(
    `\nidle links: one relay, N links between two single servers, default settings; every link relays one message, then ${SETTLE_SECONDS} s of settling, ` +
      `then idle over ${IDLE_SECONDS} s; then a burst of ${BURST_PER_LINK} msgs per link${of}:`,
  );
  console.log(
    `${"links".padStart(6)}${"all live".padStart(10)}${"idle relay CPU".padStart(16)}${"idle server CPU".padStart(17)}${"RSS".padStart(9)}${"peak RSS".padStart(10)}` +
      `${"burst drained".padStart(15)}${"msgs/s".padStart(9)}${runs > 1 ? "  relay CPU range" : ""}`,
  );
  const all = new Map<number, IdleLinksRow[]>(counts.map((n) => [n, []]));
  for (let run = 0; run < runs; run++) for (const n of counts) all.get(n)!.push(await oneRow(servers, n));
  const rows: IdleLinksRow[] = [];
  for (const n of counts) {
    const samples = all.get(n)!;
    const pick = (f: (r: IdleLinksRow) => number) => median(samples.map(f));
    const r: IdleLinksRow = {
      links: n,
      startSeconds: pick((x) => x.startSeconds),
      idleRelayCpuPct: pick((x) => x.idleRelayCpuPct),
      idleServerCpuPct: pick((x) => x.idleServerCpuPct),
      rssMb: pick((x) => x.rssMb),
      peakRssMb: pick((x) => x.peakRssMb),
      burstSeconds: pick((x) => x.burstSeconds),
    };
    rows.push(r);
    const cpus = samples.map((x) => x.idleRelayCpuPct);
    const range = runs > 1 ? `  ${Math.min(...cpus).toFixed(1)}–${Math.max(...cpus).toFixed(1)} %` : "";
    console.log(
      `${String(n).padStart(6)}${`${r.startSeconds.toFixed(1)} s`.padStart(10)}${`${r.idleRelayCpuPct.toFixed(1)} %`.padStart(16)}` +
        `${`${r.idleServerCpuPct.toFixed(1)} %`.padStart(17)}${`${r.rssMb.toFixed(0)} MB`.padStart(9)}${`${r.peakRssMb.toFixed(0)} MB`.padStart(10)}` +
        `${`${r.burstSeconds.toFixed(1)} s`.padStart(15)}${Math.round((n * BURST_PER_LINK) / r.burstSeconds)
          .toString()
          .padStart(9)}${range}`,
    );
  }
  return rows;
}
