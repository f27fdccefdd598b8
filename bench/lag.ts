/**
 * The lag rows' measurement (bench/topology.ts): a steady publish at a rate into region a, the lags read
 * back from region b, and, for a relay run with bench/lag-probe.mjs loaded, where each message's time
 * went, step by step:
 *
 *   sent → source stored       the bench's publish (Bench-Sent) until region a stored it (the
 *                              relay's Relay-Source-Time header: the source's store time)
 *   source stored → delivered  until the relay's NATS client read it off the socket (probe)
 *   delivered → published      the relay's own work: intake, window, claim, publish (probe)
 *   published → dest stored    the destination's store time (its stream timestamp) after that
 *   dest stored → PubAck       until the PubAck reached the relay (probe): not in the lag, but
 *                              what the window and the source acks wait for
 *
 * Every clock is this machine's (the servers, the relay and the bench run on one machine).
 */
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { BENCH_PAYLOAD, timeUntilFull } from "./common.js";

/**
 * Seconds of unmeasured traffic at the lag rate before the measured seconds (BENCH_LAG_WARM_UP_SECONDS).
 * A relay process's first seconds of traffic run behind (BENCH_LAG_TIMELINE=1 shows them as the negative
 * seconds): the lag rows measure the steady state after them.
 */
export const LAG_WARM_UP_SECONDS = Number(process.env.BENCH_LAG_WARM_UP_SECONDS ?? 5);

/** One measured message, as read back from the destination. */
export interface LagSample {
  /** Bench-Sent: the bench's publish (ms). */
  readonly sent: number;
  /** The destination's store time (ms). */
  readonly stored: number;
  /** Relay-Source-Time: the source's store time (ms); relay rows only. */
  readonly sourceStored?: number;
  /** Relay-Source's sequence; relay rows only. */
  readonly sourceSeq?: number;
  /** A warm-up message (stamped for the timeline only, BENCH_LAG_TIMELINE=1): not measured. */
  readonly warm?: boolean;
}

export interface StepStats {
  readonly step: string;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly n: number;
}

/** The worst 1-second window (by send time) of a run, against the run's median lag. */
export interface WorstWindow {
  /** Seconds from the measured run's start. */
  readonly at: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
  /** The whole run's median lag. */
  readonly median: number;
}

export interface LagResult {
  /** The relay's event loop (its main thread) over the run: % on a CPU, % runnable waiting for one. */
  readonly relayThread?: { ranPct: number; waitedPct: number };
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly worst: WorstWindow;
  readonly steps?: StepStats[];
}

/** Nanoseconds a thread ran on a CPU and waited runnable for one (/proc/<pid>/task/<tid>/schedstat). */
interface SchedReading {
  readonly ranNs: number;
  readonly waitedNs: number;
  readonly at: number;
}

function schedRead(pid: number, tid: number | "all"): SchedReading {
  let ranNs = 0;
  let waitedNs = 0;
  try {
    const tids = tid === "all" ? readdirSync(`/proc/${pid}/task`) : [String(tid)];
    for (const t of tids) {
      const [ran, waited] = readFileSync(`/proc/${pid}/task/${t}/schedstat`, "utf8").split(" ").map(Number);
      ranNs += ran ?? 0;
      waitedNs += waited ?? 0;
    }
  } catch {
    // gone, or no schedstat on this kernel: zeros
  }
  return { ranNs, waitedNs, at: performance.now() };
}

/**
 * What a process's threads got of the machine over a stretch: seconds on a CPU and seconds runnable
 * but waiting for one, each as % of the stretch's wall time. A waiting share near or above the running
 * one is a machine that does not give the process the CPU it asks for (the lag it shows is that).
 * `tid`: the thread to read (the relay's event loop is its main thread: tid = pid), or all of them.
 */
export function schedMeter(pid: number | undefined, tid: number | "all") {
  const start = pid === undefined ? undefined : schedRead(pid, tid);
  return (): { ranPct: number; waitedPct: number } | undefined => {
    if (pid === undefined || start === undefined) return undefined;
    const end = schedRead(pid, tid);
    const wallNs = (end.at - start.at) * 1e6;
    return { ranPct: ((end.ranNs - start.ranNs) / wallNs) * 100, waitedPct: ((end.waitedNs - start.waitedNs) / wallNs) * 100 };
  };
}

