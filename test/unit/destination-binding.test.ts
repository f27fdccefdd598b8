/**
 * The pipeline's side of the destination binding (review #21 items 1 and 13): a stray PubAck or a
 * 10060 refusal halts at once and nothing from it on is acked; a held destination publishes and acks
 * nothing new; a PubAck sequence going backwards holds; `to.expectStream` stamps the header.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import type { RelayError as RelayErrorType } from "../../src/errors.js";
import { entryContext, newEntry, toDeadLetter } from "../../src/link/entry.js";
import type { Delivery } from "../../src/nats/delivery.js";
import type { SourceAcks } from "../../src/nats/source-acks.js";
import { parsePubAck } from "../../src/nats/publisher.js";
import type { JetStreamPublisher, PubAck } from "../../src/nats/publisher.js";
import { check } from "../helpers/check.js";
import { testDelivery } from "../helpers/deliveries.js";
import { testPipeline } from "../helpers/test-pipeline.js";

const config = (toExtra = "") =>
  parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D${toExtra} }, sourceAcks: each }
`,
    "unit",
  );

type Answer = [RelayErrorType | null, PubAck | null];

/** A pipeline whose publishes are answered, by source seq, with what `answers` says (on the next turn). */
function harness(answers: (seq: number) => Answer | undefined) {
  const link = config().links[0];
  assert.ok(link);
  const acked: number[] = [];
  const published: number[] = [];
  const halts: RelayErrorType[] = [];
  const restarts: string[] = [];
  const later = new Map<number, () => void>();
  const acks = { ack: (reply: string) => acked.push(Number(reply.split(".")[5])) > 0, nak: () => true, working: () => true } as unknown as SourceAcks;
  const { pipeline } = testPipeline(link, {
    acks,
    events: { halt: (err) => halts.push(err), destinationRestarted: (detail) => restarts.push(detail) },
  });
  const publisher = {
    inFlight: 0,
    publish(_subject: string, _data: Uint8Array, headers: { get(k: string): string | undefined }, cb: (err: RelayErrorType | null, ack: PubAck | null) => void) {
      const seq = Number(headers.get("Relay-Source")?.split(" ")[2]);
      published.push(seq);
      const answer = answers(seq);
      if (answer) setImmediate(() => cb(...answer));
      else later.set(seq, () => cb(null, { stream: "D", seq: 1000 + seq, duplicate: false }));
    },
  } as unknown as JetStreamPublisher;
  pipeline.setDestination(facts);
  pipeline.setPublisher(publisher);
  return { pipeline, acked, published, halts, restarts, later };
}

const facts = { stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 60_000 };

const delivery = (seq: number): Delivery => testDelivery(seq, { data: new Uint8Array([1, 2, 3]) });

const stored = (stream: string, seq: number): Answer => [null, { stream, seq, duplicate: false }];
const refused = (): Answer => [new RelayError(ErrorCodes.DESTINATION_MISMATCH, "destination rejected S.x: expected stream does not match (code 400, err_code 10060, bound to stream O)"), null];

test("PubAck parsing: 10060 (expected stream does not match) is a DESTINATION_MISMATCH naming the stream that binds the subject", () => {
  const reply = '{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"O","seq":0}';
  const [err, ack] = parsePubAck({ data: new TextEncoder().encode(reply), headers: undefined }, "x.b.1");
  assert.equal(ack, null);
  assert.equal(err?.code, "DESTINATION_MISMATCH");
  assert.match(err?.message ?? "", /expected stream does not match \(code 400, err_code 10060, bound to stream O\)/);
});

for (const [what, answer] of [
  ["a PubAck from another stream", () => stored("O", 1)],
  ["a 10060 refusal", refused],
] as const) {
  test(`${what} halts once; it and everything published after it stay unacked, what came before is acked`, async () => {
    const h = harness((seq) => (seq === 3 ? answer() : seq === 1 || seq === 2 ? stored("D", seq) : undefined));
    for (const seq of [1, 2, 3, 4, 5]) h.pipeline.push(delivery(seq));
    await check(() => h.halts.length > 0 && h.acked.length === 2, { name: "halted, 1 and 2 acked", timeoutMs: 5_000 });
    // 4 and 5 were published before the answer for 3 came: their PubAcks (stored in D) arrive now.
    for (const [, deliver] of h.later) deliver();
    h.pipeline.push(delivery(6));
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(h.halts.length, 1, "halted once");
    assert.equal(h.halts[0]?.code, "DESTINATION_MISMATCH");
    assert.deepEqual(h.acked, [1, 2], "nothing from the stray message on is acked");
    assert.ok(!h.published.includes(6), "nothing published after the halt");
    assert.equal(h.pipeline.unsettled, 0, "nothing left waiting for a PubAck");
  });
}

test("a held destination publishes nothing, and what gets a PubAck meanwhile is acked only once it is read again", async () => {
  const h = harness(() => undefined);
  h.pipeline.push(delivery(1));
  await check(() => h.published.includes(1), { name: "1 published", timeoutMs: 5_000 });
  h.pipeline.holdDestination();
  h.pipeline.push(delivery(2));
  h.later.get(1)?.();
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(h.published, [1], "2 waits");
  assert.deepEqual(h.acked, [], "1 is stored but not acked while the destination is being read again");
  h.pipeline.setDestination(facts);
  await check(() => h.published.includes(2), { name: "2 published after the hold", timeoutMs: 5_000 });
  assert.deepEqual(h.acked, [1]);
  assert.equal(h.pipeline.destinationHeld, false);
});

test("a PubAck whose sequence went backwards (the stream recreated) holds: not acked until the destination is read again", async () => {
  const h = harness((seq) => stored("D", seq === 1 ? 50 : seq - 1));
  h.pipeline.push(delivery(1));
  await check(() => h.acked.includes(1), { name: "1 acked", timeoutMs: 5_000 });
  h.pipeline.push(delivery(2));
  await check(() => h.restarts.length === 1, { name: "the restart reported", timeoutMs: 5_000 });
  h.pipeline.push(delivery(3));
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(h.acked, [1], "2 held");
  assert.deepEqual(h.published, [1, 2], "3 waits");
  assert.match(h.restarts[0] ?? "", /destination seq 1, below seq 50/);
  h.pipeline.setDestination(facts);
  await check(() => h.acked.length === 3, { name: "2 and 3 acked once the stream was read again", timeoutMs: 5_000 });
});

test("to.expectStream: every relayed message names the destination stream; dead letters and the default do not", () => {
  const on = config(", expectStream: true").links[0];
  const off = config().links[0];
  assert.ok(on && off);
  assert.equal(on.to.expectStream, true);
  assert.equal(off.to.expectStream, undefined);
  const identity = { id: "m1", origin: "a", path: ["a"] };
  const entry = newEntry(delivery(1), identity, entryContext(on));
  assert.equal(entry.headers.get("Nats-Expected-Stream"), "D");
  assert.equal(newEntry(delivery(1), identity, entryContext(off)).headers.get("Nats-Expected-Stream"), undefined);
  toDeadLetter(entry, "dlq.a", "a-to-b", "bad");
  assert.equal(entry.headers.get("Nats-Expected-Stream"), undefined, "the dead-letter stream is another stream");
  assert.equal(entry.headers.get("Nats-Msg-Id"), "m1");
  assert.throws(() => config(", expectStream: yes"), /expectStream/);
});
