import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { check } from "./check.js";
import type { LocalProcess } from "./local-process.js";
import { freePort, requireBinary, trackTempDir, untrackTempDir } from "./local-process.js";
import { redisServerProcess } from "./local-redis.js";
import { deferrals } from "./teardown.js";
import type { HasAfter } from "./teardown.js";

/**
 * Local redis-server processes beyond the single node of LocalBackend: a Redis Cluster (masters,
 * optionally one replica each, created with `redis-cli --cluster create`) and a primary with
 * replicas (`replicaof`). Every process is one of ours (LocalProcess: tracked by PID, ended in
 * `t.after`), on free loopback ports, in its own temp dir.
 */

const run = promisify(execFile);

export interface LocalRedisServerOptions {
  readonly appendonly?: boolean;
  /** Extra `--name value` arguments. */
  readonly args?: readonly string[];
}

/** One redis-server process. */
export class LocalRedisServer {
  readonly proc: LocalProcess;

  constructor(
    bin: string,
    readonly port: number,
    readonly dir: string,
    opts: LocalRedisServerOptions,
  ) {
    this.proc = redisServerProcess(bin, port, dir, opts);
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
  get pid(): number | undefined {
    return this.proc.pid;
  }
  get running(): boolean {
    return this.proc.running;
  }
  /** A plain client of this node alone (closed when the test ends). */
  client(t: HasAfter): Redis {
    const c = new Redis(this.url, { lazyConnect: false, maxRetriesPerRequest: 1 });
    c.on("error", () => undefined); // a test may kill the node under it
    deferrals(t)(() => c.disconnect());
    return c;
  }
}

/** Starts redis-servers for one test; all of them are stopped and their dirs removed in `t.after`. */
class ServerSet {
  readonly servers: LocalRedisServer[] = [];
  private readonly dirs: string[] = [];
  private readonly bin = requireBinary("redis-server", "redis-server");

  constructor(t: HasAfter) {
    deferrals(t)(() => this.cleanup());
  }

  async start(opts: LocalRedisServerOptions & { port?: number } = {}): Promise<LocalRedisServer> {
    const dir = await mkdtemp(join(tmpdir(), "relay-test-redis-"));
    this.dirs.push(dir);
    trackTempDir(dir);
    const server = new LocalRedisServer(this.bin, opts.port ?? (await freePort()), dir, opts);
    this.servers.push(server); // tracked before start, so a failed start is cleaned up too
    await server.proc.start();
    return server;
  }

  private async cleanup(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.proc.stop(3_000)));
    const dirs = this.dirs.splice(0);
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true, maxRetries: 3 })));
    dirs.forEach(untrackTempDir);
  }
}

export interface LocalRedisCluster {
  /** Every node, masters first (as created: replicas may be promoted later). */
  readonly nodes: readonly LocalRedisServer[];
  /** "127.0.0.1:port" of every node, for `guard.redis.cluster.nodes`. */
  readonly seeds: string[];
  /** The nodes that are masters now (from CLUSTER NODES of a running node). */
  masters(): Promise<LocalRedisServer[]>;
  /** The node serving `slot` now. */
  ownerOf(slot: number): Promise<LocalRedisServer>;
  /** Waits until every running node reports cluster_state:ok and a master for every slot. */
  waitHealthy(timeoutMs?: number): Promise<void>;
}

/**
 * A Redis Cluster of `masters` masters (default 3) and `replicas` replicas per master (default 0),
 * with a short cluster-node-timeout so that a killed master's replica takes over within seconds.
 */
