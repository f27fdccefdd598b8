import { connect } from "node:net";
import { join } from "node:path";
import { check } from "./check.js";
import { LocalProcess } from "./local-process.js";
import type { RedisNode, RedisOptions } from "./types.js";

/**
 * A redis-server on `port` (loopback) working in `dir`: no RDB snapshots (tests decide durability by
 * appendonly alone), log to `dir`/redis-server.log, ready when it answers PING. `args` go last.
 */
export function redisServerProcess(
  bin: string,
  port: number,
  dir: string,
  opts: RedisOptions & { readonly args?: readonly string[] },
): LocalProcess {
  // prettier-ignore
  const args = [
    "--port", String(port),
    "--bind", "127.0.0.1",
    "--dir", dir,
    "--save", "",
    "--appendonly", opts.appendonly ? "yes" : "no",
    ...(opts.appendfsync ? ["--appendfsync", opts.appendfsync] : []),
    "--daemonize", "no",
    "--logfile", "", // stdout, which goes to redis-server.log
    ...(opts.password ? ["--requirepass", opts.password] : []),
    ...(opts.args ?? []),
  ];
  return new LocalProcess({
    label: `redis-server :${port}`,
    command: bin,
    args: () => args,
    logFile: join(dir, "redis-server.log"),
    ready: (_proc, signal) =>
      check(() => redisPing(port, opts.password), {
        name: `redis-server :${port} answers PING with PONG`,
        timeoutMs: 10_000,
        signal,
      }).then(() => undefined),
  });
}

/**
 * One redis-server process on a pre-allocated port (redis has no "pick a port and tell me"
 * mode), with its working dir fixed so an AOF written before restart() is replayed after it.
 */
export class LocalRedisNode implements RedisNode {
  readonly proc: LocalProcess;

  constructor(
    bin: string,
    readonly port: number,
    readonly dir: string,
    private readonly opts: RedisOptions,
  ) {
    this.proc = redisServerProcess(bin, port, dir, opts);
  }

  get url(): string {
    const auth = this.opts.password ? `:${encodeURIComponent(this.opts.password)}@` : "";
    return `redis://${auth}127.0.0.1:${this.port}`;
  }
  get running(): boolean {
    return this.proc.running;
  }
  get pid(): number | undefined {
    return this.proc.pid;
  }
  start(): Promise<void> {
    return this.proc.start();
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
  restart(): Promise<void> {
    return this.proc.restart();
  }
}

/** RESP array encoding, so passwords with spaces survive (inline commands would split them). */
function resp(...parts: string[]): string {
  return `*${parts.length}\r\n${parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join("")}`;
}

/**
 * True once the server answers PING with +PONG. While an AOF is being replayed redis answers
 * -LOADING instead, which correctly counts as "not ready yet".
 */
export function redisPing(port: number, password?: string, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host, port });
    let buf = "";
    sock.setTimeout(1_000, () => sock.destroy(new Error("no answer to PING within 1s")));
    sock.on("connect", () => sock.write((password ? resp("AUTH", password) : "") + resp("PING")));
    sock.on("data", (d) => {
      buf += d.toString("utf8");
      if (buf.includes("+PONG\r\n")) {
        sock.destroy();
        resolve(true);
      } else if (/(^|\r\n)-/.test(buf)) {
        sock.destroy(new Error(`redis answered: ${buf.trim()}`));
      }
    });
    sock.on("error", reject);
    sock.on("close", () => resolve(false));
  });
}
