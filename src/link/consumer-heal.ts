/**
 * The stall heal's second step (stall-watch.ts): a consumer on the server that delivers nothing while
 * messages wait is rewound to its ack floor + 1. On nats-server 2.14+ the consumer reset API does that
 * in place (`$JS.API.CONSUMER.RESET`, ADR-60: an empty request resets to the ack floor + 1), keeping the
 * durable, its config and its ack floor. On older servers (the client refuses the request before
 * sending it) the consumer's ack floor is read and the durable deleted: the consume loop then creates it
 * again at that floor + 1 (cursor.ts, `healed`). A consumer that cannot be read is not deleted.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import type { HealedConsumer } from "./cursor.js";

/** Which way the consumer was healed: reset in place, or deleted after its floor was read (`healed` for the cursor). */
export type ConsumerHeal = { readonly reset: true; readonly resetSeq: number } | { readonly reset: false; readonly healed: HealedConsumer };

type HealManager = { readonly consumers: Pick<JetStreamManager["consumers"], "info" | "delete"> & { reset?: JetStreamManager["consumers"]["reset"] } };

/** The client's refusal for a server without the reset API (nats.js checks the server's version first). */
const NO_RESET = /requires server/;

export async function healConsumer(jsm: HealManager, config: LinkConfig, sourceCreatedMs: number | undefined, logger: Logger): Promise<ConsumerHeal> {
  const stream = config.from.stream;
  const durable = config.durableName;
  if (jsm.consumers.reset) {
    try {
      const r = await jsm.consumers.reset(stream, durable);
      logger.info({ resetSeq: r.reset_seq }, "consumer reset in place to its ack floor + 1 (nats-server 2.14+)");
      return { reset: true, resetSeq: r.reset_seq };
    } catch (err) {
      if (!NO_RESET.test(err instanceof Error ? err.message : String(err))) throw err;
    }
  }
  const info = await jsm.consumers.info(stream, durable);
  const healed = { ackFloor: info.ack_floor.stream_seq, delivered: info.delivered.stream_seq, sourceCreatedMs };
  await jsm.consumers.delete(stream, durable);
  return { reset: false, healed };
}
