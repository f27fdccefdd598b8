/**
 * KV links (docs/kv.md) in `npm run bench` (BENCH_ONLY=kv): two regions of one nats-server each, on
 * loopback and with a WAN of 2 × oneWayMs round trip (a delay proxy on every cross-region connection).
 *
 *   key updates/s per link  a backlog of PUTS puts over KEYS keys in region a's bucket (history 64, so
 *                           every put is kept and must be applied), one KV link a→b: from b's first
 *                           applied write until b's bucket holds them all. Baseline: the plain stream
 *                           relay moving PUTS messages of the same size on the same servers, just before.
 *   converge after the last write
 *                           writers in both regions on the same CONVERGE_KEYS keys at CONVERGE_RATE
 *                           writes/s each for CONVERGE_SECONDS, links both ways: from the store time of
 *                           the last write (in either region) to the store time of the last write either
 *                           bucket stored after it (the last relayed copy), once both buckets agree
 *                           (verify --kv's comparison) and both links have consumed everything. Store
 *                           times are the servers', on one clock. The median of `runs`.
 */
import { setTimeout as delay } from "node:timers/promises";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";
import { JetStreamPublisher } from "../src/nats/publisher.js";
import { parseNanos } from "../src/protocol/headers.js";
import { verifyKvSides } from "../src/verify/kv-verify.js";
import { check } from "../test/helpers/check.js";
import { startDelayProxy } from "../test/helpers/delay-proxy.js";
import type { DelayProxy } from "../test/helpers/delay-proxy.js";
import type { LocalBackend } from "../test/helpers/local-backend.js";
import type { LocalNatsNode } from "../test/helpers/local-nats.js";
import { RelayProcess, writeConfig } from "../test/helpers/relays.js";
import { addStream, BENCH_PAYLOAD, fill, peakRssMb, relayCpuMeter, timeUntilFull } from "./common.js";

export interface KvBenchOptions {
  /** Puts of the backlog, and the keys they are spread over (at most 64 puts per key: the history). */
  readonly puts: number;
  readonly keys: number;
  /** Writes/s in each region, for how long, on how many keys, for the converge rows. */
  readonly convergeRate: number;
  readonly convergeSeconds: number;
  readonly convergeKeys: number;
  /** Runs of each converge row (the median is shown); the rate rows run once each. */
  readonly runs: number;
  /** Half of each WAN round trip: a group per entry, after the loopback group. */
  readonly oneWayMs: readonly number[];
}

const HISTORY = 64;

interface Pair {
  readonly a: LocalNatsNode;
  readonly b: LocalNatsNode;
  readonly nca: NatsConnection;
  readonly ncb: NatsConnection;
  /** Region a as region b's relay reaches it, and region b as region a's relay does. */
  readonly aFromB: string;
  readonly bFromA: string;
  close(): Promise<void>;
}

async function pair(servers: LocalBackend, oneWayMs: number): Promise<Pair> {
  const [a, b] = (await Promise.all([servers.startNats(), servers.startNats()])) as [LocalNatsNode, LocalNatsNode];
  const proxies: DelayProxy[] = [];
  const via = async (node: LocalNatsNode) => {
    if (oneWayMs === 0) return node.url;
    const p = await startDelayProxy({ port: node.port, oneWayMs });
    proxies.push(p);
    return `nats://127.0.0.1:${p.port}`;
  };
  const [aFromB, bFromA] = [await via(a), await via(b)];
  const nca = await connect({ servers: a.url });
  const ncb = await connect({ servers: b.url });
  return {
    a,
    b,
    nca,
    ncb,
    aFromB,
    bFromA,
    close: async () => {
      await Promise.all([nca.close(), ncb.close()]);
      await Promise.all(proxies.map((p) => p.close()));
      await Promise.all([a.stop(), b.stop()]);
    },
  };
}

