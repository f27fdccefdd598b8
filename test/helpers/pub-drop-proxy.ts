import { createServer, connect } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { deferrals } from "./teardown.js";
import type { HasAfter } from "./teardown.js";

/**
 * A TCP proxy on 127.0.0.1 in front of one NATS server that reads the client's protocol frame by frame
 * and can lose one publish: the first `PUB`/`HPUB` whose bytes (subject line, headers and payload)
 * contain a marker is not forwarded, while everything after it is. To the client this is an earlier
 * publish that got no PubAck (it times out) while later ones pipelined behind it were stored: what a
 * destination stream leader dying under a window of publishes does, on demand.
 *
 *   const proxy = await startPubDropProxy(t, server.port);
 *   const lost = proxy.dropPublish("Nats-Msg-Id: m-1\r\n");
 *   ... the client publishes m-1, m-2 ...   // m-2 stored, m-1 never reaches the server
 *   await lost;
 */
export interface PubDropProxy {
  readonly port: number;
  readonly url: string;
  /** Arms the drop of the next publish frame holding `marker`; resolves when one was dropped. */
  dropPublish(marker: string): Promise<void>;
  /**
   * Arms a hold of the next publish frame holding `marker`: it is kept back (everything else passes)
   * until `release()`, then forwarded. `held` resolves when one is being held.
   */
  holdPublish(marker: string): { readonly held: Promise<void>; release(): void };
}

interface Armed {
  readonly marker: Buffer;
  readonly done: () => void;
  /** Held instead of dropped: forwards the frame when the hold is released. */
  readonly hold?: (forward: () => void) => void;
}

const CRLF = Buffer.from("\r\n");

export async function startPubDropProxy(t: HasAfter, targetPort: number): Promise<PubDropProxy> {
  const sockets = new Set<Socket>();
  let armed: Armed | undefined;

  const server = createServer((client) => {
    const upstream = connect({ host: "127.0.0.1", port: targetPort });
    sockets.add(client).add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    let pending: Buffer = Buffer.alloc(0);
    client.on("data", (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      const out: Buffer[] = [];
      for (;;) {
        const frameEnd = frameLength(pending);
        if (frameEnd === undefined) break;
        const frame = pending.subarray(0, frameEnd);
        pending = pending.subarray(frameEnd);
        const drop = armed;
        if (drop && isPublish(frame) && frame.includes(drop.marker)) {
          armed = undefined;
          drop.done();
          if (drop.hold) {
            const held = Buffer.from(frame);
            drop.hold(() => {
              if (!upstream.destroyed) upstream.write(held);
            });
          }
          continue;
        }
        out.push(frame);
      }
      if (out.length > 0) upstream.write(Buffer.concat(out));
    });
    upstream.pipe(client);
    for (const s of [client, upstream]) s.on("error", end).on("close", end);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  deferrals(t)(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `nats://127.0.0.1:${port}`,
    dropPublish(marker: string) {
      if (armed) throw new Error("pub-drop proxy: a drop is already armed");
      return new Promise<void>((resolve) => {
        armed = { marker: Buffer.from(marker), done: resolve };
      });
    },
    holdPublish(marker: string) {
      if (armed) throw new Error("pub-drop proxy: a drop is already armed");
      let forward: (() => void) | undefined;
      let released = false;
      const held = new Promise<void>((resolve) => {
        armed = {
          marker: Buffer.from(marker),
          done: resolve,
          hold: (f) => {
            if (released) f();
            else forward = f;
          },
        };
      });
      return {
        held,
        release() {
          released = true;
          forward?.();
        },
      };
    },
  };
}

const isPublish = (frame: Buffer): boolean => {
  const op = frame.subarray(0, 5).toString("latin1").toUpperCase();
  return op.startsWith("PUB ") || op.startsWith("HPUB ");
};

/**
 * The length of the first whole client frame in `buf` (undefined: not all there yet): a protocol line,
 * and for PUB and HPUB the payload of the size its last argument gives, with its CRLF.
 */
function frameLength(buf: Buffer): number | undefined {
  const lineEnd = buf.indexOf(CRLF);
  if (lineEnd < 0) return undefined;
  const line = buf.subarray(0, lineEnd).toString("latin1");
  const args = line.trim().split(/\s+/);
  const op = args[0]?.toUpperCase();
  if (op !== "PUB" && op !== "HPUB") return lineEnd + 2;
  const total = Number(args[args.length - 1]);
  const length = lineEnd + 2 + total + 2;
  return buf.length >= length ? length : undefined;
}
