import { readFileSync } from "node:fs";
import { Cluster, Redis } from "ioredis";
import type { ClusterOptions, RedisOptions } from "ioredis";
import type { RedisGuardConnection, TlsConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";

/**
 * Builds the guard's ioredis client for each kind of deployment (standalone URL, Sentinel, Cluster)
 * with one failure policy, and checks whether the server persists what the guard writes.
 *
 * Failure policy: the guard must answer fast, because the link pauses and retries on
 * GUARD_UNAVAILABLE. So no offline queue (a command while disconnected fails at once), a command
 * timeout, and reconnection forever with capped backoff in the background. `maxRetriesPerRequest: 1`
 * lets a command that was on the wire when the connection dropped be re-sent once on the next
 * connection (the claim script recognises its own token for that case) but fails it if the
 * reconnection fails too.
 */

export type GuardRedisClient = Redis | Cluster;
export type GuardPersistence = "aof" | "none" | "unknown";

export interface RedisTuning {
  /** A command without a reply after this long fails (ms). */
  readonly commandTimeoutMs: number;
  /** TCP/TLS connect timeout (ms). */
  readonly connectTimeoutMs: number;
  /** start() gives up waiting for the first ready connection after this long (ms). */
  readonly startTimeoutMs: number;
  /** Reconnect backoff: 50 ms doubling up to this (ms). */
  readonly maxBackoffMs: number;
}

export const DEFAULT_REDIS_TUNING: RedisTuning = {
  commandTimeoutMs: 2000,
  connectTimeoutMs: 2000,
  startTimeoutMs: 5000,
  maxBackoffMs: 2000,
};

interface HostPort {
  host: string;
  port: number;
}

/** "host:port", "[::1]:port", "redis://user:pw@host:port" or "host" → host and port only. */
function parseNode(node: string, defaultPort: number): HostPort {
  const url = new URL(node.includes("://") ? node : `redis://${node}`);
  return { host: url.hostname.replace(/^\[|\]$/g, ""), port: url.port ? Number(url.port) : defaultPort };
}

/** For messages: an address that does not parse is shown as "?" (its text may hold a password). */
function hostPort(node: string, defaultPort: number): string {
  try {
    const n = parseNode(node, defaultPort);
    return n.host.includes(":") ? `[${n.host}]:${n.port}` : `${n.host}:${n.port}`;
  } catch {
    return "?";
  }
}

/**
 * What the guard talks to, for messages and logs. Built from hosts and ports only, so a password
 * in a URL can never reach an error message.
 */
export function describeRedis(conn: RedisGuardConnection): string {
  if (conn.cluster) return `redis cluster ${conn.cluster.nodes.map((n) => hostPort(n, 6379)).join(",")}`;
  if (conn.sentinel) {
    const nodes = conn.sentinel.nodes.map((n) => hostPort(n, 26379)).join(",");
    return `redis sentinel master ${conn.sentinel.name} via ${nodes}`;
  }
  if (conn.url) return `redis ${hostPort(conn.url, 6379)}`;
  return "redis (no address)";
}

/** Every secret the configuration carries, for scrubbing error text. */
export function secretsOf(conn: RedisGuardConnection): string[] {
  const secrets = conn.password ? [conn.password] : [];
  if (conn.sentinel?.password) secrets.push(conn.sentinel.password);
  for (const node of [conn.url ?? "", ...(conn.sentinel?.nodes ?? []), ...(conn.cluster?.nodes ?? [])]) {
    if (!node.includes("://")) continue;
    try {
      const u = new URL(node);
      if (u.password) secrets.push(u.password, decodeURIComponent(u.password));
    } catch {
      // an unparsable URL fails at connect; nothing to scrub
    }
  }
  return secrets.filter((s) => s.length > 0);
}

/**
 * A copy of `err` safe to log: message scrubbed of secrets and of URL credentials, `name` and
 * `code` kept. The ioredis original is dropped on purpose: its `command.args` can hold the AUTH
 * password, and pino would serialise it as the cause.
 */
export function sanitizeError(err: unknown, secrets: readonly string[]): Error {
  let message = err instanceof Error ? err.message : String(err);
  message = message.replace(/(\w+:\/\/)[^@/\s]*@/g, "$1***@");
  for (const s of secrets) message = message.split(s).join("***");
  const copy = new Error(message);
  if (err instanceof Error) {
    copy.name = err.name;
    // Keep the original frames (where it failed), not the first line (the unscrubbed message).
    const frames = err.stack?.split("\n").filter((l) => /^\s+at /.test(l)) ?? [];
    copy.stack = [`${err.name}: ${message}`, ...frames].join("\n");
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string") Object.assign(copy, { code });
  return copy;
}

function readTls(tls: TlsConfig | undefined): RedisOptions["tls"] {
  if (!tls) return undefined;
  return {
    ...(tls.caFile ? { ca: readFileSync(tls.caFile) } : {}),
    ...(tls.certFile ? { cert: readFileSync(tls.certFile) } : {}),
    ...(tls.keyFile ? { key: readFileSync(tls.keyFile) } : {}),
  };
}

/** Creates the client, not connected (`lazyConnect`); throws when a TLS file cannot be read. */
export function createRedisClient(
  conn: RedisGuardConnection,
  tuning: RedisTuning,
  clientName: string,
): GuardRedisClient {
  const backoff = (attempt: number): number =>
    Math.min(50 * 2 ** Math.min(attempt - 1, 16), tuning.maxBackoffMs);
  const tls = readTls(conn.tls);
  const common: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: true,
    commandTimeout: tuning.commandTimeoutMs,
    connectTimeout: tuning.connectTimeoutMs,
    retryStrategy: backoff,
    // CLIENT SETNAME lets an operator find the relay in CLIENT LIST; SETINFO is only noise.
    connectionName: clientName.replace(/[^A-Za-z0-9._:-]/g, "_"),
    disableClientInfo: true,
    // The data nodes' ACL user and password (Redis 6+); a URL's own user/password apply otherwise.
    ...(conn.username !== undefined ? { username: conn.username } : {}),
    ...(conn.password !== undefined ? { password: conn.password } : {}),
    ...(tls ? { tls } : {}),
  };
  if (conn.cluster) {
    // The cluster owns reconnection, queueing and connecting of its node connections (ioredis
    // overrides these node options anyway); the failure policy is set on the cluster itself.
    const { retryStrategy: _r, enableOfflineQueue: _q, lazyConnect: _l, ...nodeOptions } = common;
    const options: ClusterOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      clusterRetryStrategy: backoff,
      scaleReads: "master",
      slotsRefreshTimeout: tuning.connectTimeoutMs,
      redisOptions: nodeOptions,
    };
    return new Cluster(
      conn.cluster.nodes.map((n) => parseNode(n, 6379)),
      options,
    );
  }
  if (conn.sentinel) {
    // `username`/`password` are the data nodes'; the Sentinels have their own (requirepass or an ACL
    // user of their own), or none.
    const sentinel = conn.sentinel;
    return new Redis({
      ...common,
      sentinels: sentinel.nodes.map((n) => parseNode(n, 26379)),
      name: sentinel.name,
      ...(sentinel.username !== undefined ? { sentinelUsername: sentinel.username } : {}),
      ...(sentinel.password !== undefined ? { sentinelPassword: sentinel.password } : {}),
      role: "master",
      sentinelRetryStrategy: backoff,
      // Subscribes to +switch-master so a failover is followed without waiting for an error.
      failoverDetector: true,
      ...(tls ? { enableTLSForSentinelMode: true, sentinelTLS: tls } : {}),
    });
  }
  if (!conn.url) throw new Error("redis guard: one of url, sentinel or cluster must be set");
  return new Redis(conn.url, common);
}

