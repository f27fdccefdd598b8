import type { GenericContainer, StartedNetwork, StartedTestContainer } from "testcontainers";
import { check, uniqueName } from "./check.js";
import { freePort } from "./local-process.js";
import { redisPing } from "./local-redis.js";
import { renderNatsConfig } from "./nats-config.js";
import type {
  ManagedProcess,
  NatsCluster,
  NatsNode,
  NatsOptions,
  RedisNode,
  RedisOptions,
  ServerBackend,
} from "./types.js";

/*
 * Testcontainers backend (RELAY_TEST_BACKEND=containers). Untested here: this machine has no
 * Docker engine, so it is only typechecked. testcontainers is imported lazily because loading it
 * costs ~0.7 s, which the default local backend should not pay.
 *
 * Host ports are pre-allocated and bound explicitly: Docker re-picks ephemeral host ports on a
 * stop/start, and restart() promises the same ports. This assumes the engine runs on this host.
 */
const tc = () => import("testcontainers");

class ContainerProcess implements ManagedProcess {
  private up = true;
  private paused = false;

  constructor(
    readonly container: StartedTestContainer,
    private readonly ready: () => Promise<unknown>,
  ) {}

  get running(): boolean {
    return this.up;
  }

  private async docker() {
    const client = await (await tc()).getContainerRuntimeClient();
    return { client, handle: client.container.getById(this.container.getId()) };
  }

  async stop(timeoutSec = 10): Promise<void> {
    if (!this.up) return;
    await this.resume();
    const { client, handle } = await this.docker();
    await client.container.stop(handle, { timeout: timeoutSec });
    this.up = false;
  }
  async kill(): Promise<void> {
    if (!this.up) return;
    const { client, handle } = await this.docker();
    await handle.kill(); // SIGKILL; works on a paused container too
    await check(async () => !(await client.container.inspect(handle)).State.Running, {
      name: `container ${this.container.getName()} exited after kill`,
    });
    this.up = false;
    this.paused = false;
  }
  async restart(): Promise<void> {
    await this.stop();
    const { client, handle } = await this.docker();
    await client.container.start(handle);
    this.up = true;
    await this.ready();
  }
  /** docker pause (cgroup freezer): the container-level equivalent of SIGSTOP. */
  async pause(): Promise<void> {
    if (!this.up || this.paused) return;
    await (await this.docker()).handle.pause();
    this.paused = true;
  }
  async resume(): Promise<void> {
    if (!this.paused) return;
    await (await this.docker()).handle.unpause();
    this.paused = false;
  }
  /** Final teardown: resume if paused, then stop and remove the container. */
  async remove(): Promise<void> {
    await this.resume().catch(() => undefined);
    await this.container.stop({ timeout: 3, remove: true });
  }
}

type Node = NatsNode & { readonly leafPort?: number; readonly proc: ContainerProcess };

export class ContainersBackend implements ServerBackend {
  readonly name = "containers" as const;
  private readonly procs: ContainerProcess[] = [];
  private readonly networks: StartedNetwork[] = [];

  async startNats(opts: NatsOptions = {}): Promise<Node> {
    return this.natsContainer(opts.name ?? uniqueName("nats"), opts, { healthz: "/healthz" });
  }

  async startNatsCluster(opts: { size?: number; name?: string; domain?: string } = {}): Promise<NatsCluster> {
    const size = opts.size ?? 3;
    const name = opts.name ?? uniqueName("C");
    const network = await new (await tc()).Network().start();
    this.networks.push(network);
    const names = Array.from({ length: size }, (_, i) => `${name}-n${i + 1}`);
    const nodes = await Promise.all(
      names.map((n) =>
        this.natsContainer(n, opts.domain ? { domain: opts.domain } : {}, {
          // Individually a node has no meta leader yet; health is judged on the whole cluster below.
          healthz: "/healthz?js-enabled-only=true",
          cluster: {
            name,
            routes: names.filter((p) => p !== n).map((p) => `nats-route://${p}:6222`),
            network,
          },
        }),
      ),
    );
    const healthy = async (): Promise<void> => {
      await check(
        async () => {
          const codes = await Promise.all(nodes.map((n) => httpStatus(n, "/healthz")));
          return codes.every((c) => c === 200);
        },
        { name: `cluster ${name}: every node /healthz 200`, timeoutMs: 60_000, intervalMs: 200 },
      );
    };
    await healthy();
    return {
      name,
      nodes,
      urls: nodes.map((n) => n.url),
      stop: async () => void (await Promise.all(nodes.map((n) => n.stop()))),
      waitHealthy: healthy,
    };
  }

