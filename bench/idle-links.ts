/**
 * What a relay costs per link it holds (issue #23): one relay process (compiled), N links a/SRC_i →
 * b/DST_i between two single nats-servers, default link settings, no traffic. For each N:
 *   start     seconds from the process's start until every link is `live` in /status
 *   idle      relay CPU (% of one core) and the servers' CPU over BENCH_IDLE_SECONDS with nothing to move
 *   RSS       the relay's resident set after the idle phase, and its peak
 *   burst     50 messages per link published at once (N × 50), and the seconds until every destination
 *             holds them all, as msgs/s
 * BENCH_LINKS=100,1000 sets the counts; BENCH_LINKS_YAML adds top-level config (e.g. "group: { renew: 2s }");
 * BENCH_LINKS_RUNS=3 runs each count three times in rotation and prints medians (see idleLinkRows);
 * BENCH_RELAY_NODE_ARGS passes node flags to the relay (e.g. --cpu-prof).
 */
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { connect, headers } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import type { LocalBackend } from "../test/helpers/local-backend.js";
import { RelayProcess, writeConfig } from "../test/helpers/relays.js";
import { check } from "../test/helpers/check.js";
import { addStream, BENCH_PAYLOAD, cpuSeconds, peakRssMb, residentMb } from "./common.js";

const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 10);
const BURST_PER_LINK = 50;

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

async function publishBurst(nc: NatsConnection, links: number): Promise<void> {
  const js = jetstream(nc);
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < links; i++) {
    for (let k = 0; k < BURST_PER_LINK; k++) {
      const h = headers();
      h.set("Nats-Msg-Id", `b-${i}-${k}`);
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
      // Idle: let the start settle, then measure.
      await new Promise((r) => setTimeout(r, 3_000));
      const relayCpu0 = cpuSeconds(proc.pid);
      const serverCpu0 = cpuSeconds(a.pid) + cpuSeconds(b.pid);
      const idleStart = performance.now();
      await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
      const idleSeconds = (performance.now() - idleStart) / 1000;
      const idleRelayCpuPct = ((cpuSeconds(proc.pid) - relayCpu0) / idleSeconds) * 100;
      const idleServerCpuPct = ((cpuSeconds(a.pid) + cpuSeconds(b.pid) - serverCpu0) / idleSeconds) * 100;
      const rss = residentMb(proc.pid) ?? NaN;
      const jsm = await jetstreamManager(ncb);
      const burstStart = performance.now();
      await publishBurst(nca, links);
      await check(async () => (await destinationTotal(jsm)) >= links * BURST_PER_LINK, { name: "the burst relayed", timeoutMs: 600_000, intervalMs: 100 });
      const burstSeconds = (performance.now() - burstStart) / 1000;
      return { links, startSeconds, idleRelayCpuPct, idleServerCpuPct, rssMb: rss, peakRssMb: peakRssMb(proc.pid) ?? NaN, burstSeconds };
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
  console.log(`\nidle links: one relay, N links between two single servers, default settings; idle over ${IDLE_SECONDS} s; a burst of ${BURST_PER_LINK} msgs per link${of}:`);
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
