import { createServer, connect } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { deferrals } from "./teardown.js";
import type { HasAfter } from "./teardown.js";

/**
 * A forwarder on a fixed loopback port that can refuse connections for a while. tcp-proxy.ts drops
 * connections but would accept new ones at once, so a cut longer than one reconnect puts this behind
 * it: relay → tcp proxy → gate → region b. While refused, the proxy's upstream connect fails and it
 * closes each connection the relay opens.
 */
export async function startGate(
  t: HasAfter,
  targetPort: number,
): Promise<{ port: number; refuse(): Promise<void>; open(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect({ host: "127.0.0.1", port: targetPort });
    sockets.add(client).add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.pipe(upstream);
    upstream.pipe(client);
    for (const s of [client, upstream]) s.on("error", end).on("close", end);
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
  await listen(0);
  const port = (server.address() as AddressInfo).port;
  const refuse = async (): Promise<void> => {
    if (!server.listening) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sockets) s.destroy();
    sockets.clear();
    await closed;
  };
  deferrals(t)(refuse);
  return {
    port,
    refuse,
    async open() {
      if (!server.listening) await listen(port);
    },
  };
}
