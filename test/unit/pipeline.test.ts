import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import type { Pipeline } from "../../src/link/pipeline.js";
import type { Delivery } from "../../src/nats/delivery.js";
import type { SourceAcks } from "../../src/nats/source-acks.js";
import type { JetStreamPublisher } from "../../src/nats/publisher.js";
import { check } from "../helpers/check.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { testPipeline } from "../helpers/test-pipeline.js";

/** The a-to-b link; these tests look at every delivery's ack: `sourceAcks: each` unless said otherwise. */
const configWith = (sourceAcks: "each" | "cumulative") =>
  parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S }, sourceAcks: ${sourceAcks} }
`,
    "unit",
  );
const config = configWith("each");

/** A pipeline of the a-to-b link, without a guard, that owns the link. */
function newPipeline(
  acks: SourceAcks,
  metrics: ReturnType<typeof createMetrics>,
  owns: () => boolean = () => true,
  sourceAcks: "each" | "cumulative" = "each",
): Pipeline {
  const link = (sourceAcks === "each" ? config : configWith(sourceAcks)).links[0];
  assert.ok(link);
  return testPipeline(link, { links: config.links, acks, metrics, owns }).pipeline;
}

/** A delivery of a message that came from region b: on the a-to-b link it is a loop. */
function loopDelivery(deliveryCount: number): Delivery {
  return {
    subject: "S.x",
    reply: `$JS.ACK.S.relay-a-to-b.${deliveryCount}.7.${6 + deliveryCount}.1764460800000000000.0`,
    streamSequence: 7,
    consumerSequence: 6 + deliveryCount,
    deliveryCount,
    pending: 0,
    timestampNanos: "1764460800000000000",
    headers: new WireHeaders("NATS/1.0\r\nNats-Msg-Id: m7\r\nRelay-Origin: b\r\nRelay-Path: b,a\r\n\r\n"),
    data: new Uint8Array(0),
  };
}

test("a loop is acked on every delivery but counted once per message", async () => {
  const metrics = createMetrics(undefined, { defaultMetrics: false });
  const acked: string[] = [];
  const acks = { ack: (reply: string) => acked.push(reply) > 0, nak: () => true } as unknown as SourceAcks;
  const pipeline = newPipeline(acks, metrics);
  pipeline.push(loopDelivery(1));
  pipeline.push(loopDelivery(2)); // its first ack was lost: the server delivered it again
  // A source server restarted from disk without the ack: delivered again as a first delivery.
  pipeline.push({ ...loopDelivery(1), consumerSequence: 3 });
  assert.deepEqual(acked, [loopDelivery(1).reply, loopDelivery(2).reply, loopDelivery(1).reply], "every delivery acked");
  const loops = (await metrics.messages.get()).values.find((v) => v.labels.outcome === "loop")?.value;
  assert.equal(loops, 1, "counted once");
  assert.equal(pipeline.size, 0, "nothing held");
});

test("cumulative acks: a loop, a relayed message and a finished one delivered again are each covered by an ack once nothing below them is held", async () => {
  const metrics = createMetrics(undefined, { defaultMetrics: false });
  const acked: string[] = [];
  const acks = { ack: (reply: string) => acked.push(reply) > 0, nak: () => true } as unknown as SourceAcks;
  const published: string[] = [];
  const pipeline = newPipeline(acks, metrics, () => true, "cumulative");
  pipeline.setDestination({ stream: "S", maxMessageBytes: 1 << 20, duplicateWindowMs: 1_000 });
  pipeline.setPublisher(storingPublisher(published));
  pipeline.push(loopDelivery(1)); // seq 7, a loop: finished at once
  pipeline.push(ownDelivery(8, 2, 1));
  await check(() => acked.length > 0 && acked[acked.length - 1] === ownDelivery(8, 2, 1).reply, {
    name: "seq 8 relayed and its ack covers 7 too",
    timeoutMs: 5_000,
  });
  assert.ok(acked.length <= 2, `${acked.length} acks for two messages`);
  // Seq 8 again as a first delivery (a source that lost the ack): acked again, not published again.
  pipeline.push(ownDelivery(8, 3, 1));
  await check(() => acked[acked.length - 1] === ownDelivery(8, 3, 1).reply, { name: "the redelivery acked again", timeoutMs: 5_000 });
  assert.equal(published.length, 1);
  assert.equal(pipeline.size, 0, "nothing held");
});

/** A publisher whose every publish is stored (PubAck with the next destination seq, on the next turn). */
function storingPublisher(published: string[]): JetStreamPublisher {
  let destSeq = 0;
  return {
    inFlight: 0,
    publish(subject: string, _data: Uint8Array, _headers: unknown, cb: (err: null, ack: { stream: string; seq: number; duplicate: boolean }) => void) {
      published.push(subject);
      const seq = ++destSeq;
      setImmediate(() => cb(null, { stream: "S", seq, duplicate: false }));
    },
  } as unknown as JetStreamPublisher;
}

/** A delivery of a message that originates in region a (forwarded on a-to-b). */
function ownDelivery(seq: number, consumerSequence: number, deliveryCount: number): Delivery {
  return {
    subject: "S.x",
    reply: `$JS.ACK.S.relay-a-to-b.${deliveryCount}.${seq}.${consumerSequence}.1764460800000000000.0`,
    streamSequence: seq,
    consumerSequence,
    deliveryCount,
    pending: 0,
    timestampNanos: "1764460800000000000",
    headers: new WireHeaders(`NATS/1.0\r\nNats-Msg-Id: m${seq}\r\n\r\n`),
    data: new Uint8Array([1, 2, 3]),
  };
}

test("a finished message delivered again as a first delivery (a consumer leader that lost state) is acked, not published again", async () => {
  const metrics = createMetrics(undefined, { defaultMetrics: false });
  const acked: string[] = [];
  const acks = { ack: (reply: string) => acked.push(reply) > 0, nak: () => true } as unknown as SourceAcks;
  const published: string[] = [];
  const publisher = storingPublisher(published);
  const pipeline = newPipeline(acks, metrics);
  pipeline.setDestination({ stream: "S", maxMessageBytes: 1 << 20, duplicateWindowMs: 1_000 });
  pipeline.setPublisher(publisher);
  pipeline.push(ownDelivery(7, 6, 1));
  pipeline.push(ownDelivery(8, 7, 1));
  await check(() => acked.length === 2, { name: "both messages published and acked", timeoutMs: 5_000 });
  // The new consumer leader delivers seq 7 again from consumer seq 5, with delivery count 1.
  pipeline.push(ownDelivery(7, 5, 1));
  assert.equal(published.length, 2, "seq 7 is not published a second time");
  assert.equal(acked.length, 3, "the new delivery is acked");
  assert.equal(acked[2], ownDelivery(7, 5, 1).reply);
  assert.equal(pipeline.size, 0, "nothing held");
  const dups = (await metrics.messages.get()).values.find((v) => v.labels.outcome === "duplicate")?.value;
  assert.equal(dups, 1, "counted as a duplicate");
});

test("messages held while the lease was not valid are published once it is again and resume() is called (no other event comes)", async () => {
  const metrics = createMetrics(undefined, { defaultMetrics: false });
  const acked: string[] = [];
  const acks = { ack: (reply: string) => acked.push(reply) > 0, nak: () => true } as unknown as SourceAcks;
  let owns = false;
  const published: string[] = [];
  const publisher = storingPublisher(published);
  const pipeline = newPipeline(acks, metrics, () => owns);
  pipeline.setDestination({ stream: "S", maxMessageBytes: 1 << 20, duplicateWindowMs: 1_000 });
  pipeline.setPublisher(publisher);
  pipeline.push(ownDelivery(7, 1, 1));
  pipeline.push(ownDelivery(8, 2, 1));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(published.length, 0, "nothing is published without the lease");
  owns = true; // the lease is back: nothing inside the pipeline notices
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(published.length, 0, "the pipeline waits for an event");
  pipeline.resume();
  await check(() => acked.length === 2, { name: "both published and acked after resume()", timeoutMs: 5_000 });
  assert.equal(published.length, 2);
});

test("drained() with a signal that already aborted returns at once, with messages still held", async () => {
  const metrics = createMetrics(undefined, { defaultMetrics: false });
  const acks = { ack: () => true, nak: () => true } as unknown as SourceAcks;
  const pipeline = newPipeline(acks, metrics);
  pipeline.push(ownDelivery(7, 1, 1)); // no publisher: it stays
  assert.equal(pipeline.size, 1);
  const outcome = await Promise.race([pipeline.drained(AbortSignal.abort()).then(() => "returned"), new Promise((r) => setTimeout(() => r("hung"), 1_000))]);
  assert.equal(outcome, "returned");
});
