import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";

/** The demo's own throwaway nats-server: JetStream on, free loopback port, kept on the same port across restarts. */
export class DemoNatsServer {
  private child: ChildProcess | undefined;
  private readonly dir: string;
  readonly url: string;

  private constructor(
    readonly name: string,
    private readonly port: number,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), `relay-demo-${name}-`));
    this.url = `nats://127.0.0.1:${port}`;
    writeFileSync(
      join(this.dir, "nats.conf"),
      `server_name: "${name}"\nlisten: "127.0.0.1:${port}"\njetstream { store_dir: "${join(this.dir, "js")}" }\n`,
    );
  }

  static async start(name: string): Promise<DemoNatsServer> {
    const server = new DemoNatsServer(name, await freePort());
    await server.restart();
    return server;
  }

  /** Starts (again) on the same port and store; resolves when it accepts clients. */
  async restart(): Promise<void> {
    this.child = spawn("nats-server", ["-c", join(this.dir, "nats.conf")], { stdio: "ignore" });
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        const nc = await connect({ servers: this.url, reconnect: false, timeout: 500 });
        await nc.close();
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`nats-server ${this.name} did not start on ${this.url}`, { cause: err });
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  /** SIGKILL: the region is cut off without a goodbye. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }

  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function natsServerAvailable(): boolean {
  return spawnSync("nats-server", ["--version"], { stdio: "ignore" }).status === 0;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}
