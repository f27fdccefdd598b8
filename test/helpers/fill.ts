import type { MsgHdrs, NatsConnection } from "@nats-io/nats-core";
import { JetStreamPublisher } from "../../src/nats/publisher.js";

/**
 * Fills a stream fast: the relay's own pipelined publisher, `window` in flight, in order on one
 * connection (so the i-th message gets stream sequence i + 1 in an empty stream). Subjects are
 * `<subject>.<i % 16>`. Resolves with the rate in msgs/s once every PubAck arrived; rejects on the
 * first failed publish.
 */
export async function fillStream(
  nc: NatsConnection,
  subject: string,
  count: number,
  opts: { headers: (i: number) => MsgHdrs; payload?: Uint8Array; window?: number; timeoutMs?: number },
): Promise<number> {
  const publisher = new JetStreamPublisher(nc, opts.timeoutMs ?? 60_000);
  const payload = opts.payload ?? new Uint8Array(0);
  const window = opts.window ?? 4_096;
  const started = performance.now();
  let sent = 0;
  let done = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      const pump = () => {
        while (sent < count && sent - done < window) {
          const i = sent++;
          publisher.publish(`${subject}.${i % 16}`, payload, opts.headers(i), (err) => {
            if (err) return reject(err);
            if (++done === count) resolve();
            else if (done % 1_024 === 0) setImmediate(pump);
          });
        }
      };
      if (count === 0) resolve();
      else pump();
    });
  } finally {
    publisher.close();
  }
  return count / ((performance.now() - started) / 1000);
}
