/**
 * A 429 from the destination (JSStreamTooManyRequests, err_code 10167, nats-server 2.11+) is
 * backpressure (issue 39): classified from the PubAck fixture (test/fixtures/puback/README.md says where
 * its bytes come from), retried after a backoff, counted, and the pull window shrinks at once; never a
 * drop, a halt, a dead letter or a paused link. Newer PubAck fields (2.12's val, batch, count) parse.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { headers as natsHeaders } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes } from "../../src/errors.js";
import type { RelayError } from "../../src/errors.js";
import { WindowController } from "../../src/link/window-controller.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { parsePubAck } from "../../src/nats/publisher.js";
import type { JetStreamPublisher, PubAck, PublishCallback } from "../../src/nats/publisher.js";
import { check } from "../helpers/check.js";
import { testDelivery } from "../helpers/deliveries.js";
import { testPipeline } from "../helpers/test-pipeline.js";

const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(new URL(`../fixtures/puback/${name}`, import.meta.url)));

/** The reply's status line, `NATS/1.0 429 Too Many Requests`, as the client gives it. */
function status429() {
  const h = natsHeaders(429, "Too Many Requests");
  assert.equal(h.code, 429);
  return h;
}

test("a 429 PubAck (2.11+, err_code 10167) is DESTINATION_BUSY: retryable, neither a refusal nor a full destination", () => {
  const [err, ack] = parsePubAck({ data: fixture("nats-2.11.0-error-10167.txt"), headers: status429() }, "orders.1");
  assert.equal(ack, null);
  assert.equal(err?.code, ErrorCodes.DESTINATION_BUSY);
  assert.equal(err?.isRetryable(), true);
  assert.match(err?.message ?? "", /too many requests \(code 429, err_code 10167\)/);
  // Without the headers (a client that drops them) the body alone says so; with an empty body the status does.
  assert.equal(parsePubAck({ data: fixture("nats-2.11.0-error-10167.txt"), headers: undefined }, "s")[0]?.code, ErrorCodes.DESTINATION_BUSY);
  assert.equal(parsePubAck({ data: new Uint8Array(0), headers: status429() }, "s")[0]?.code, ErrorCodes.DESTINATION_BUSY);
  // The TTL refusal (10166) stays a refusal: the header policy keeps it from happening.
  assert.equal(parsePubAck({ data: fixture("nats-2.11.0-error-10166.txt"), headers: undefined }, "s")[0]?.code, ErrorCodes.PUBLISH_REJECTED);
});

test("2.12's PubAck fields (val for a counter, batch and count for an atomic batch) parse as a stored message", () => {
  const cases: [string, PubAck][] = [
    ["nats-2.12.0-stored.txt", { stream: "ORD-ers_1", seq: 1, duplicate: false }],
    ["nats-2.12.0-counter.txt", { stream: "ORD-ers_1", seq: 7, duplicate: false }],
    ["nats-2.12.0-batch.txt", { stream: "ORD-ers_1", seq: 9, duplicate: false }],
  ];
  for (const [name, want] of cases) assert.deepEqual(parsePubAck({ data: fixture(name), headers: undefined }, "s"), [null, want], name);
});

const delivery = (seq: number): Delivery => testDelivery(seq);

test("a pipeline answered 429: the publishes are retried in order after a backoff and stored, counted, and the link is never troubled, halted or dead-lettered", async () => {
  const config = parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D }, sourceAcks: each }
`,
    "unit",
  );
  const link = config.links[0];
  assert.ok(link);
  const events: string[] = [];
  const { pipeline, metrics, acked } = testPipeline(link, {
    links: config.links,
    events: {
      publishTrouble: (err: RelayError) => events.push(`trouble ${err.code}`),
      guardTrouble: () => events.push("guard"),
      halt: (err: RelayError) => events.push(`halt ${err.code}`),
      destinationRestarted: () => events.push("restarted"),
    },
  });
  // The first three publishes are answered 429 (the destination's queue is full), the rest are stored.
  const published: string[] = [];
  let destSeq = 0;
  const publisher = {
    inFlight: 0,
    publish(_subject: string, _data: Uint8Array, headers: { encode(): Uint8Array }, cb: PublishCallback) {
      const id = /Nats-Msg-Id: (\S+)/.exec(Buffer.from(headers.encode()).toString())?.[1] ?? "?";
      published.push(id);
      if (published.length <= 3) {
        const [err, ack] = parsePubAck({ data: fixture("nats-2.11.0-error-10167.txt"), headers: status429() }, "S.x");
        setImmediate(() => cb(err, ack));
        return;
      }
      const seq = ++destSeq;
      setImmediate(() => cb(null, { stream: "D", seq, duplicate: false }));
    },
  } as unknown as JetStreamPublisher;
  pipeline.setDestination({ stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
  pipeline.setPublisher(publisher);
  for (const seq of [1, 2, 3]) pipeline.push(delivery(seq));
  await check(() => acked.length === 3, { name: "all three stored and acked", timeoutMs: 10_000 });
  assert.deepEqual(published, ["m1", "m2", "m3", "m1", "m2", "m3"], "the refused window published again, in order");
  assert.deepEqual(events, [], "no trouble, halt or restart");
  assert.equal((await metrics.publishBackpressure.get()).values[0]?.value, 3, "every 429 answer counted");
  assert.equal(pipeline.pushedBack, 3);
  const errors = (await metrics.errors.get()).values.filter((v) => v.value > 0);
  assert.deepEqual(errors, [], "not an error");
  const outcomes = (await metrics.messages.get()).values.filter((v) => v.value > 0).map((v) => [v.labels.outcome, v.value]);
  assert.deepEqual(outcomes, [["relayed", 3]], "nothing dead-lettered or dropped");
});

test("the pull window shrinks at the first observation after a 429, without waiting for the destination to hold it", () => {
  const c = new WindowController({ batchSize: 100, capMessages: 10_000, capBytes: 1 << 30, initial: 4_000 });
  const base = { rttMs: 1, heldBytes: 0, held: 10, awaitingDestination: 5, sourcePending: 1_000_000 };
  c.observe({ ...base, nowMs: 0, delivered: 0, deliveredBytes: 0 });
  const before = c.window;
  // The relay holds little (the refused messages wait for their backoff): no other signal says "destination".
  const d = c.observe({ ...base, nowMs: 1_000, delivered: 1_000, deliveredBytes: 100_000, pushedBack: true });
  assert.equal(d.limit, "destination");
  assert.ok(d.changed, "applied at once");
  assert.equal(d.window, Math.floor(before * 0.75));
  // Again while the destination keeps answering 429: down to batchSize, never below.
  let w = d.window;
  for (let i = 2; i < 40; i++) w = c.observe({ ...base, nowMs: i * 1_000, delivered: i * 1_000, deliveredBytes: i * 100_000, pushedBack: true }).window;
  assert.equal(w, 100);
});