/**
 * Waits until the client is ready; connects it when it is not connecting already (a retried
 * start() finds it reconnecting in the background). Rejects on the first error or timeout.
 */
export function connectClient(client: GuardRedisClient, timeoutMs: number): Promise<void> {
  if (client.status === "ready") return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(`not ready after ${timeoutMs} ms`)), timeoutMs);
    const onReady = (): void => finish();
    const onError = (err: unknown): void => finish(err);
    function finish(err?: unknown): void {
      clearTimeout(timer);
      client.off("ready", onReady);
      client.off("error", onError);
      if (err === undefined) resolve();
      else reject(err);
    }
    client.on("ready", onReady);
    client.on("error", onError);
    if (client.status === "wait" || client.status === "end") {
      // Failures arrive as "error" events too (or the timeout fires); this promise adds nothing.
      client.connect().catch(() => undefined);
    }
  });
}

export interface PersistenceReport {
  readonly persistence: GuardPersistence;
  /** appendfsync of the first data node, when known. */
  readonly appendfsync?: string;
  /** Why the result is "unknown" (the server's error text). */
  readonly reason?: string;
}

/**
 * CONFIG GET append* on every master. "none" when any master runs without AOF: its versions would
 * roll back on restart and stale messages would be relayed again. "unknown" when CONFIG is refused
 * (managed Redis renames or blocks it). Connection failures are thrown, not reported as unknown.
 */
