import { readFile, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { check } from "./check.js";
import { LocalProcess } from "./local-process.js";
import { renderNatsConfig } from "./nats-config.js";
import type { NatsNode, NatsOptions } from "./types.js";

export interface LocalNatsInit {
  bin: string;
  name: string;
  /** Private temp dir: config, log, ports file and JetStream store live here. */
  dir: string;
  opts: NatsOptions;
  /** Cluster membership; the route port must be fixed up front so peers can list it. */
  cluster?: { name: string; port: number; peerPorts: number[] };
  /**
   * Whether a JetStream quorum can exist once this node is up (cluster nodes only). Decides if
   * (re)start waits for the full /healthz (meta leader known, assets current) or only for
   * JetStream being enabled, so restarting nodes one by one after a full outage cannot hang.
   */
  quorumPossible?: () => boolean;
  readyTimeoutMs?: number;
}

/** `ports_file_dir` only reports client/monitor/cluster ports in 2.9; the leafnode port is read from /varz. */
interface PortsFile {
  nats?: string[];
  monitoring?: string[];
}

/**
 * One nats-server process. First start binds client, monitor and leafnode ports to -1 (the
 * kernel picks), learns them, then rewrites the config with the concrete ports so restart() comes
 * back on the same addresses with the same store dir, as a real server restart would.
 */
export class LocalNatsNode implements NatsNode {
  readonly name: string;
  readonly storeDir: string;
  readonly configFile: string;
  readonly proc: LocalProcess;
  port = -1;
  monitorPort = -1;
  leafPort: number | undefined;
  /** Readiness of the very first start of a cluster node is judged by the cluster as a whole. */
  waitForHealthz = true;

  constructor(private readonly init: LocalNatsInit) {
    this.name = init.name;
    this.storeDir = join(init.dir, "jetstream");
    this.configFile = join(init.dir, "nats.conf");
    this.proc = new LocalProcess({
      label: `nats-server ${init.name}`,
      command: init.bin,
      args: () => ["-c", this.configFile],
      logFile: join(init.dir, "nats-server.log"),
      ready: (proc, signal) => this.ready(proc, signal),
    });
  }

  get url(): string {
    return `${this.init.opts.tls ? "tls" : "nats"}://127.0.0.1:${this.port}`;
  }
  get monitorUrl(): string {
    return `http://127.0.0.1:${this.monitorPort}`;
  }
  get running(): boolean {
    return this.proc.running;
  }
  get pid(): number | undefined {
    return this.proc.pid;
  }

  async start(): Promise<void> {
    await this.writeConfig();
    await this.proc.start();
  }
  stop(): Promise<void> {
    return this.proc.stop();
  }
  kill(): Promise<void> {
    return this.proc.kill();
  }
  pause(): Promise<void> {
    return this.proc.pause();
  }
  resume(): Promise<void> {
    return this.proc.resume();
  }
  async restart(): Promise<void> {
    this.waitForHealthz = true;
    await this.proc.restart();
  }

  /** GET a monitoring endpoint; resolves with status and parsed JSON body (or undefined). */
  async monitor(path: string): Promise<{ status: number; body: unknown }> {
    const res = await fetch(`${this.monitorUrl}${path}`, { signal: AbortSignal.timeout(2_000) });
    const text = await res.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    return { status: res.status, body };
  }

  private async writeConfig(): Promise<void> {
    const { opts, cluster, dir } = this.init;
    const leafListen = opts.leafListen ? `127.0.0.1:${this.leafPort ?? -1}` : undefined;
    const text = renderNatsConfig(
      {
        serverName: this.name,
        listen: `127.0.0.1:${this.port}`,
        http: `127.0.0.1:${this.monitorPort}`,
        storeDir: this.storeDir,
        portsFileDir: dir,
        tls: opts.tls,
        ...(leafListen ? { leafListen } : {}),
        ...(cluster
          ? {
              cluster: {
                name: cluster.name,
                listen: `127.0.0.1:${cluster.port}`,
                routes: cluster.peerPorts.map((p) => `nats-route://127.0.0.1:${p}`),
              },
            }
          : {}),
      },
      opts,
    );
    await writeFile(this.configFile, text);
  }

  private async ready(proc: LocalProcess, signal: AbortSignal): Promise<void> {
    const timeoutMs = this.init.readyTimeoutMs ?? 20_000;
    if (this.port === -1 || this.monitorPort === -1) await this.learnPorts(proc, signal, timeoutMs);
    const full = this.waitForHealthz && (this.init.quorumPossible?.() ?? true);
    // js-enabled-only (accepted by 2.9.10; checked by hand) skips the meta-leader check.
    const path = full || this.init.opts.jetstream === false ? "/healthz" : "/healthz?js-enabled-only=true";
    await check(async () => (await this.monitor(path)).status === 200, {
      name: `${this.name} ${path} returns 200`,
      timeoutMs,
      signal,
    });
  }

  private async learnPorts(proc: LocalProcess, signal: AbortSignal, timeoutMs: number): Promise<void> {
    // nats-server names it after its own executable (filepath.Base(os.Args[0])): NATS_SERVER_BIN may be named otherwise.
    const portsFile = join(this.init.dir, `${basename(this.init.bin)}_${proc.pid ?? "?"}.ports`);
    const ports = await check(
      async () => {
        const parsed = JSON.parse(await readFile(portsFile, "utf8")) as PortsFile;
        const client = parsed.nats?.[0];
        const mon = parsed.monitoring?.[0];
        return client && mon
          ? { client: Number(new URL(client).port), mon: Number(new URL(mon).port) }
          : undefined;
      },
      { name: `${this.name} ports file ${portsFile}`, timeoutMs, signal },
    );
    this.port = ports.client;
    this.monitorPort = ports.mon;
    if (this.init.opts.leafListen && this.leafPort === undefined) {
      const varz = await check(
        async () => (await this.monitor("/varz")).body as { leaf?: { port?: number } },
        { name: `${this.name} /varz answers`, timeoutMs, signal },
      );
      this.leafPort = varz.leaf?.port;
      if (!this.leafPort) throw new Error(`${this.name}: /varz reports no leafnode port`);
    }
    // From now on the config names the concrete ports, so a restart reuses them.
    await this.writeConfig();
  }
}
