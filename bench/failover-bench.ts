/**
 * npm run bench:failover — how long the destination goes without new messages when the owning relay of
 * a group dies (SIGKILL) or hands over (SIGTERM), under a steady load.
 *
 * Two local nats-servers (regions a and b, from PATH), one link a/SRC → b/DST (default link settings,
 * destination duplicate window 2 min), two relay processes for region b (compiled, `dist/`) sharing the
 * lease bucket with `group: { lease: 3s, renew: 1s }`, and 2,000 msgs/s published into SRC throughout.
 *   FAILOVER_KILLS times (default 20): SIGKILL the owner (the relay whose /status shows the link not in
 *     `standby`), wait until the survivor owns the link and the destination has moved on, start a
 *     replacement and wait until it is standby.
 *   FAILOVER_HANDOVERS times (default 20): the same with SIGTERM (drain, release, the standby acquires
 *     through its KV watch).
 * Then the load stops, the destination is read back and the bench prints, per kind of fault, p50 / p99 /
 * max of the gap in the destination against the goal (kill: p99 < 5 s with lease 3 s; handover: < 1 s),
 * and the totals: published, stored, duplicates, order violations, missing.
 * FAILOVER_KILLS=3 FAILOVER_HANDOVERS=3 npm run bench:failover for a quick look.
 */
import { spawnSync } from "node:child_process";
import { rm } from "node:fs/promises";
import { dirname } from "node:path";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { headers, nanos } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { JetStreamPublisher } from "../src/nats/publisher.js";
import { check } from "../test/helpers/check.js";
import { LocalBackend } from "../test/helpers/local-backend.js";
import { RelayProcess } from "../test/helpers/relays.js";
import { serverLabel, writeBenchConfig } from "./common.js";

const KILLS = envCount("FAILOVER_KILLS", 20);
/** FAILOVER_VERBOSE=1: after each fault, the survivor's link state changes (from its /status) too. */
const VERBOSE = process.env.FAILOVER_VERBOSE === "1";
const HANDOVERS = envCount("FAILOVER_HANDOVERS", 20);
const RATE = 2_000; // msgs/s into the source
const LEASE_MS = 3_000;
const RENEW_MS = 1_000;
const SHUTDOWN_GRACE_MS = 10_000;
const KILL_GOAL_MS = 5_000; // p99 after a SIGKILL
const HANDOVER_GOAL_MS = 1_000; // p99 after a SIGTERM
/** Messages the destination must store between two faults, so each fault starts from a steady flow. */
const STEADY_MESSAGES = 500;
const SUBJECTS = 16;
const payload = new Uint8Array(128).fill(120);

