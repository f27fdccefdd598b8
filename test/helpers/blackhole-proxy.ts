import { connect, createServer } from "node:net";
import type { AddressInfo, Server, Socket } from "node:net";

/**
 * A TCP forwarder on 127.0.0.1 in front of one server that can turn into a black hole: the failure a
 * WAN middlebox or NAT produces when it loses its state. While black-holed, existing connections carry
 * nothing either way and see no close; new connections are accepted and hear nothing. `restore()` ends
 * the black hole the way the real network would: the connections that went silent are reset (their
 * state is gone on the far side), new ones are forwarded again.
 *
 *   const p = await startBlackHoleProxy({ port: node.port });
 *   p.blackHole();   // a client connected through p.port hears nothing, and is not told
 *   p.restore();
 *
 * `blackHole({ record: true })` also keeps what clients send into the hole (`swallowed()`): the
 * requests the server never got, for a test that must know a given one was lost before it restores.
 */
export interface BlackHoleProxy {
  readonly port: number;
  readonly blackHoled: boolean;
  /** `record`: keep what clients send from now until `restore()` (off by default: a long hole under load would keep it all). */
  blackHole(opts?: { record?: boolean }): void;
  /** What clients sent into the last black hole begun with `record` (in arrival order, all connections together). */
  swallowed(): Buffer;
  restore(): void;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  readonly upstream: Socket | undefined;
  /** Opened or silenced during a black hole: reset when it ends. */
  silenced: boolean;
}

export async function startBlackHoleProxy(target: { port: number; host?: string }): Promise<BlackHoleProxy> {
  const host = target.host ?? "127.0.0.1";
  const pairs = new Set<Pair>();
  let holed = false;
  let recording = false;
  let recorded: Buffer[] = [];
  const swallow = (d: Buffer): void => {
    if (recording) recorded.push(d);
  };

  const end = (pair: Pair): void => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream?.destroy();
  };

  const server: Server = createServer((client) => {
    client.setNoDelay(true);
    if (holed) {
      // Accepted, and nothing ever answers: what a client sees connecting into a black hole.
      const pair: Pair = { client, upstream: undefined, silenced: true };
      pairs.add(pair);
      client.on("data", swallow);
      client.on("close", () => end(pair)).on("error", () => end(pair));
      return;
    }
    const upstream = connect({ port: target.port, host });
    upstream.setNoDelay(true);
    const pair: Pair = { client, upstream, silenced: false };
    pairs.add(pair);
    client.on("data", (d: Buffer) => {
      if (!pair.silenced) upstream.write(d);
      else swallow(d);
    });
    upstream.on("data", (d: Buffer) => {
      if (!pair.silenced) client.write(d);
    });
    for (const s of [client, upstream]) s.on("close", () => end(pair)).on("error", () => end(pair));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

  return {
    port: (server.address() as AddressInfo).port,
    get blackHoled() {
      return holed;
    },
    blackHole(opts = {}) {
      holed = true;
      recording = opts.record === true;
      recorded = [];
      for (const p of pairs) p.silenced = true;
    },
    swallowed() {
      return Buffer.concat(recorded);
    },
    restore() {
      holed = false;
      recording = false;
      for (const p of [...pairs]) if (p.silenced) end(p);
    },
    close: async () => {
      for (const p of [...pairs]) end(p);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