function kvConfig(p: Pair, bucket: string, links: readonly ("a-to-b" | "b-to-a")[], relayRegion: "a" | "b"): Promise<string> {
  // Each relay reads its remote region through the WAN, its own directly.
  const urls = relayRegion === "b" ? { a: p.aFromB, b: p.b.url } : { a: p.a.url, b: p.bFromA };
  const l = links.map((name) => {
    const [from, to] = name === "a-to-b" ? ["a", "b"] : ["b", "a"];
    return `  - name: kv-${name}\n    from: { region: ${from}, bucket: ${bucket} }\n    to: { region: ${to}, bucket: ${bucket} }`;
  });
  return writeConfig(`regions:\n  a: { servers: ["${urls.a}"] }\n  b: { servers: ["${urls.b}"] }\nlinks:\n${l.join("\n")}\nhttp: { listen: "127.0.0.1:0" }\nlog: { level: warn }\n`);
}

function startRelay(config: string, region: "a" | "b"): RelayProcess {
  return new RelayProcess(["run", "--config", config, "--region", region], {}, { compiled: true });
}

async function stopRelay(proc: RelayProcess): Promise<void> {
  proc.signal("SIGTERM");
  await proc.exited;
}

/** Puts `count` values of BENCH_PAYLOAD's size on `keys` keys (put i on key i % keys), pipelined. */
async function fillBucket(nc: NatsConnection, bucket: string, count: number, keys: number): Promise<void> {
  const publisher = new JetStreamPublisher(nc, 60_000);
  let sent = 0;
  let done = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      const pump = () => {
        while (sent < count && sent - done < 4_096) {
          const i = sent++;
          publisher.publish(`$KV.${bucket}.k${i % keys}`, BENCH_PAYLOAD, headers(), (err) => {
            if (err) return reject(err);
            if (++done === count) resolve();
            else if (done % 1_024 === 0) setImmediate(pump);
          });
        }
      };
      pump();
    });
  } finally {
    publisher.close();
  }
}

export interface KvRow {
  readonly name: string;
  readonly perSec?: number;
  readonly seconds?: number;
  readonly relayCpu?: number;
  readonly peakRssMb?: number;
  /** Converge rows: ms per run. */
  readonly convergeMs?: readonly number[];
}

let runs = 0;

/** The plain stream relay on the pair's servers: `count` messages a→b, msgs/s. */
async function streamRow(p: Pair, name: string, count: number): Promise<KvRow> {
  const n = ++runs;
  await addStream(p.nca, `SRC${n}`, [`src${n}.>`]);
  await addStream(p.ncb, `DST${n}`, [`src${n}.>`]);
  await fill(p.nca, `src${n}`, count, `s${n}`);
  const config = await writeConfig(
    `regions:\n  a: { servers: ["${p.aFromB}"] }\n  b: { servers: ["${p.b.url}"] }\nlinks:\n  - name: bench\n    from: { region: a, stream: SRC${n} }\n    to: { region: b, stream: DST${n} }\nhttp: { listen: "127.0.0.1:0" }\nlog: { level: warn }\n`,
  );
  const proc = startRelay(config, "b");
  try {
    const cpu = relayCpuMeter(proc.pid, count);
    const seconds = await timeUntilFull(p.ncb, `DST${n}`, count, undefined, cpu.first);
    const rss = peakRssMb(proc.pid);
    return { name, perSec: count / seconds, seconds, relayCpu: cpu.per100k(), ...(rss ? { peakRssMb: rss } : {}) };
  } finally {
    await stopRelay(proc);
  }
}