function envCount(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw === undefined || raw === "" ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number >= 0 (got ${raw})`);
  return n;
}

type Kind = "kill" | "handover";

interface Fault {
  kind: Kind;
  label: string;
  /** Wall-clock ms (same clock as the local servers' stored timestamps) when the signal was sent. */
  at: number;
  /** When the bench saw the survivor own the link and the destination grow after that. */
  recoveredAt: number;
  /** Fault → the survivor's /status shows it owns the link (polled every 50 ms). */
  takeoverMs: number;
}

interface LinkView {
  name?: string;
  state: string;
  stateReason?: string;
  stateHistory?: { state: string; at: string; reason?: string }[];
}

/** One relay process of the group and its HTTP base URL. */
interface Member {
  proc: RelayProcess;
  url: string;
  /** Numbered in start order, for the log lines. */
  n: number;
}

/** Steady load: RATE msgs/s, ids `f-<i>` (i = source order), pipelined on one connection. */
class Load {
  private readonly publisher: JetStreamPublisher;
  private timer: NodeJS.Timeout | undefined;
  private started = 0;
  sent = 0;
  acked = 0;
  failed = 0;
  firstError: string | undefined;

  constructor(nc: NatsConnection) {
    this.publisher = new JetStreamPublisher(nc, 10_000);
  }

  start(): void {
    this.started = performance.now();
    // Every 20 ms, publish what brings the total to RATE × elapsed: the rate holds even if a tick is late.
    this.timer = setInterval(() => {
      const due = Math.floor(((performance.now() - this.started) * RATE) / 1_000);
      while (this.sent < due) {
        const i = this.sent++;
        const h = headers();
        h.set("Nats-Msg-Id", `f-${i}`);
        this.publisher.publish(`src.${i % SUBJECTS}`, payload, h, (err) => {
          if (!err) {
            this.acked++;
            return;
          }
          this.failed++;
          this.firstError ??= err.message;
        });
      }
    }, 20);
  }

  /** Stops publishing and waits for every outstanding PubAck (or its timeout). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await check(() => this.publisher.inFlight === 0, { name: "the load's last PubAcks", timeoutMs: 15_000 });
    this.publisher.close();
  }
}

async function addStream(nc: NatsConnection, name: string, subjects: string[]): Promise<void> {
  const jsm = await jetstreamManager(nc);
  // 2 minutes is the default duplicate window; set explicitly so the bench does not depend on it.
  await jsm.streams.add({ name, subjects, retention: RetentionPolicy.Limits, storage: StorageType.File, duplicate_window: nanos(120_000) });
}

async function lastSeq(nc: NatsConnection, stream: string): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(stream)).state.last_seq;
}

async function linkOf(m: Member): Promise<LinkView | undefined> {
  const res = await fetch(`${m.url}/status`, { signal: AbortSignal.timeout(1_000) });
  const body = (await res.json()) as { links?: LinkView[] };
  return body.links?.find((l) => l.name === "bench");
}

const owns = (l: LinkView | undefined) => l !== undefined && l.state !== "standby" && l.state !== "starting";

/**
 * What the destination stored, in stream order: the id's index and the server's store time.
 *
 * Why stored timestamps read back after the run, not a core subscription on the destination's subjects:
 * a core subscriber also receives publishes the stream dropped as duplicates (a re-published message
 * would look like an arrival and shorten the gap), and its arrival time includes this process's own
 * event-loop delays. The stream's timestamp is set by nats-server when it stores the message, on the
 * same machine (same clock) as the bench's fault times, so it measures exactly "the last message stored
 * before the fault to the first stored after it". An ordered consumer reads 2,000 msgs/s × minutes fast.
 */
async function readDestination(nc: NatsConnection, stream: string, upTo: number): Promise<{ index: number[]; ms: number[] }> {
  const index: number[] = [];
  const ms: number[] = [];
  if (upTo === 0) return { index, ms };
  const consumer = await jetstream(nc).consumers.get(stream); // ordered consumer
  const iter = await consumer.consume({ max_messages: 5_000 });
  const timer = setTimeout(() => iter.stop(), 120_000);
  try {
    for await (const m of iter) {
      const id = m.headers?.get("Nats-Msg-Id") ?? "";
      index.push(id.startsWith("f-") ? Number(id.slice(2)) : -1);
      ms.push(Number(m.timestampNanos / 1_000n) / 1_000); // exact (a bigint); info.timestampNanos is a rounded number
      if (m.seq >= upTo) break;
    }
  } finally {
    clearTimeout(timer);
    await iter.close();
  }
  if (index.length === 0) throw new Error(`read nothing back from ${stream} (last sequence ${upTo})`);
  return { index, ms };
}

/**
 * The gap of one fault: the longest stretch without a stored message that overlaps the fault window
 * (from the signal until the bench saw the destination move on). The stretch that contains the signal
 * time is the one "from the last message stored before the fault to the first stored after it"; taking
 * the longest in the window also covers a handover whose old owner still stores its drained messages
 * for a moment after SIGTERM, before the new owner's first message.
 */
function gapOf(sortedMs: readonly number[], f: Fault): { gapMs: number; lastBeforeMs: number; firstAfterMs: number } {
  let lo = 0;
  let hi = sortedMs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sortedMs[mid] ?? 0) <= f.at) lo = mid + 1;
    else hi = mid;
  }
  // sortedMs[lo] is the first message stored after the signal; start at the interval ending there.
  let gapMs = 0;
  for (let k = Math.max(1, lo); k < sortedMs.length; k++) {
    const prev = sortedMs[k - 1] ?? 0;
    if (prev >= f.recoveredAt) break;
    gapMs = Math.max(gapMs, (sortedMs[k] ?? 0) - prev);
  }
  return { gapMs, lastBeforeMs: (sortedMs[lo - 1] ?? NaN) - f.at, firstAfterMs: (sortedMs[lo] ?? NaN) - f.at };
}

/** Nearest-rank percentile. */
function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? NaN;
}

const fmt = (ms: number) => (Number.isNaN(ms) ? "-" : `${(ms / 1_000).toFixed(3)} s`);

function tail(m: Member, lines = 15): string {
  const text = m.proc.output().trimEnd().split("\n").slice(-lines).join("\n");
  return `\n--- relay #${m.n} (pid ${m.proc.pid}, ${m.proc.running ? "running" : "exited"}) output tail ---\n${text}`;
}

