/**
 * The floor of the lag rows (`npm run bench`, BENCH_ONLY=lag): less than any replicator that runs as a
 * NATS client process can do. It does not even read the source stream: a core subscription on the
 * source subjects takes each message as it is published (before the source has stored it), and a core
 * publish hands it to the destination stream with its headers (Nats-Msg-Id kept), without waiting for
 * a PubAck. No JetStream consumer, no acks, no relay code: one hop through a Node.js event loop with
 * the NATS client the relay uses. What this process lags behind native sourcing on a machine is what a
 * client process's hop costs there; a relay, which must read the stream and ack after the PubAck,
 * cannot lag less.
 *
 *   FLOOR_SOURCE=nats://…,nats://… FLOOR_DEST=nats://… node bench/floor-forwarder.mjs
 * Subjects `src.>` into the destination stream (the bench's DST binds them). Stops on SIGTERM.
 */
import { connect } from "@nats-io/transport-node";

const source = await connect({ servers: (process.env.FLOOR_SOURCE ?? "").split(",") });
const dest = await connect({ servers: (process.env.FLOOR_DEST ?? "").split(",") });
source.subscribe("src.>", {
  callback: (_err, m) => {
    dest.publish(m.subject, m.data, m.headers ? { headers: m.headers } : {});
  },
});
await source.flush();
process.once("SIGTERM", () => {
  void Promise.all([source.drain(), dest.drain()]);
});