export const quantile = (sorted: readonly number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

/** RFC 3339 with up to nanoseconds (`2026-12-07T12:00:00.123456789Z`) to ms, sub-ms kept. */
export function rfc3339Ms(text: string): number {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  if (!m) return NaN;
  return Date.parse(`${m[1]}${m[3]}`) + Number(`0.${m[2] ?? "0"}`) * 1000;
}

/**
 * Publishes `rate` msgs/s for `seconds` into region a (a `Bench-Sent` header with the send time in
 * ms), after LAG_WARM_UP_SECONDS of the same traffic unmeasured, and reads the measured messages back
 * from DST in region b. `already`: messages DST held before.
 */
export async function measureLag(nca: NatsConnection, ncb: NatsConnection, rate: number, seconds: number, already = 0): Promise<LagSample[]> {
  // The pace is kept whatever the PubAcks do: on a saturated machine they can take seconds to come.
  // Both paths warm up at the rate first (unmeasured): the lag rows are the steady state, not a cold
  // process's first second (a relay that has moved one message has not compiled its hot path yet).
  const warm = rate * LAG_WARM_UP_SECONDS;
  await publishAtRate(nca, rate, warm, "warm", process.env.BENCH_LAG_TIMELINE === "1" ? "Bench-Warm-Sent" : undefined);
  const total = rate * seconds;
  await publishAtRate(nca, rate, total, "lag", "Bench-Sent");
  await timeUntilFull(ncb, "DST", already + warm + total, 120_000);
  const samples: LagSample[] = [];
  const consumer = await jetstream(ncb).consumers.get("DST", { deliver_policy: DeliverPolicy.All });
  const iter = await consumer.consume();
  for await (const m of iter) {
    const warmSent = Number(m.headers?.get("Bench-Warm-Sent"));
    const sent = warmSent > 0 ? warmSent : Number(m.headers?.get("Bench-Sent"));
    if (sent > 0) {
      const source = m.headers?.get("Relay-Source");
      const sourceTime = m.headers?.get("Relay-Source-Time");
      samples.push({
        sent,
        stored: m.info.timestampNanos / 1e6,
        ...(sourceTime ? { sourceStored: rfc3339Ms(sourceTime) } : {}),
        ...(source ? { sourceSeq: Number(source.split(" ")[2]) } : {}),
        ...(warmSent > 0 ? { warm: true } : {}),
      });
    }
    if (m.info.pending === 0) break;
  }
  await iter.close();
  return samples;
}

/**
 * Publishes `count` messages at `rate` msgs/s (ids `<prefix>-<n>`); `stamp`: the header that carries
 * each one's send time (none without). Core publishes with a reply subject each, their PubAcks counted on one wildcard
 * subscription: the load generator shares the machine's CPUs with the servers and the process under
 * test, and a promise and a timer per message (the JetStream client's publish) cost it a third of a
 * core at 5,000 msgs/s. Rejects when a PubAck is an error or they stop coming for 60 s.
 */
async function publishAtRate(nc: NatsConnection, rate: number, count: number, prefix: string, stamp: string | undefined): Promise<void> {
  const tickMs = 10;
  const perTick = Math.max(1, Math.round((rate * tickMs) / 1000));
  const inbox = `_INBOX.lag-bench.${prefix}.${process.pid}`;
  let acked = 0;
  let failed: string | undefined;
  const sub = nc.subscribe(`${inbox}.*`, {
    callback: (_err, m) => {
      const text = m.string();
      if (text.includes('"error"')) failed ??= `${m.subject}: ${text}`;
      else acked++;
    },
  });
  try {
    const started = Date.now();
    for (let sent = 0; sent < count; ) {
      const due = started + (sent / rate) * 1000;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      for (let i = 0; i < perTick && sent < count; i++, sent++) {
        const h = headers();
        h.set("Nats-Msg-Id", `${prefix}-${sent}`);
        if (stamp) h.set(stamp, String(Date.now()));
        nc.publish(`src.${sent % 16}`, BENCH_PAYLOAD, { headers: h, reply: `${inbox}.${sent}` });
      }
    }
    let seen = -1;
    let since = Date.now();
    while (acked < count && failed === undefined) {
      if (acked !== seen) [seen, since] = [acked, Date.now()];
      else if (Date.now() - since > 60_000) throw new Error(`${count - acked} of ${count} publishes got no PubAck for 60 s`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    if (failed !== undefined) throw new Error(`a publish was refused: ${failed}`);
  } finally {
    sub.unsubscribe();
  }
}

/** What bench/lag-probe.mjs wrote: sseq -> [delivered, published, pubAck] (ms). */
export type ProbeTimes = Record<string, [number | null, number | null, number | null]>;

/** Reads and removes the probe's file; undefined when it wrote none. */
export function readProbe(path: string): ProbeTimes | undefined {
  try {
    const times = JSON.parse(readFileSync(path, "utf8")) as ProbeTimes;
    rmSync(path, { force: true });
    return times;
  } catch {
    return undefined;
  }
}

/** The earliest send time (a loop: 200,000 samples are more arguments than a call takes). */
const earliest = (samples: readonly LagSample[]): number => samples.reduce((min, s) => Math.min(min, s.sent), Infinity);

function stats(step: string, values: number[]): StepStats {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((x, y) => x - y);
  return { step, p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted.at(-1) ?? NaN, n: sorted.length };
}

/** The lags, the worst 1-second window, and with the probe's times the steps of each message. */
export function analyse(samples: readonly LagSample[], probe?: ProbeTimes): LagResult {
  const lags = samples.map((s) => s.stored - s.sent).sort((x, y) => x - y);
  const median = quantile(lags, 0.5);
  const start = earliest(samples);
  const windows = new Map<number, number[]>();
  for (const s of samples) {
    const k = Math.floor((s.sent - start) / 1000);
    const w = windows.get(k);
    if (w) w.push(s.stored - s.sent);
    else windows.set(k, [s.stored - s.sent]);
  }
  let worst: WorstWindow = { at: 0, p99: NaN, max: -Infinity, mean: NaN, median };
  for (const [at, w] of windows) {
    w.sort((x, y) => x - y);
    const max = w.at(-1) ?? NaN;
    if (max > worst.max) worst = { at, p99: quantile(w, 0.99), max, mean: w.reduce((a, b) => a + b, 0) / w.length, median };
  }
  const result = { p50: median, p99: quantile(lags, 0.99), max: lags.at(-1) ?? NaN, worst };
  if (!samples.some((s) => s.sourceStored !== undefined)) return result;
  const steps: [string, (s: LagSample, t?: ProbeTimes[string]) => number][] = [
    ["sent -> source stored", (s) => (s.sourceStored ?? NaN) - s.sent],
    ["source stored -> delivered to relay", (s, t) => (t?.[0] ?? NaN) - (s.sourceStored ?? NaN)],
    ["delivered -> published", (_s, t) => (t?.[1] ?? NaN) - (t?.[0] ?? NaN)],
    ["published -> dest stored", (s, t) => s.stored - (t?.[1] ?? NaN)],
    ["dest stored -> PubAck at relay", (s, t) => (t?.[2] ?? NaN) - s.stored],
    ["sent -> dest stored (the lag)", (s) => s.stored - s.sent],
  ];
  return {
    ...result,
    steps: steps.map(([step, f]) =>
      stats(
        step,
        samples.map((s) => f(s, s.sourceSeq === undefined ? undefined : probe?.[String(s.sourceSeq)])),
      ),
    ),
  };
}

/**
 * BENCH_LAG_TIMELINE=1: each second's lag (by send time), mean and max, and with the probe the mean and
 * max of "source stored -> delivered": where in the run the tail sits. The warm-up's seconds are the
 * negative ones (what the measured run started with).
 */
export function printTimeline(samples: readonly LagSample[], probe?: ProbeTimes): void {
  const start = earliest(samples.filter((s) => !s.warm));
  const seconds = new Map<number, { lag: number[]; wait: number[] }>();
  for (const s of samples) {
    const k = Math.floor((s.sent - start) / 1000);
    let w = seconds.get(k);
    if (!w) seconds.set(k, (w = { lag: [], wait: [] }));
    w.lag.push(s.stored - s.sent);
    const delivered = s.sourceSeq === undefined ? undefined : probe?.[String(s.sourceSeq)]?.[0];
    if (typeof delivered === "number" && s.sourceStored !== undefined) w.wait.push(delivered - s.sourceStored);
  }
  const fmt = (v: number[]) => (v.length ? `${(v.reduce((a, b) => a + b, 0) / v.length).toFixed(1).padStart(7)} / ${v.reduce((a, b) => Math.max(a, b), -Infinity).toFixed(1).padStart(7)}` : "      - /       -");
  console.log(`${"".padEnd(6)}second   lag mean / max (ms)   source stored -> delivered mean / max`);
  for (const [k, w] of [...seconds].sort((x, y) => x[0] - y[0])) console.log(`${"".padEnd(6)}${String(k).padStart(6)}   ${fmt(w.lag)}   ${fmt(w.wait)}`);
}

/** The breakdown's lines, indented under a lag row. */
export function printSteps(steps: readonly StepStats[]): void {
  const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : "-").padStart(8);
  console.log(`${"".padEnd(6)}${"step".padEnd(40)}${"p50".padStart(8)}${"p99".padStart(8)}${"max".padStart(8)}   (ms)`);
  for (const s of steps) console.log(`${"".padEnd(6)}${s.step.padEnd(40)}${ms(s.p50)}${ms(s.p99)}${ms(s.max)}${s.n ? "" : "  (no samples)"}`);
}
