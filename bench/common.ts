import { readFileSync } from "node:fs";
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { headers, nanos } from "@nats-io/nats-core";
import type { MsgHdrs, NatsConnection } from "@nats-io/nats-core";
import { fillStream } from "../test/helpers/fill.js";
import { writeConfig } from "../test/helpers/relays.js";
import { natsServerBin, natsServerVersion } from "../test/helpers/nats-version.js";

/** Peak resident set (VmHWM) of a process, in MB; undefined when it cannot be read. */
export function peakRssMb(pid: number | "self" | undefined): number | undefined {
  return statusMb(pid, "VmHWM");
}

/** Resident set now (VmRSS) of a process, in MB; undefined when it cannot be read. */
export function residentMb(pid: number | "self" | undefined): number | undefined {
  return statusMb(pid, "VmRSS");
}

function statusMb(pid: number | "self" | undefined, field: "VmHWM" | "VmRSS"): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m?.[1] ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Calls and microseconds of one Redis command, from INFO commandstats. */
export interface CommandStat {
  readonly calls: number;
  readonly usec: number;
}

/**
 * Redis's INFO commandstats, per command, since the server started or the last CONFIG RESETSTAT. A
 * script's calls count under evalsha/eval (their usec include the commands they run, which are also
 * counted under their own names).
 */
export async function redisCommandStats(admin: { info(section: string): Promise<string> }): Promise<Map<string, CommandStat>> {
  const stats = await admin.info("commandstats");
  const out = new Map<string, CommandStat>();
  for (const m of stats.matchAll(/^cmdstat_([\w|]+):calls=(\d+),usec=(\d+)/gm)) out.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]) });
  return out;
}

/** The commands scripts run (every command but the scripts themselves and the benches' own admin calls). */
export function scriptInnerCommands(stats: ReadonlyMap<string, CommandStat>): [string, CommandStat][] {
  return [...stats].filter(([name]) => !/^(eval|evalsha|info|config|ping|client|hello|select|script|flushall|hkeys)/.test(name));
}

/**
 * The benches' relay config: regions a and b, one link `bench` from a/SRC to b/DST with the default
 * link settings, plus `linkExtra` (indented link keys) and `topExtra` (top-level keys). Returns its path.
 */
/** `toExtra`: more fields of the link's `to` (", order: strict"). */
export function writeBenchConfig(aUrl: string, bUrl: string, linkExtra = "", topExtra = "", toExtra = ""): Promise<string> {
  return writeConfig(`
regions:
  a: { servers: ["${aUrl}"] }
  b: { servers: ["${bUrl}"] }
links:
  - name: bench
    from: { region: a, stream: SRC }
    to: { region: b, stream: DST${toExtra} }
${linkExtra}
${topExtra}
`);
}

/** The benches' message: 512 bytes, or BENCH_MESSAGE_BYTES (e.g. 4096: the window is bounded by bytes too). */
export const BENCH_PAYLOAD = new Uint8Array(Number(process.env.BENCH_MESSAGE_BYTES ?? 512)).fill(120);

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** CPU seconds (user + system) a process has used so far; 0 once it is gone. */
export function cpuSeconds(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS; // utime, stime
  } catch {
    return 0;
  }
}

export async function addStream(nc: NatsConnection, name: string, subjects: string[], extra: Record<string, unknown> = {}) {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name, subjects, retention: RetentionPolicy.Limits, storage: StorageType.File, duplicate_window: nanos(120_000), ...extra });
}

/** Fills a stream as fast as the pipelined publisher goes, 4,096 in flight; returns msgs/s. */
export function fill(nc: NatsConnection, subject: string, count: number, idPrefix: string): Promise<number> {
  const withId = (i: number): MsgHdrs => {
    const h = headers();
    h.set("Nats-Msg-Id", `${idPrefix}-${i}`);
    return h;
  };
  return fillStream(nc, subject, count, { payload: BENCH_PAYLOAD, headers: withId });
}

/** Throws unless `stream` is empty: a rate timed over a stream that was filled elsewhere means nothing. */
export async function expectEmpty(nc: NatsConnection, stream: string): Promise<void> {
  const n = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
  if (n !== 0) throw new Error(`${stream}: holds ${n} messages before the relay started; no rate would mean anything`);
}

/**
 * A relay process's CPU per 100,000 messages counted like the rate: from its first relayed message (the
 * process's start, ~0.3 s of CPU, is a one-time cost; `startup` keeps it apart). Call `first` when the
 * destination shows its first messages, `per100k` at the end.
 */
export function relayCpuMeter(pid: number | undefined, count: number) {
  let atFirst: number | undefined;
  let firstN = 0;
  return {
    first: (n: number) => {
      atFirst = cpuSeconds(pid);
      firstN = n;
    },
    startup: () => atFirst ?? NaN,
    per100k: () => ((cpuSeconds(pid) - (atFirst ?? 0)) * 100_000) / (count - firstN),
  };
}

/**
 * Polls the stream's message count; times from the first message to the last. `onFirst` is called with
 * the count when the first messages show.
 */
export async function timeUntilFull(nc: NatsConnection, stream: string, count: number, timeoutMs = 600_000, onFirst?: (n: number) => void): Promise<number> {
  const jsm = await jetstreamManager(nc);
  const deadline = Date.now() + timeoutMs;
  let first = 0;
  for (;;) {
    const n = (await jsm.streams.info(stream)).state.messages;
    if (n > 0 && first === 0) {
      first = performance.now();
      onFirst?.(n);
    }
    if (n >= count) return (performance.now() - first) / 1000;
    if (Date.now() > deadline) throw new Error(`${stream}: ${n} of ${count} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}


/** Which nats-server the bench runs, for its header: NATS_SERVER_BIN's, else PATH's, with its version. */
export function serverLabel(): string {
  return `nats-server ${natsServerVersion() ?? "(version unknown)"} (${process.env.NATS_SERVER_BIN ? natsServerBin() : "from PATH"})`;
}