/** FAILOVER_VERBOSE: the relay's lease and link-state log lines from `since` on, with their time relative to it. */
function logLines(m: Member, since: number): string[] {
  const out: string[] = [];
  for (const line of m.proc.output().split("\n")) {
    if (!/lease|group|placement|"msg":"link /.test(line)) continue;
    try {
      const rec = JSON.parse(line) as Record<string, unknown> & { time?: number; msg?: string };
      const extra = ["reason", "members", "joined", "left"].filter((k) => rec[k] !== undefined).map((k) => `${k}=${JSON.stringify(rec[k])}`);
      if (rec.time !== undefined && rec.time >= since - 100) out.push(`+${rec.time - since} ms ${rec.msg ?? ""}${extra.length ? ` (${extra.join(" ")})` : ""}`);
    } catch {
      // not a JSON log line
    }
  }
  return out;
}

async function main(): Promise<void> {
  const build = spawnSync("npm", ["run", "build", "--silent"], { stdio: "inherit" });
  if (build.status !== 0) throw new Error("npm run build failed");
  const servers = new LocalBackend();
  const members: Member[] = [];
  const everyRelay: RelayProcess[] = [];
  let configDir: string | undefined;
  let nca: NatsConnection | undefined;
  let ncb: NatsConnection | undefined;
  let started = 0;
  try {
    const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
    nca = await connect({ servers: a.url });
    ncb = await connect({ servers: b.url });
    const dest = ncb;
    await addStream(nca, "SRC", ["src.>"]);
    await addStream(ncb, "DST", ["src.>"]);
    const config = await writeBenchConfig(
      a.url,
      b.url,
      "",
      `group: { bucket: relay_leases, lease: ${LEASE_MS}ms, renew: ${RENEW_MS}ms }\nshutdown: { grace: ${SHUTDOWN_GRACE_MS}ms }\nlog: { level: info }`,
    );
    configDir = dirname(config);
    console.log(
      `failover benchmark: ${KILLS} kills + ${HANDOVERS} handovers, 2 relays for region b, ${RATE} msgs/s, ` +
        `lease ${LEASE_MS} ms / renew ${RENEW_MS} ms, ${serverLabel()}\n`,
    );

    // The CLI logs its HTTP port at info level; --http 127.0.0.1:0 lets each process pick a free one.
    const spawnMember = async (): Promise<Member> => {
      const proc = new RelayProcess(["run", "--config", config, "--region", "b", "--http", "127.0.0.1:0"], {}, { compiled: true });
      everyRelay.push(proc);
      const m: Member = { proc, url: "", n: ++started };
      try {
        m.url = await proc.httpUrl(20_000);
      } catch (err) {
        throw new Error(`relay #${m.n} did not start: ${String(err)}${tail(m)}`, { cause: err });
      }
      members.push(m);
      return m;
    };
    const states = async () => Promise.all(members.map(async (m) => ({ m, link: await linkOf(m).catch(() => undefined) })));
    const explain = async (err: unknown): Promise<Error> => {
      const now = await states();
      const seen = now.map(({ m, link }) => `#${m.n}: ${link ? `${link.state} (${link.stateReason ?? ""})` : "no answer"}`).join("; ");
      return new Error(`${String(err)}\nlink states: ${seen}${members.map((m) => tail(m)).join("")}`, { cause: err });
    };

    /** Exactly one member owns the link and is live, every other is standby, and the destination flows. */
    const steady = async (what: string): Promise<Member> => {
      try {
        const owner = await check(
          async () => {
            const now = await states();
            const own = now.filter(({ link }) => owns(link));
            const ok = own.length === 1 && own[0]?.link?.state === "live" && now.every(({ link }) => owns(link) || link?.state === "standby");
            return ok ? own[0]?.m : undefined;
          },
          { name: `one live owner and a standby (${what})`, timeoutMs: 30_000, intervalMs: 50 },
        );
        const from = await lastSeq(dest, "DST");
        await check(async () => (await lastSeq(dest, "DST")) >= from + STEADY_MESSAGES, {
          name: `the destination stores ${STEADY_MESSAGES} messages in steady state (${what})`,
          timeoutMs: 20_000,
          intervalMs: 50,
        });
        return owner;
      } catch (err) {
        throw await explain(err);
      }
    };

    await spawnMember();
    await spawnMember();
    const load = new Load(nca);
    load.start();
    await steady("start");

    const faults: Fault[] = [];
    const plan: Kind[] = [...Array<Kind>(KILLS).fill("kill"), ...Array<Kind>(HANDOVERS).fill("handover")];
    for (const [i, kind] of plan.entries()) {
      const label = `${kind} ${i < KILLS ? i + 1 : i + 1 - KILLS}`;
      const owner = await steady(`before ${label}`);
      const survivor = members.find((m) => m !== owner);
      if (!survivor) throw new Error("no standby relay");
      const at = Date.now();
      owner.proc.signal(kind === "kill" ? "SIGKILL" : "SIGTERM");
      let takeoverMs = NaN;
      try {
        // The survivor takes the lease: at once after a release, after `lease` by its own clock after a kill.
        await check(
          async () => {
            if (owns(await linkOf(survivor))) takeoverMs = Date.now() - at;
            return !Number.isNaN(takeoverMs);
          },
          { name: `relay #${survivor.n} owns the link after the ${kind} of #${owner.n}`, timeoutMs: LEASE_MS + 15_000, intervalMs: 50 },
        );
        const exit = await Promise.race([
          owner.proc.exited.then((code) => ({ code })),
          new Promise<undefined>((r) => setTimeout(() => r(undefined), SHUTDOWN_GRACE_MS + 5_000).unref()),
        ]);
        if (!exit) throw new Error(`relay #${owner.n} had not exited ${SHUTDOWN_GRACE_MS + 5_000} ms after ${kind === "kill" ? "SIGKILL" : "SIGTERM"}`);
        if (kind === "handover" && exit.code !== 0) throw new Error(`relay #${owner.n} exited with code ${exit.code} after SIGTERM`);
        // Only the survivor can store from here on: the destination has moved on once it grows again.
        const from = await lastSeq(dest, "DST");
        await check(async () => (await lastSeq(dest, "DST")) > from, {
          name: `the destination stores again after the ${kind} of #${owner.n}`,
          timeoutMs: 20_000,
          intervalMs: 20,
        });
      } catch (err) {
        throw await explain(err);
      }
      faults.push({ kind, label, at, recoveredAt: Date.now(), takeoverMs });
      members.splice(members.indexOf(owner), 1);
      const fresh = await spawnMember();
      try {
        await check(async () => (await linkOf(fresh))?.state === "standby", { name: `replacement relay #${fresh.n} is standby`, timeoutMs: 30_000 });
      } catch (err) {
        throw await explain(err);
      }
      process.stdout.write(`${label}: owner #${owner.n} → #${survivor.n}, /status shows the survivor owning the link after ${takeoverMs} ms\n`);
      if (VERBOSE) {
        const history = (await linkOf(survivor).catch(() => undefined))?.stateHistory ?? [];
        for (const h of history.filter((x) => Date.parse(x.at) >= at - 1_000)) {
          process.stdout.write(`    #${survivor.n} /status ${h.state} at +${Date.parse(h.at) - at} ms${h.reason ? ` (${h.reason})` : ""}\n`);
        }
        for (const m of [owner, survivor]) for (const line of logLines(m, at)) process.stdout.write(`    #${m.n} log ${line}\n`);
      }
    }

    await load.stop();
    const published = load.acked;
    // The last owner relays what is left; the destination then holds at least every published id.
    let settleError: Error | undefined;
    try {
      await check(async () => (await jetstreamManager(dest).then((j) => j.streams.info("DST"))).state.messages >= published, {
        name: `DST holds the ${published} published messages`,
        timeoutMs: 60_000,
        intervalMs: 200,
      });
    } catch (err) {
      settleError = await explain(err);
    }
    for (const m of members) m.proc.signal("SIGTERM");
    await Promise.all(members.map((m) => m.proc.exited));

    const stored = await readDestination(dest, "DST", await lastSeq(dest, "DST"));
    const seen = new Uint8Array(load.sent);
    let duplicates = 0;
    let orderViolations = 0;
    let foreign = 0;
    let highest = -1;
    for (const i of stored.index) {
      if (i < 0 || i >= seen.length) {
        foreign++;
        continue;
      }
      if (seen[i]) {
        duplicates++;
        continue;
      }
      seen[i] = 1;
      if (i < highest) orderViolations++;
      highest = Math.max(highest, i);
    }
    const distinct = seen.reduce((n, v) => n + v, 0);
    const missing = published - Math.min(published, distinct);

    const sortedMs = [...stored.ms].sort((x, y) => x - y);
    const gaps = faults.map((f) => ({ ...f, ...gapOf(sortedMs, f) }));
    // For context: the longest stretch without a store outside every fault window.
    let steadyMax = 0;
    for (let k = 1; k < sortedMs.length; k++) {
      const [p, q] = [sortedMs[k - 1] ?? 0, sortedMs[k] ?? 0];
      if (!faults.some((f) => q > f.at - 1 && p < f.recoveredAt)) steadyMax = Math.max(steadyMax, q - p);
    }

    console.log(
      "\nper fault (gap = longest stretch without a stored message from the signal until the destination moved on; " +
        "after a SIGTERM the first store may still be the old owner's drain):",
    );
    for (const g of gaps) {
      console.log(
        `  ${g.label.padEnd(13)} gap ${fmt(g.gapMs).padStart(9)}   ` +
          `last store ${(g.lastBeforeMs / 1_000).toFixed(3)} s, first store after it +${(g.firstAfterMs / 1_000).toFixed(3)} s from the signal; ` +
          `/status shows the survivor owning the link at +${fmt(g.takeoverMs)}`,
      );
    }
    console.log(`\n${"".padEnd(12)}${"n".padStart(4)}${"p50".padStart(11)}${"p99".padStart(11)}${"max".padStart(11)}   goal`);
    let goalsMet = true;
    for (const [kind, goal] of [["kill", KILL_GOAL_MS], ["handover", HANDOVER_GOAL_MS]] as const) {
      const g = gaps.filter((x) => x.kind === kind).map((x) => x.gapMs).sort((x, y) => x - y);
      const p99 = pct(g, 0.99);
      const met = g.length === 0 || p99 < goal;
      goalsMet &&= met;
      console.log(
        `${kind.padEnd(12)}${String(g.length).padStart(4)}${fmt(pct(g, 0.5)).padStart(11)}${fmt(p99).padStart(11)}${fmt(g[g.length - 1] ?? NaN).padStart(11)}` +
          `   p99 < ${goal / 1_000} s${kind === "kill" ? ` (lease ${LEASE_MS / 1_000} s)` : ""}: ${g.length === 0 ? "not measured" : met ? "met" : "MISSED"}`,
      );
    }
    console.log(`(steady state between faults: longest stretch without a stored message ${fmt(steadyMax)})`);
    console.log(
      `\npublished ${published}${load.failed ? ` (+${load.failed} failed publishes: ${load.firstError})` : ""}, stored ${stored.index.length}, ` +
        `distinct ids ${distinct}, duplicates ${duplicates}, order violations ${orderViolations}, missing ${missing}` +
        `${foreign ? `, messages without a bench id ${foreign}` : ""}`,
    );
    console.log(goalsMet ? "goals met" : "GOAL MISSED");
    if (settleError) throw settleError;
  } finally {
    for (const p of everyRelay) await p.stop(); // SIGKILL of the children this bench spawned, by their own handle
    await Promise.all([nca?.close(), ncb?.close()]);
    await servers.cleanup();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
