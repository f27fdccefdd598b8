import { connect, createServer } from "node:net";
import type { AddressInfo, Server, Socket } from "node:net";

/**
 * A TCP proxy on 127.0.0.1 that forwards what clients send at most `bytesPerSecond` per connection
 * (replies come back unthrottled): a narrow uplink where each TCP connection gets its own share, as
 * flows do on a real link. It reads a client only as fast as it forwards, so a client that writes
 * more queues it in its own socket buffers: whatever it writes next on that connection waits behind
 * it, while another connection of the same client is not held up.
 *
 *   const slow = await startThrottleProxy({ port: b.port, bytesPerSecond: 32 * 1024 * 1024 });
 */
export interface ThrottleProxy {
  readonly port: number;
  close(): Promise<void>;
}

export async function startThrottleProxy(target: { port: number; host?: string; bytesPerSecond: number }): Promise<ThrottleProxy> {
  const host = target.host ?? "127.0.0.1";
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server: Server = createServer((client) => {
    const upstream = connect({ port: target.port, host });
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    for (const s of [client, upstream]) sockets.add(s);
    // When the link is free again (ms): each chunk takes length / rate of it.
    let freeAt = Date.now();
    client.on("data", (chunk: Buffer) => {
      const now = Date.now();
      freeAt = Math.max(freeAt, now) + (chunk.length * 1000) / target.bytesPerSecond;
      if (freeAt - now < 1) {
        upstream.write(chunk);
        return;
      }
      client.pause();
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (upstream.destroyed) return;
        upstream.write(chunk);
        client.resume();
      }, freeAt - now);
      timers.add(timer);
    });
    upstream.pipe(client);
    const end = () => {
      for (const s of [client, upstream]) {
        sockets.delete(s);
        s.destroy();
      }
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