/** One KV link a→b applying a backlog of `puts` puts over `keys` keys: key updates/s. */
async function kvRateRow(p: Pair, name: string, puts: number, keys: number): Promise<KvRow> {
  const bucket = `rate${++runs}`;
  await Promise.all([new Kvm(p.nca).create(bucket, { history: HISTORY }), new Kvm(p.ncb).create(bucket, { history: HISTORY })]);
  await fillBucket(p.nca, bucket, puts, keys);
  const proc = startRelay(await kvConfig(p, bucket, ["a-to-b"], "b"), "b");
  try {
    const cpu = relayCpuMeter(proc.pid, puts);
    const seconds = await timeUntilFull(p.ncb, `KV_${bucket}`, puts, undefined, cpu.first);
    const rss = peakRssMb(proc.pid);
    await agree(p, bucket);
    return { name, perSec: puts / seconds, seconds, relayCpu: cpu.per100k(), ...(rss ? { peakRssMb: rss } : {}) };
  } finally {
    await stopRelay(proc);
  }
}

/** Both buckets hold the same latest write of every key (verify --kv's comparison); throws what differs. */
async function agree(p: Pair, bucket: string): Promise<true> {
  const { report } = await verifyKvSides(bucket, {
    from: { nc: p.nca, region: "a", stream: `KV_${bucket}`, bucket },
    to: { nc: p.ncb, region: "b", stream: `KV_${bucket}`, bucket },
  });
  if (!report.agree) throw new Error(`${bucket}: ${report.differences.count} keys differ, e.g. ${JSON.stringify(report.differences.examples.slice(0, 2))}`);
  return true;
}

/** Writes `rate` puts/s on `keys` keys for `seconds`; resolves with the sequence of the last one acked. */
async function write(nc: NatsConnection, bucket: string, region: string, rate: number, seconds: number, keys: number): Promise<number> {
  const js = jetstream(nc);
  const started = Date.now();
  const tick = 20;
  let last = 0;
  let owed = 0;
  let n = 0;
  for (let t = 0; t * tick < seconds * 1_000; t++) {
    const due = started + t * tick;
    if (due > Date.now()) await delay(due - Date.now());
    owed += (rate * tick) / 1_000;
    const count = Math.floor(owed);
    owed -= count;
    const acks = await Promise.all(
      Array.from({ length: count }, () => {
        const i = n++;
        return js.publish(`$KV.${bucket}.k${(i * 7919 + (region === "a" ? 0 : 13)) % keys}`, BENCH_PAYLOAD);
      }),
    );
    for (const ack of acks) last = Math.max(last, ack.seq);
  }
  return last;
}

async function storedNs(nc: NatsConnection, stream: string, seq: number): Promise<bigint> {
  const m = await (await jetstreamManager(nc)).streams.getMessage(stream, { seq });
  const ns = m ? parseNanos(m.timestamp) : undefined;
  if (ns === undefined) throw new Error(`${stream} seq ${seq}: no message or no store time`);
  return ns;
}

