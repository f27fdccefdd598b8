import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { parseConfigText } from "../../src/config/load.js";
import { createLogger } from "../../src/observability/logger.js";
import { Relay } from "../../src/relay/relay.js";
import { HttpServer } from "../../src/observability/http-server.js";
import { check } from "./check.js";
import { linesWithDuplicateKeys } from "./log-lines.js";
import { logStem } from "./log-names.js";
import { deferrals } from "./teardown.js";

export const REPO_ROOT = new URL("../..", import.meta.url).pathname;

/** Collects JSON log lines in memory (tests assert on data, but secrets checks read logs). */
export class LogSink extends Writable {
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _enc: string, cb: () => void): void {
    this.lines.push(...chunk.toString().split("\n").filter((l) => l !== ""));
    cb();
  }
  text(): string {
    return this.lines.join("\n");
  }
}

/**
 * RELAY_TEST_LOG_DIR=<dir>: every in-process relay's log lines are written there when its test ends
 * (one file per relay), to read what a relay decided in a run that failed.
 */
async function keepLogs(testName: string, region: string, logs: LogSink): Promise<void> {
  const dir = process.env["RELAY_TEST_LOG_DIR"];
  if (!dir) return;
  const name = `${logStem(testName)}-${region}-${process.pid}-${Date.now()}.log`;
  // Created when missing: a failing hook here would skip the test's later ones (a publisher left running).
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, name), logs.text() + "\n");
}

/**
 * An in-process relay with its own registry and logger, stopped when the test ends: on its teardown stack
 * (teardown.ts), so before the servers and connections the test started earlier. `opts.gaps`: the
 * test makes the source delete messages the relay has not relayed (else a gap reported fails it).
 */
export async function startRelay(
  t: { after(fn: () => unknown): void; name?: string },
  yamlText: string,
  region: string,
  opts: { env?: Record<string, string>; http?: boolean; level?: "info" | "debug" | "warn"; clock?: () => number; gaps?: boolean; auditLoss?: boolean } = {},
) {
  const config = parseConfigText(yamlText, "test.yaml", { ...process.env, ...opts.env });
  const logs = new LogSink();
  const logger = createLogger({ level: opts.level ?? "info", destination: logs, secrets: [] });
  const relay = new Relay(config, region, { logger, pollIntervalMs: 250, ...(opts.clock ? { clock: opts.clock } : {}) });
  let http: HttpServer | undefined;
  let url = "";
  if (opts.http) {
    http = new HttpServer({ host: "127.0.0.1", port: 0, registry: relay.registry, status: () => relay.status(), ready: () => relay.readiness() });
    url = `http://127.0.0.1:${await http.start()}`;
  }
  deferrals(t)(async () => {
    await relay.stop(AbortSignal.timeout(5_000));
    await http?.stop();
    await keepLogs(t.name ?? "relay", region, logs);
    assertCleanLogLines(logs.lines, "in-process relay", opts.gaps, opts.auditLoss);
  });
  await relay.start();
  return { relay, logs, url, config };
}

/** Reads one series' value from a Prometheus registry (0 when absent). */
export async function metricValue(relay: Relay, name: string, labels: Record<string, string>): Promise<number> {
  // Histogram series (`_bucket`, `_count`, `_sum`) live under the histogram's own name.
  const base = name.replace(/_(bucket|count|sum)$/, "");
  const metric = relay.registry.getSingleMetric(name) ?? relay.registry.getSingleMetric(base);
  if (!metric) return 0;
  const data = await metric.get();
  let sum = 0;
  for (const v of data.values) {
    const metricName = (v as { metricName?: string }).metricName ?? name;
    if (metricName !== name) continue;
    const l = v.labels as Record<string, string | number>;
    if (Object.entries(labels).every(([k, want]) => String(l[k]) === want)) sum += v.value;
  }
  return sum;
}

/** Config directories this test process wrote: removed when it exits (whether its tests passed or not). */
const configDirs = new Set<string>();
let cleanupInstalled = false;