export async function startRedisCluster(
  t: HasAfter,
  opts: { masters?: number; replicas?: number; nodeTimeoutMs?: number; appendonly?: boolean } = {},
): Promise<LocalRedisCluster> {
  const set = new ServerSet(t);
  const count = (opts.masters ?? 3) * (1 + (opts.replicas ?? 0));
  const nodes: LocalRedisServer[] = [];
  for (let i = 0; i < count; i++) {
    // cluster-port: the bus port, which would otherwise be port + 10000 (maybe taken, maybe > 65535).
    // prettier-ignore
    const args = [
      "--cluster-enabled", "yes",
      "--cluster-config-file", "nodes.conf",
      "--cluster-node-timeout", String(opts.nodeTimeoutMs ?? 1_000),
      "--cluster-port", String(await freePort()),
      // A replica that lost its master for a while may still take over (tests kill masters).
      "--cluster-replica-validity-factor", "0",
      "--appendfsync", "always",
    ];
    nodes.push(await set.start({ appendonly: opts.appendonly ?? true, args }));
  }
  const cli = requireBinary("redis-cli", "redis-tools");
  // prettier-ignore
  await run(cli, ["--cluster", "create", ...nodes.map((n) => n.address), "--cluster-replicas", String(opts.replicas ?? 0), "--cluster-yes"], { timeout: 60_000 });
  const admin = new Map<number, Redis>();
  const clientOf = (n: LocalRedisServer): Redis => {
    let c = admin.get(n.port);
    if (!c) {
      c = new Redis(n.url, {
        maxRetriesPerRequest: 1,
        retryStrategy: () => 200,
        enableOfflineQueue: false,
        lazyConnect: false,
      });
      c.on("error", () => undefined);
      admin.set(n.port, c);
    }
    return c;
  };
  deferrals(t)(() => admin.forEach((c) => c.disconnect()));
  const running = () => nodes.filter((n) => n.running);

  /** CLUSTER NODES of a running node: per node its port, flags and slot ranges. */
  const topology = async () => {
    const text = String(await clientOf(running()[0]!).call("CLUSTER", "NODES"));
    return text
      .trim()
      .split("\n")
      .map((line) => {
        const [, addr = "", flags = "", , , , , , ...slots] = line.split(" ");
        const port = Number(/:(\d+)@/.exec(addr)?.[1]);
        const ranges = slots
          .filter((s) => !s.startsWith("["))
          .map((s) => s.split("-").map(Number) as [number, number?]);
        return { port, master: flags.includes("master") && !flags.includes("fail"), ranges };
      });
  };
  const byPort = (port: number): LocalRedisServer => {
    const n = nodes.find((x) => x.port === port);
    if (!n) throw new Error(`no local node on port ${port}`);
    return n;
  };
  const cluster: LocalRedisCluster = {
    nodes,
    seeds: nodes.map((n) => n.address),
    async masters() {
      return (await topology()).filter((n) => n.master && n.ranges.length > 0).map((n) => byPort(n.port));
    },
    async ownerOf(slot) {
      const owner = (await topology()).find(
        (n) => n.master && n.ranges.some(([a, b = a]) => slot >= a && slot <= b),
      );
      if (!owner) throw new Error(`no master serves slot ${slot}`);
      return byPort(owner.port);
    },
    async waitHealthy(timeoutMs = 30_000) {
      await check(
        async () => {
          for (const n of running()) {
            const info = String(await clientOf(n).call("CLUSTER", "INFO"));
            if (!/cluster_state:ok/.test(info) || !/cluster_slots_ok:16384/.test(info)) return false;
          }
          return true;
        },
        {
          name: "every Redis Cluster node reports cluster_state:ok with all 16384 slots served",
          timeoutMs,
          intervalMs: 200,
        },
      );
      if ((opts.replicas ?? 0) === 0) return;
      await check(
        async () => {
          for (const n of running()) {
            const info = String(await clientOf(n).call("INFO", "replication"));
            if (/role:slave/.test(info) && !/master_link_status:up/.test(info)) return false;
          }
          return true;
        },
        { name: "every replica is in sync with its master", timeoutMs, intervalMs: 200 },
      );
    },
  };
  await cluster.waitHealthy(60_000);
  return cluster;
}

/** A primary and `replicas` replicas of it (`replicaof`), in sync. */
export async function startRedisReplicated(
  t: HasAfter,
  opts: { replicas?: number; appendonly?: boolean } = {},
): Promise<{ primary: LocalRedisServer; replicas: LocalRedisServer[] }> {
  const set = new ServerSet(t);
  const primary = await set.start({ appendonly: opts.appendonly ?? true });
  const replicas: LocalRedisServer[] = [];
  for (let i = 0; i < (opts.replicas ?? 1); i++) {
    replicas.push(
      await set.start({
        appendonly: opts.appendonly ?? true,
        args: ["--replicaof", "127.0.0.1", String(primary.port)],
      }),
    );
  }
  const admin = primary.client(t);
  await check(
    async () => new RegExp(`connected_slaves:${replicas.length}`).test(await admin.info("replication")),
    {
      name: `${replicas.length} replica(s) connected to redis-server :${primary.port}`,
      timeoutMs: 20_000,
    },
  );
  for (const r of replicas) {
    const c = r.client(t);
    await check(async () => /master_link_status:up/.test(await c.info("replication")), {
      name: `replica :${r.port} in sync`,
      timeoutMs: 20_000,
    });
  }
  return { primary, replicas };
}
