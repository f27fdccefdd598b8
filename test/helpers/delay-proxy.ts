import { connect, createServer } from "node:net";
import type { AddressInfo, Server, Socket } from "node:net";

/**
 * A TCP proxy on 127.0.0.1 that delays every byte by `oneWayMs` in each direction: a WAN link of
 * 2 × oneWayMs round-trip time between two regions on one machine. Order is kept (one queue per
 * direction, one timer draining it), bandwidth is not limited.
 *
 *   const wan = await startDelayProxy({ port: hub.leafPort, oneWayMs: 20 });  // 40 ms RTT
 *   // the other region connects to 127.0.0.1:${wan.port}
 */
export interface DelayProxy {
  readonly port: number;
  /** The one-way delay now. */
  readonly oneWayMs: number;
  /** Changes the delay of every byte from now on (bytes already queued keep theirs; order is kept). */
  setOneWayMs(ms: number): void;
  close(): Promise<void>;
}

/** Chunks waiting for their time, oldest first. */
class DelayedPipe {
  private readonly queue: { due: number; chunk: Buffer }[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly to: Socket,
    private readonly delayMs: () => number,
  ) {}

  push(chunk: Buffer): void {
    this.queue.push({ due: Date.now() + this.delayMs(), chunk });
    if (!this.timer) this.schedule();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
  }

  private schedule(): void {
    const head = this.queue[0];
    if (!head) {
      this.timer = undefined;
      return;
    }
    this.timer = setTimeout(() => this.drain(), Math.max(0, head.due - Date.now()));
  }

  private drain(): void {
    const now = Date.now();
    let n = 0;
    while (n < this.queue.length && (this.queue[n]?.due ?? Infinity) <= now) n++;
    const ready = this.queue.splice(0, n).map((q) => q.chunk);
    if (ready.length > 0 && !this.to.destroyed) this.to.write(ready.length === 1 ? ready[0]! : Buffer.concat(ready));
    this.schedule();
  }
}

export async function startDelayProxy(target: { port: number; host?: string; oneWayMs: number }): Promise<DelayProxy> {
  const host = target.host ?? "127.0.0.1";
  let delay = target.oneWayMs;
  const sockets = new Set<Socket>();
  const pipes = new Set<DelayedPipe>();
  const server: Server = createServer((client) => {
    const upstream = connect({ port: target.port, host });
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const up = new DelayedPipe(upstream, () => delay);
    const down = new DelayedPipe(client, () => delay);
    for (const s of [client, upstream]) sockets.add(s);
    pipes.add(up).add(down);
    const end = () => {
      up.stop();
      down.stop();
      pipes.delete(up);
      pipes.delete(down);
      for (const s of [client, upstream]) {
        sockets.delete(s);
        s.destroy();
      }
    };
    client.on("data", (d: Buffer) => up.push(d));
    upstream.on("data", (d: Buffer) => down.push(d));
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    get oneWayMs() {
      return delay;
    },
    setOneWayMs(ms: number) {
      delay = ms;
    },
    close: async () => {
      for (const p of pipes) p.stop();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