  private async natsContainer(
    name: string,
    opts: NatsOptions,
    extra: { healthz: string; cluster?: { name: string; routes: string[]; network: StartedNetwork } },
  ): Promise<Node> {
    const { GenericContainer, Wait } = await tc();
    const [port, monitorPort, leafPort] = [await freePort(), await freePort(), await freePort()];
    const config = renderNatsConfig(
      {
        serverName: name,
        listen: "0.0.0.0:4222",
        http: "0.0.0.0:8222",
        storeDir: "/data",
        leafListen: opts.leafListen ? "0.0.0.0:7422" : undefined,
        tls: opts.tls && {
          certFile: "/certs/cert.pem",
          keyFile: "/certs/key.pem",
          caFile: opts.tls.caFile && "/certs/ca.pem",
        },
        cluster: extra.cluster && {
          name: extra.cluster.name,
          listen: "0.0.0.0:6222",
          routes: extra.cluster.routes,
        },
      },
      // Leaf remotes name host ports; inside a container 127.0.0.1 is the container itself.
      {
        ...opts,
        leafRemotes: opts.leafRemotes?.map((u) =>
          u.replace(/127\.0\.0\.1|localhost/, "host.docker.internal"),
        ),
      },
    );
    let c: GenericContainer = new GenericContainer("nats:2.10-alpine")
      .withCommand(["nats-server", "-c", "/etc/nats/relay.conf"])
      .withCopyContentToContainer([{ content: config, target: "/etc/nats/relay.conf" }])
      .withExposedPorts({ container: 4222, host: port }, { container: 8222, host: monitorPort })
      .withExtraHosts([{ host: "host.docker.internal", ipAddress: "host-gateway" }])
      .withWaitStrategy(Wait.forLogMessage(/Server is ready/));
    if (opts.leafListen) c = c.withExposedPorts({ container: 7422, host: leafPort });
    if (extra.cluster) c = c.withNetwork(extra.cluster.network).withNetworkAliases(name);
    if (opts.tls) {
      const files = [
        { source: opts.tls.certFile, target: "/certs/cert.pem" },
        { source: opts.tls.keyFile, target: "/certs/key.pem" },
      ];
      if (opts.tls.caFile) files.push({ source: opts.tls.caFile, target: "/certs/ca.pem" });
      c = c.withCopyFilesToContainer(files);
    }
    const started = await c.start();
    const host = started.getHost();
    const node = {
      name,
      url: `${opts.tls ? "tls" : "nats"}://${host}:${port}`,
      port,
      monitorPort,
      host,
      storeDir: "/data/jetstream", // a path inside the container, not on this host
      ...(opts.leafListen ? { leafPort } : {}),
    };
    const ready = () =>
      check(async () => (await httpStatus(node, extra.healthz)) === 200, {
        name: `${name} ${extra.healthz} 200`,
        timeoutMs: 30_000,
      });
    const proc = new ContainerProcess(started, ready);
    this.procs.push(proc);
    await ready();
    return withProc(node, proc);
  }

  async startRedis(opts: RedisOptions = {}): Promise<RedisNode & { proc: ContainerProcess }> {
    const { GenericContainer, Wait } = await tc();
    const port = await freePort();
    const args = ["redis-server", "--save", "", "--appendonly", opts.appendonly ? "yes" : "no", ...(opts.appendfsync ? ["--appendfsync", opts.appendfsync] : [])];
    if (opts.password) args.push("--requirepass", opts.password);
    const started = await new GenericContainer("redis:7-alpine")
      .withCommand(args)
      .withExposedPorts({ container: 6379, host: port })
      .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/))
      .start();
    const host = started.getHost();
    const ping = () =>
      check(() => redisPing(port, opts.password, host), { name: `redis ${host}:${port} PONG` });
    const proc = new ContainerProcess(started, ping);
    this.procs.push(proc);
    await ping();
    const auth = opts.password ? `:${encodeURIComponent(opts.password)}@` : "";
    return withProc({ url: `redis://${auth}${host}:${port}`, port }, proc);
  }

  async cleanup(): Promise<void> {
    const procs = this.procs.splice(0);
    await Promise.allSettled(procs.map((p) => p.remove()));
    const networks = this.networks.splice(0);
    await Promise.allSettled(networks.map((n) => n.stop()));
  }
}

/** Adds the ManagedProcess methods of `proc` to `base`; `running` stays a live getter. */
function withProc<T extends object>(
  base: T,
  proc: ContainerProcess,
): T & ManagedProcess & { proc: ContainerProcess } {
  const methods: ManagedProcess & { proc: ContainerProcess } = {
    proc,
    get running() {
      return proc.running;
    },
    stop: () => proc.stop(),
    kill: () => proc.kill(),
    restart: () => proc.restart(),
    pause: () => proc.pause(),
    resume: () => proc.resume(),
  };
  // defineProperties, not Object.assign, which would freeze `running` at its current value.
  return Object.defineProperties(base, Object.getOwnPropertyDescriptors(methods)) as T & typeof methods;
}

async function httpStatus(n: { host?: string; monitorPort: number }, path: string): Promise<number> {
  const res = await fetch(`http://${n.host ?? "127.0.0.1"}:${n.monitorPort}${path}`, {
    signal: AbortSignal.timeout(2_000),
  });
  await res.arrayBuffer();
  return res.status;
}
