import { createServer, connect } from "node:net";
import type { AddressInfo, Server, Socket } from "node:net";

/**
 * A TCP proxy on 127.0.0.1 in front of one server, with a fault switch for the case no server can
 * produce on demand: a request that the server executed but whose reply the client never got.
 *
 *   const proxy = await startTcpProxy({ port: redis.port });
 *   const dropped = proxy.dropAfterNextRequest();
 *   await client.someCommand();   // executed upstream, reply swallowed, connection dropped
 *   await dropped;
 */
export interface TcpProxy {
  readonly port: number;
  /** Connections accepted so far. */
  readonly accepted: number;
  /**
   * Arms the switch: the next bytes a client sends are forwarded; the first reply bytes coming
   * back prove the server executed them, and are thrown away while both sides of that connection
   * are destroyed. Resolves when that happened. Later connections are proxied normally.
   */
  dropAfterNextRequest(): Promise<void>;
  /** Destroys every proxied connection now (the server keeps running). */
  dropAll(): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket;
}

export async function startTcpProxy(target: { port: number; host?: string }): Promise<TcpProxy> {
  const host = target.host ?? "127.0.0.1";
  const pairs = new Set<Pair>();
  let accepted = 0;
  let armed: (() => void) | undefined;

  const server: Server = createServer((client) => {
    accepted++;
    const upstream = connect({ host, port: target.port });
    const pair: Pair = { client, upstream };
    pairs.add(pair);
    let dropping: (() => void) | undefined;
    const destroy = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (chunk) => {
      if (armed && !dropping) {
        // This connection carries the request whose reply will be lost.
        dropping = armed;
        armed = undefined;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (dropping) {
        const done = dropping;
        destroy();
        done();
        return;
      }
      client.write(chunk);
    });
    client.on("error", destroy);
    upstream.on("error", destroy);
    client.on("close", destroy);
    upstream.on("close", destroy);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });

  const dropAll = (): void => {
    for (const p of [...pairs]) {
      p.client.destroy();
      p.upstream.destroy();
    }
    pairs.clear();
  };
  return {
    port: (server.address() as AddressInfo).port,
    get accepted() {
      return accepted;
    },
    dropAfterNextRequest() {
      if (armed) throw new Error("tcp proxy: a drop is already armed");
      return new Promise<void>((resolve) => {
        armed = resolve;
      });
    },
    dropAll,
    close() {
      dropAll();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
