import { connect } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check } from "./check.js";
import { LocalProcess, freePort, requireBinary, trackTempDir, untrackTempDir } from "./local-process.js";
import { deferrals } from "./teardown.js";
import type { HasAfter } from "./teardown.js";

/**
 * A Redis primary, its replicas and a set of Sentinels as local processes, every one of them behind
 * authentication the way production runs them: the data nodes with an ACL user (the default user is
 * off; the replicas replicate as that user), the Sentinels with an ACL user of their own (they
 * authenticate to each other with it, and to the data nodes with the data user). Nothing is reachable
 * without a password.
 *
 * `redis-server --sentinel <file>` runs a Sentinel (Debian ships no separate redis-sentinel binary);
 * Sentinel rewrites its config file, so each has its own in its own directory.
 */

export interface Credentials {
  readonly username: string;
  readonly password: string;
}

export interface SentinelSetOptions {
  /** The master name the Sentinels monitor (default "relay-master"). */
  readonly masterName?: string;
  /** The data nodes' ACL user (the relay's `guard.redis.username`/`password`). */
  readonly data: Credentials;
  /** The Sentinels' own ACL user (`guard.redis.sentinel.username`/`password`). */
  readonly sentinel: Credentials;
  readonly replicas?: number;
  readonly sentinels?: number;
  /** How long a Sentinel waits before it considers the master down (default 1000 ms). */
  readonly downAfterMs?: number;
}

export class RedisDataNode {
  readonly proc: LocalProcess;
  constructor(
    readonly port: number,
    readonly dir: string,
    bin: string,
    data: Credentials,
  ) {
    this.proc = new LocalProcess({
      label: `redis-server :${port}`,
      command: bin,
      args: () => [join(dir, "redis.conf")],
      logFile: join(dir, "redis-server.log"),
      ready: (_p, signal) =>
        check(() => respCall(port, data, ["PING"]).then((r) => r.startsWith("+PONG")), {
          name: `redis-server :${port} answers PING`,
          timeoutMs: 10_000,
          signal,
        }).then(() => undefined),
    });
  }
}

export class LocalSentinelSet {
  readonly masterName: string;
  readonly data: readonly RedisDataNode[] = [];
  readonly sentinels: readonly LocalProcess[] = [];
  /** "127.0.0.1:port" of every Sentinel (the relay's `guard.redis.sentinel.nodes`). */
  readonly sentinelNodes: string[] = [];
  private readonly sentinelPorts: number[] = [];
  private readonly dirs: string[] = [];

  private constructor(private readonly opts: SentinelSetOptions) {
    this.masterName = opts.masterName ?? "relay-master";
  }

  /** Starts the primary, its replicas (in sync) and the Sentinels (each knowing the others). Stopped when `t` ends. */
  static async start(t: HasAfter, opts: SentinelSetOptions): Promise<LocalSentinelSet> {
    const set = new LocalSentinelSet(opts);
    deferrals(t)(() => set.cleanup());
    await set.boot();
    return set;
  }

  private async boot(): Promise<void> {
    const bin = requireBinary("redis-server", "redis-server");
    const { data, sentinel } = this.opts;
    const replicas = this.opts.replicas ?? 1;
    const primaryPort = await freePort();
    for (let i = 0; i <= replicas; i++) {
      const port = i === 0 ? primaryPort : await freePort();
      const dir = await this.tempDir();
      // prettier-ignore
      const conf = [
        `port ${port}`, "bind 127.0.0.1", `dir ${dir}`, 'save ""',
        "appendonly yes", "appendfsync everysec", "daemonize no", 'logfile ""',
        "user default off",
        `user ${data.username} on >${data.password} ~* &* +@all`,
        `masteruser ${data.username}`, `masterauth ${data.password}`,
        ...(i === 0 ? [] : [`replicaof 127.0.0.1 ${primaryPort}`]),
      ];
      await writeFile(join(dir, "redis.conf"), conf.join("\n") + "\n");
      const node = new RedisDataNode(port, dir, bin, data);
      (this.data as RedisDataNode[]).push(node);
      await node.proc.start();
    }
    await check(async () => (await this.onlineReplicas(primaryPort)) >= replicas, {
      name: `${replicas} replica(s) in sync with the primary :${primaryPort}`,
      timeoutMs: 20_000,
      intervalMs: 100,
    });
    const count = this.opts.sentinels ?? 3;
    for (let i = 0; i < count; i++) this.sentinelPorts.push(await freePort());
    for (const port of this.sentinelPorts) {
      const dir = await this.tempDir();
      // prettier-ignore
      const conf = [
        `port ${port}`, "bind 127.0.0.1", `dir ${dir}`, "daemonize no", 'logfile ""',
        `sentinel monitor ${this.masterName} 127.0.0.1 ${primaryPort} 2`,
        `sentinel auth-user ${this.masterName} ${data.username}`,
        `sentinel auth-pass ${this.masterName} ${data.password}`,
        `sentinel down-after-milliseconds ${this.masterName} ${this.opts.downAfterMs ?? 1_000}`,
        `sentinel failover-timeout ${this.masterName} 10000`,
        `sentinel parallel-syncs ${this.masterName} 1`,
        // The Sentinels' own ACL: the default user off, one user for clients and for each other.
        "user default off",
        `user ${sentinel.username} on >${sentinel.password} allchannels +@all`,
        `sentinel sentinel-user ${sentinel.username}`,
        `sentinel sentinel-pass ${sentinel.password}`,
      ];
      await writeFile(join(dir, "sentinel.conf"), conf.join("\n") + "\n");
      const proc = new LocalProcess({
        label: `redis-sentinel :${port}`,
        command: bin,
        args: () => [join(dir, "sentinel.conf"), "--sentinel"],
        logFile: join(dir, "sentinel.log"),
        ready: (_p, signal) =>
          check(() => respCall(port, sentinel, ["PING"]).then((r) => r.startsWith("+PONG")), {
            name: `sentinel :${port} answers PING`,
            timeoutMs: 10_000,
            signal,
          }).then(() => undefined),
      });
      (this.sentinels as LocalProcess[]).push(proc);
      this.sentinelNodes.push(`127.0.0.1:${port}`);
      await proc.start();
    }
    // Every Sentinel sees the others and the replicas (learnt over hello messages, every 2 s).
    await check(
      async () => {
        for (const port of this.sentinelPorts) {
          const reply = await respCall(port, sentinel, ["SENTINEL", "MASTER", this.masterName]);
          // A flat list of bulk strings: name, value, name, value, ...
          const field = (name: string) =>
            Number(new RegExp(`${name}\r\n\\$\\d+\r\n(\\d+)`).exec(reply)?.[1] ?? 0);
          if (field("num-other-sentinels") < count - 1 || field("num-slaves") < replicas) return false;
        }
        return true;
      },
      {
        name: "every Sentinel knows the other Sentinels and the replicas",
        timeoutMs: 30_000,
        intervalMs: 250,
      },
    );
  }