/** Writers in both regions, links both ways: ms from the last write until the last copy was stored. */
async function convergeRun(p: Pair, o: KvBenchOptions): Promise<number> {
  const bucket = `conv${++runs}`;
  const stream = `KV_${bucket}`;
  await Promise.all([new Kvm(p.nca).create(bucket, { history: 1 }), new Kvm(p.ncb).create(bucket, { history: 1 })]);
  const relays = [startRelay(await kvConfig(p, bucket, ["b-to-a"], "a"), "a"), startRelay(await kvConfig(p, bucket, ["a-to-b"], "b"), "b")];
  try {
    // Live before the clock starts: each link has relayed a first write.
    await jetstream(p.nca).publish(`$KV.${bucket}.warm-a`, BENCH_PAYLOAD);
    await jetstream(p.ncb).publish(`$KV.${bucket}.warm-b`, BENCH_PAYLOAD);
    await check(async () => (await (await jetstreamManager(p.nca)).streams.info(stream)).state.messages >= 2 && (await (await jetstreamManager(p.ncb)).streams.info(stream)).state.messages >= 2, {
      name: "both KV links relayed a first write",
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    const [lastA, lastB] = await Promise.all([
      write(p.nca, bucket, "a", o.convergeRate, o.convergeSeconds, o.convergeKeys),
      write(p.ncb, bucket, "b", o.convergeRate, o.convergeSeconds, o.convergeKeys),
    ]);
    const lastWrite = [await storedNs(p.nca, stream, lastA), await storedNs(p.ncb, stream, lastB)].reduce((x, y) => (x > y ? x : y));
    const drained = async (nc: NatsConnection, link: string) => {
      const c = await (await jetstreamManager(nc)).consumers.info(stream, `relay-kv-${link}`);
      return c.num_pending === 0 && c.num_ack_pending === 0;
    };
    await check(async () => (await drained(p.nca, "a-to-b")) && (await drained(p.ncb, "b-to-a")) && (await agree(p, bucket)), {
      name: `${bucket}: both links consumed everything and both buckets agree`,
      timeoutMs: 120_000,
      intervalMs: 200,
    });
    const lastStored = await Promise.all(
      [p.nca, p.ncb].map(async (nc) => parseNanos((await (await jetstreamManager(nc)).streams.info(stream)).state.last_ts) ?? 0n),
    );
    const last = lastStored.reduce((x, y) => (x > y ? x : y));
    return Number(last - lastWrite) / 1e6;
  } finally {
    await Promise.all(relays.map(stopRelay));
  }
}

/** Runs the kv rows: a group on loopback, then one per WAN; prints each group as it ends. */
export async function kvRows(servers: LocalBackend, o: KvBenchOptions): Promise<KvRow[][]> {
  if (o.puts / o.keys > HISTORY) throw new Error(`BENCH_KV_PUTS / BENCH_KV_KEYS must be at most ${HISTORY} (the bucket's history): every put is kept and applied`);
  console.log(
    `\nKV links (docs/kv.md), one nats-server per region: ${o.puts} puts of ${BENCH_PAYLOAD.length} bytes over ${o.keys} keys; ` +
      `converge: ${o.convergeRate} writes/s in each region for ${o.convergeSeconds} s on ${o.convergeKeys} keys, links both ways, median of ${o.runs}:`,
  );
  const groups: KvRow[][] = [];
  for (const oneWayMs of [0, ...o.oneWayMs]) {
    const where = oneWayMs === 0 ? "loopback" : `${2 * oneWayMs} ms RTT`;
    const p = await pair(servers, oneWayMs);
    try {
      const stream = await streamRow(p, `${where}: stream link (baseline)`, o.puts);
      const kv = await kvRateRow(p, `${where}: KV link, key updates`, o.puts, o.keys);
      const converge: number[] = [];
      for (let i = 0; i < o.runs; i++) converge.push(await convergeRun(p, o));
      const group: KvRow[] = [stream, kv, { name: `${where}: converge after the last write`, convergeMs: converge }];
      printKv(group);
      groups.push(group);
    } finally {
      await p.close();
    }
  }
  return groups;
}

function printKv(group: readonly KvRow[]): void {
  const base = group[0]?.perSec;
  for (const r of group) {
    if (r.perSec !== undefined) {
      const ratio = base ? `${(r.perSec / base).toFixed(2)}x the stream link` : "";
      const cpu = r.relayCpu === undefined ? "" : `, relay CPU ${r.relayCpu.toFixed(2)} s per 100k`;
      const rss = r.peakRssMb === undefined ? "" : `, peak RSS ${r.peakRssMb.toFixed(0)} MB`;
      console.log(`${r.name.padEnd(52)}${Math.round(r.perSec).toString().padStart(10)} /s  ${ratio}${cpu}${rss}`);
    } else if (r.convergeMs) {
      const sorted = [...r.convergeMs].sort((x, y) => x - y);
      const median = sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN;
      console.log(`${r.name.padEnd(52)}${median.toFixed(0).padStart(10)} ms (runs: ${r.convergeMs.map((x) => x.toFixed(0)).join(", ")} ms)`);
    }
  }
}
