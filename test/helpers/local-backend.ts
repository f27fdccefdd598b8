import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, uniqueName } from "./check.js";
import { freePort, requireBinary, trackTempDir, untrackTempDir } from "./local-process.js";
import { natsServerBin } from "./nats-version.js";
import { LocalNatsNode } from "./local-nats.js";
import { LocalRedisNode } from "./local-redis.js";
import type { NatsCluster, NatsOptions, RedisOptions, ServerBackend } from "./types.js";

/** Real nats-server (NATS_SERVER_BIN, else from PATH) / redis-server processes, each in its own temp dir. */
export class LocalBackend implements ServerBackend {
  readonly name = "local" as const;
  private readonly nats: LocalNatsNode[] = [];
  private readonly redis: LocalRedisNode[] = [];
  private readonly dirs: string[] = [];
  private natsBin: string | undefined;
  private redisBin: string | undefined;

  async startNats(opts: NatsOptions = {}): Promise<LocalNatsNode> {
    this.natsBin ??= natsServerBin(); // NATS_SERVER_BIN, else nats-server from PATH
    const name = opts.name ?? uniqueName("nats");
    const node = new LocalNatsNode({ bin: this.natsBin, name, dir: await this.tempDir(), opts });
    this.nats.push(node); // tracked before start so cleanup() covers a failed start too
    await node.start();
    return node;
  }

  /**
   * A JetStream cluster of `size` nodes (default 3). Route ports are pre-allocated because every
   * node's config must list its peers before any node starts; client/monitor ports are learned.
   */
  async startNatsCluster(
    opts: { size?: number; name?: string; domain?: string; node?: (index: number) => NatsOptions } = {},
  ): Promise<LocalCluster> {
    this.natsBin ??= natsServerBin(); // NATS_SERVER_BIN, else nats-server from PATH
    const size = opts.size ?? 3;
    const name = opts.name ?? uniqueName("C");
    const routePorts = await distinctFreePorts(size);
    const nodes: LocalNatsNode[] = [];
    // Evaluated while a node is (re)starting, so the node itself already counts as running.
    const quorumPossible = () => nodes.filter((n) => n.running).length > size / 2;
    for (let i = 0; i < size; i++) {
      const node = new LocalNatsNode({
        bin: this.natsBin,
        name: `${name}-n${i + 1}`,
        dir: await this.tempDir(),
        opts: { ...(opts.domain ? { domain: opts.domain } : {}), ...opts.node?.(i) },
        cluster: { name, port: routePorts[i]!, peerPorts: routePorts.filter((_, j) => j !== i) },
        quorumPossible,
      });
      // No single node can become healthy alone (no meta leader yet): the cluster check below decides.
      node.waitForHealthz = false;
      nodes.push(node);
      this.nats.push(node);
    }
    await Promise.all(nodes.map((n) => n.start()));
    const cluster = new LocalCluster(name, nodes);
    await cluster.waitHealthy(30_000);
    return cluster;
  }

  async startRedis(opts: RedisOptions = {}): Promise<LocalRedisNode> {
    this.redisBin ??= requireBinary("redis-server", "redis-server");
    const node = new LocalRedisNode(this.redisBin, await freePort(), await this.tempDir(), opts);
    this.redis.push(node);
    await node.start();
    return node;
  }

  /** Stops every process this backend started (paused ones are continued first) and deletes temp dirs. */
  async cleanup(): Promise<void> {
    const procs = [...this.nats, ...this.redis].map((n) => n.proc);
    // Short grace: these are throw-away servers, and a stuck one must not stall the test run.
    await Promise.all(procs.map((p) => p.stop(3_000)));
    const dirs = this.dirs.splice(0);
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true, maxRetries: 3 })));
    dirs.forEach(untrackTempDir);
  }

  private async tempDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "relay-test-"));
    this.dirs.push(dir);
    trackTempDir(dir);
    return dir;
  }
}

export class LocalCluster implements NatsCluster {
  constructor(
    readonly name: string,
    readonly nodes: readonly LocalNatsNode[],
  ) {}

  get urls(): string[] {
    return this.nodes.map((n) => n.url);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }

  /** Every running node: /healthz ok (meta leader known, assets current) and a meta leader in /jsz. */
  async waitHealthy(timeoutMs = 30_000): Promise<void> {
    try {
      await this.pollHealthy(timeoutMs);
    } catch (err) {
      const tails = await Promise.all(this.nodes.map((n) => n.proc.logTail(15)));
      throw new Error(`${(err as Error).message}${tails.join("")}`, { cause: err });
    }
  }

  private async pollHealthy(timeoutMs: number): Promise<void> {
    await check(
      async () => {
        const running = this.nodes.filter((n) => n.running);
        const results = await Promise.all(
          running.map(async (n) => {
            const health = await n.monitor("/healthz");
            const jsz = await n.monitor("/jsz");
            const leader = (jsz.body as { meta_cluster?: { leader?: string } }).meta_cluster?.leader;
            return health.status === 200 && Boolean(leader);
          }),
        );
        return running.length > 0 && results.every(Boolean);
      },
      {
        name: `cluster ${this.name}: all running nodes healthy with a meta leader`,
        timeoutMs,
        intervalMs: 100,
      },
    );
  }
}

/** freePort() closes its probe socket, so consecutive calls can return the same port; dedupe. */
async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}