export async function checkPersistence(client: GuardRedisClient): Promise<PersistenceReport> {
  const nodes: Redis[] = client instanceof Cluster ? client.nodes("master") : [client];
  const reports: PersistenceReport[] = [];
  for (const node of nodes) {
    let reply: unknown;
    try {
      // One pattern rather than two names: CONFIG GET takes a single parameter before Redis 7.
      reply = await node.call("CONFIG", "GET", "append*");
    } catch (err) {
      if ((err as Error | null)?.name !== "ReplyError") throw err;
      reports.push({ persistence: "unknown", reason: (err as Error).message });
      continue;
    }
    const pairs = Array.isArray(reply) ? (reply as unknown[]).map(String) : [];
    const get = (name: string): string | undefined => {
      const i = pairs.findIndex((v, idx) => idx % 2 === 0 && v === name);
      return i >= 0 ? pairs[i + 1] : undefined;
    };
    const appendonly = get("appendonly");
    const appendfsync = get("appendfsync");
    const persistence: GuardPersistence =
      appendonly === "yes" ? "aof" : appendonly === "no" ? "none" : "unknown";
    reports.push({
      persistence,
      ...(appendfsync !== undefined ? { appendfsync } : {}),
      ...(persistence === "unknown" ? { reason: "CONFIG GET returned no appendonly value" } : {}),
    });
  }
  return (
    reports.find((r) => r.persistence === "none") ??
    reports.find((r) => r.persistence === "unknown") ??
    reports[0] ?? { persistence: "unknown", reason: "no master node" }
  );
}

/** The oldest Redis the guard's scripts run on: the commit script uses `GETDEL` (6.2). */
export const MIN_REDIS_VERSION = [6, 2] as const;

/** Whether a `redis_version` (x.y.z) is at least MIN_REDIS_VERSION. */
export function supportsGuard(version: string): boolean {
  const [major = 0, minor = 0] = version.split(".").map(Number);
  const [needMajor, needMinor] = MIN_REDIS_VERSION;
  return major > needMajor || (major === needMajor && minor >= needMinor);
}

/**
 * The `redis_version` of every master, compared with MIN_REDIS_VERSION. Returns the versions seen;
 * throws GUARD_UNSUPPORTED naming the first one that is too old. A server that hides INFO passes
 * (its version cannot be known; a script error would then name the problem).
 */
export async function checkRedisVersion(client: GuardRedisClient, target: string): Promise<string[]> {
  const nodes: Redis[] = client instanceof Cluster ? client.nodes("master") : [client];
  const versions: string[] = [];
  for (const node of nodes) {
    let info: string;
    try {
      info = String(await node.call("INFO", "server"));
    } catch (err) {
      if ((err as Error | null)?.name !== "ReplyError") throw err;
      continue;
    }
    const version = /^redis_version:([\d.]+)/m.exec(info)?.[1];
    if (!version) continue;
    versions.push(version);
    if (!supportsGuard(version)) {
      throw new RelayError(
        ErrorCodes.GUARD_UNSUPPORTED,
        `${target}: Redis ${version} is too old for the guard (it needs ${MIN_REDIS_VERSION.join(".")} or later)`,
      );
    }
  }
  return versions;
}