  /** The master's port as a Sentinel reports it now. */
  async masterPort(): Promise<number> {
    let last: unknown;
    for (const port of this.sentinelPorts) {
      try {
        const reply = await respCall(port, this.opts.sentinel, [
          "SENTINEL",
          "GET-MASTER-ADDR-BY-NAME",
          this.masterName,
        ]);
        const parts = reply.split("\r\n");
        return Number(parts[4]);
      } catch (err) {
        last = err;
      }
    }
    throw new Error(`no Sentinel answered: ${String(last)}`);
  }

  node(port: number): RedisDataNode {
    const n = this.data.find((d) => d.port === port);
    if (!n) throw new Error(`no data node on port ${port}`);
    return n;
  }

  /** Replicas of the node on `port` in state online (INFO replication). */
  async onlineReplicas(port: number): Promise<number> {
    const info = await respCall(port, this.opts.data, ["INFO", "replication"]);
    return (info.match(/^slave\d+:.*state=online/gm) ?? []).length;
  }

  /** Sends one command to the data node on `port` as the data user; the raw RESP reply. */
  dataCall(port: number, args: readonly string[]): Promise<string> {
    return respCall(port, this.opts.data, args);
  }

  async cleanup(): Promise<void> {
    await Promise.all([...this.sentinels, ...this.data.map((d) => d.proc)].map((p) => p.stop(3_000)));
    const dirs = this.dirs.splice(0);
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true, maxRetries: 3 })));
    dirs.forEach(untrackTempDir);
  }

  private async tempDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "relay-sentinel-"));
    this.dirs.push(dir);
    trackTempDir(dir);
    return dir;
  }
}

/** RESP array encoding (arguments with spaces survive). */
function resp(parts: readonly string[]): string {
  return `*${parts.length}\r\n${parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join("")}`;
}

/**
 * AUTH as `creds`, then one command; resolves with the raw reply of the command (everything after the
 * AUTH's +OK, read until the socket is quiet for a moment). Rejects on an error reply or no answer.
 */
export function respCall(
  port: number,
  creds: Credentials,
  args: readonly string[],
  host = "127.0.0.1",
): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host, port });
    let buf = "";
    let quiet: NodeJS.Timeout | undefined;
    sock.setTimeout(2_000, () => sock.destroy(new Error(`no answer from :${port} within 2s`)));
    sock.on("connect", () => sock.write(resp(["AUTH", creds.username, creds.password]) + resp(args)));
    sock.on("data", (d) => {
      buf += d.toString("utf8");
      if (/^-/.test(buf)) {
        sock.destroy(new Error(`:${port} answered: ${buf.trim()}`));
        return;
      }
      if (!buf.startsWith("+OK\r\n") || buf.length <= 5) return;
      if (/^-/.test(buf.slice(5))) {
        sock.destroy(new Error(`:${port} answered: ${buf.slice(5).trim()}`));
        return;
      }
      // Replies may arrive in pieces: answer once nothing came for 50 ms.
      if (quiet) clearTimeout(quiet);
      quiet = setTimeout(() => {
        sock.destroy();
        resolve(buf.slice(5));
      }, 50);
    });
    sock.on("error", reject);
    sock.on("close", () => {
      if (quiet === undefined) reject(new Error(`:${port} closed the connection`));
    });
  });
}