export async function writeConfig(yamlText: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "relay-cfg-"));
  configDirs.add(dir);
  if (!cleanupInstalled) {
    cleanupInstalled = true;
    process.once("exit", () => {
      for (const d of configDirs) rmSync(d, { recursive: true, force: true });
    });
  }
  const path = join(dir, "relay.yaml");
  await writeFile(path, yamlText);
  return path;
}

/** The CLI as a user runs it: `tsx src/cli.ts ...` in a child process. */
export class RelayProcess {
  readonly stdout: string[] = [];
  readonly stderr: string[] = [];
  private child: ChildProcess;
  readonly exited: Promise<number | null>;

  /** `compiled`: run `dist/cli.js` (after `npm run build`) instead of the TypeScript source through tsx. */
  constructor(args: readonly string[], env: Record<string, string> = {}, opts: { compiled?: boolean; nodeArgs?: string[] } = {}) {
    const entry = opts.compiled ? [join(REPO_ROOT, "dist/cli.js")] : ["--import", "tsx", join(REPO_ROOT, "src/cli.ts")];
    entry.unshift(...(opts.nodeArgs ?? []));
    this.child = spawn(process.execPath, [...entry, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child.stdout?.on("data", (d: Buffer) => this.stdout.push(d.toString()));
    this.child.stderr?.on("data", (d: Buffer) => this.stderr.push(d.toString()));
    this.exited = new Promise((resolve) => this.child.on("exit", (code) => resolve(code)));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.running) this.child.kill(sig);
  }

  output(): string {
    return this.stdout.join("") + this.stderr.join("");
  }

  /** The port the relay's HTTP server bound (it logs it at start). */
  async httpUrl(timeoutMs = 20_000): Promise<string> {
    const port = await check(
      () => {
        const m = /"msg":"http listening[^"]*"/.test(this.output()) ? /"port":(\d+)[^\n]*http listening/.exec(this.output()) : null;
        return m?.[1];
      },
      { name: "relay process logs its http port", timeoutMs },
    );
    return `http://127.0.0.1:${port}`;
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.signal("SIGKILL");
    await this.exited;
  }
}

/** `opts.gaps`: the test makes the source delete messages the relay has not relayed (else a gap reported fails it). */
export function spawnRelay(
  t: { after(fn: () => unknown): void; name?: string },
  args: readonly string[],
  env: Record<string, string> = {},
  opts: { gaps?: boolean } = {},
): RelayProcess {
  const p = new RelayProcess(args, env);
  deferrals(t)(async () => {
    await p.stop();
    // RELAY_TEST_LOG_DIR: a relay process's output is kept there too (killed ones included).
    const dir = process.env["RELAY_TEST_LOG_DIR"];
    if (dir) {
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, `${logStem(t.name ?? "relay")}-process-${p.pid ?? "gone"}-${Date.now()}.log`), p.output());
    }
    assertCleanLogLines(p.output().split("\n"), `relay process ${args.join(" ")}`, opts.gaps);
  });
  return p;
}

/**
 * Every JSON log line a relay wrote has each key once per object (strict log parsers reject duplicates),
 * and no relay reports a gap its test did not make (`gaps: true`): a false gap is a resync that skips
 * messages, or a halt, under the policies that act on it.
 */
function assertCleanLogLines(lines: readonly string[], who: string, gaps = false, auditLoss = gaps): void {
  const bad = linesWithDuplicateKeys(lines);
  if (bad.length > 0) throw new Error(`${who} wrote ${bad.length} log lines with duplicate keys, e.g. ${bad.slice(0, 3).join(" | ")}`);
  const gap = gaps ? undefined : lines.find((l) => l.includes("messages the link had not relayed (source seq"));
  if (gap) throw new Error(`${who} reported a gap in a test that made none: ${gap}`);
  // Every test's links are audited (linkYaml sets a short audit.after): a loss the test did not make fails it.
  const loss = auditLoss ? undefined : lines.find((l) => l.includes("audit found messages missing from the destination"));
  if (loss) throw new Error(`${who}'s audit reported a loss in a test that made none: ${loss}`);
}
