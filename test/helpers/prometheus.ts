/**
 * A real Prometheus server (Debian's `prometheus` package, 2.42 here) scraping a relay, for tests
 * that check the shipped rules against what the relay really exports.
 *
 * Without the binary the test FAILS (it does not skip): a rule nobody evaluated is not tested.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { check } from "./check.js";
import { findBinary, freePort, LocalProcess, trackTempDir, untrackTempDir } from "./local-process.js";

export const PROMETHEUS_MISSING =
  "prometheus not found on PATH nor in .tools/prometheus: run SETUP_PROMTOOL=1 bash scripts/setup.sh (it unpacks Debian's prometheus package there)";

export interface PrometheusOptions {
  /** `host:port` of every target of the `jetstream-relay` job (a relay's http URL works too). */
  targets: readonly string[];
  /** Absolute paths of rule files, e.g. deploy/prometheus/alerts.yml. */
  ruleFiles?: readonly string[];
  /** Scrape and rule evaluation interval (default "1s"). */
  interval?: string;
  /** Budget for /-/ready (default 20 s). */
  readyTimeoutMs?: number;
}

/** One element of an instant vector, value parsed (NaN and ±Inf included). */
export interface Sample {
  metric: Record<string, string>;
  value: number;
}

interface ApiResponse<T> {
  status: "success" | "error";
  data?: T;
  errorType?: string;
  error?: string;
}

export interface RuleState {
  name: string;
  query: string;
  type: "recording" | "alerting";
  health: string;
  lastError?: string;
  state?: string;
  duration?: number;
  alerts?: AlertState[];
}
export interface AlertState {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: "pending" | "firing" | "inactive";
  activeAt?: string;
  value: string;
}

export interface Prometheus {
  /** e.g. http://127.0.0.1:40123 */
  readonly url: string;
  readonly pid: number | undefined;
  readonly dir: string;
  /** Instant query at "now"; fails unless the result is a vector. */
  query(expr: string): Promise<Sample[]>;
  /** GET /api/v1/rules: every rule group with each rule's health, last error and (alerts) state. */
  rules(): Promise<{ name: string; file: string; rules: RuleState[] }[]>;
  /** GET /api/v1/alerts: active (pending or firing) alerts. */
  alerts(): Promise<AlertState[]>;
  /** GET /api/v1/targets, active targets only. */
  targets(): Promise<
    { labels: Record<string, string>; health: string; lastError: string; scrapeUrl: string }[]
  >;
  /** Last lines of Prometheus's own log, for failure messages. */
  logTail(lines?: number): Promise<string>;
  /** SIGTERM, SIGKILL after `graceMs`; idempotent. Also runs when the test ends. */
  stop(graceMs?: number): Promise<void>;
}

/** Full path of the prometheus binary; throws (never skips) with the install command when missing. */
export function requirePrometheus(): string {
  const bin = findBinary("prometheus");
  if (!bin) throw new Error(PROMETHEUS_MISSING);
  return bin;
}

/** `http://127.0.0.1:1234/x` or `127.0.0.1:1234` -> `127.0.0.1:1234`. */
function hostPort(target: string): string {
  return /^[a-z]+:\/\//i.test(target) ? new URL(target).host : target;
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  const body = (await res.json()) as ApiResponse<T>;
  if (body.status !== "success" || body.data === undefined) {
    throw new Error(`GET ${url}: HTTP ${res.status} ${body.errorType ?? ""}: ${body.error ?? "no data"}`);
  }
  return body.data;
}

/**
 * Starts Prometheus in its own temp dir (config, TSDB, log) on a free 127.0.0.1 port, waits for
 * /-/ready and registers `stop()` (plus deleting the dir) on `t.after`. The process is tracked by
 * LocalProcess, so only the PID spawned here is ever signalled, even if the test file crashes.
 */
export async function startPrometheus(
  t: { after(fn: () => unknown): void },
  opts: PrometheusOptions,
): Promise<Prometheus> {
  const bin = requirePrometheus();
  const interval = opts.interval ?? "1s";
  const dir = await mkdtemp(join(tmpdir(), "relay-prometheus-"));
  trackTempDir(dir);
  const configFile = join(dir, "prometheus.yml");
  await writeFile(
    configFile,
    stringify({
      global: { scrape_interval: interval, scrape_timeout: interval, evaluation_interval: interval },
      rule_files: [...(opts.ruleFiles ?? [])],
      scrape_configs: [
        {
          job_name: "jetstream-relay",
          metrics_path: "/metrics",
          static_configs: [{ targets: opts.targets.map(hostPort) }],
        },
      ],
    }),
  );

  let port = 0;
  const proc = new LocalProcess({
    label: "prometheus",
    command: bin,
    args: () => [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--web.enable-lifecycle",
      "--log.level=info",
    ],
    logFile: join(dir, "prometheus.log"),
    ready: async (_proc, signal) => {
      await check(
        async () =>
          (await fetch(`http://127.0.0.1:${port}/-/ready`, { signal: AbortSignal.timeout(2_000) })).ok,
        {
          name: `prometheus on 127.0.0.1:${port} answers /-/ready`,
          timeoutMs: opts.readyTimeoutMs ?? 20_000,
          intervalMs: 100,
          signal,
        },
      );
    },
  });

  let stopped = false;
  const stop = async (graceMs = 5_000): Promise<void> => {
    await proc.stop(graceMs);
    if (stopped) return;
    stopped = true;
    await rm(dir, { recursive: true, force: true, maxRetries: 3 });
    untrackTempDir(dir);
  };
  t.after(() => stop());

  // freePort() can lose a race with another process binding the port before Prometheus does; that
  // shows up as an exit during startup, so retry on a new port a couple of times.
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    try {
      await proc.start();
      break;
    } catch (err) {
      const inUse = err instanceof Error && /address already in use/.test(err.message);
      if (!inUse || attempt >= 3) throw err;
    }
  }

  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    get pid() {
      return proc.pid;
    },
    dir,
    async query(expr) {
      const data = await getJson<{
        resultType: string;
        result: { metric: Record<string, string>; value: [number, string] }[];
      }>(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      if (data.resultType !== "vector")
        throw new Error(`query ${expr}: expected a vector, got ${data.resultType}`);
      return data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    async rules() {
      return (
        await getJson<{ groups: { name: string; file: string; rules: RuleState[] }[] }>(`${url}/api/v1/rules`)
      ).groups;
    },
    async alerts() {
      return (await getJson<{ alerts: AlertState[] }>(`${url}/api/v1/alerts`)).alerts;
    },
    async targets() {
      return (
        await getJson<{
          activeTargets: {
            labels: Record<string, string>;
            health: string;
            lastError: string;
            scrapeUrl: string;
          }[];
        }>(`${url}/api/v1/targets?state=active`)
      ).activeTargets;
    },
    logTail: (lines) => proc.logTail(lines),
    stop,
  };
}
