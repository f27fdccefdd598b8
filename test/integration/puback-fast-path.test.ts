import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { JetStreamPublisher, parsePubAck, readPlainPubAck } from "../../src/nats/publisher.js";
import type { PubAck } from "../../src/nats/publisher.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream } from "../helpers/streams.js";

// The PubAck fast path against what the nats-server on PATH writes (2.9.10 here): the stored and the
// duplicate PubAck are read without JSON.parse, and their bytes are the ones checked in under
// test/fixtures/puback/ (which the unit tests use). A server in a JetStream domain adds `domain`:
// that reply goes through JSON.parse.
const servers = withServers({ after });
const fixture = (name: string) => readFileSync(new URL(`../fixtures/puback/${name}`, import.meta.url), "latin1");
const STREAM = "ORD-ers_1";

async function request(nc: NatsConnection, msgId: string): Promise<Uint8Array> {
  const h = headers();
  h.set("Nats-Msg-Id", msgId);
  return (await nc.request("ord.a", "x", { headers: h, timeout: 5_000 })).data;
}

function publish(publisher: JetStreamPublisher, msgId: string): Promise<PubAck> {
  const h = headers();
  h.set("Nats-Msg-Id", msgId);
  return new Promise((resolve, reject) => publisher.publish("ord.b", new TextEncoder().encode("y"), h, (err, ack) => (err ? reject(err) : resolve(ack!))));
}

test("a real server's stored and duplicate PubAcks take the fast path", async (t) => {
  const node = await servers.startNats();
  const nc = await connectTo(t, node.url);
  await createStream(nc, { name: STREAM, subjects: ["ord.>"] });

  const first = await request(nc, "m-1");
  const duplicate = await request(nc, "m-1");
  assert.equal(Buffer.from(first).toString("latin1"), fixture("nats-2.9.10-stored.txt"), "the checked-in bytes are what this server writes");
  assert.equal(Buffer.from(duplicate).toString("latin1"), fixture("nats-2.9.10-duplicate.txt"));
  assert.deepEqual(readPlainPubAck(first), { stream: STREAM, seq: 1, duplicate: false });
  assert.deepEqual(readPlainPubAck(duplicate), { stream: STREAM, seq: 1, duplicate: true });

  // Larger sequences too, and the publisher's own path end to end.
  const publisher = new JetStreamPublisher(nc, 5_000);
  t.after(() => publisher.close());
  for (let i = 2; i <= 12; i++) {
    const raw = await request(nc, `m-${i}`);
    assert.deepEqual(readPlainPubAck(raw, STREAM), { stream: STREAM, seq: i, duplicate: false }, Buffer.from(raw).toString());
  }
  assert.deepEqual(await publish(publisher, "p-1"), { stream: STREAM, seq: 13, duplicate: false });
  assert.deepEqual(await publish(publisher, "p-1"), { stream: STREAM, seq: 13, duplicate: true });
});

test("a server in a JetStream domain writes `domain`: the fast path declines, JSON.parse reads it", async (t) => {
  const node = await servers.startNats({ domain: "hub" });
  const nc = await connectTo(t, node.url);
  await createStream(nc, { name: STREAM, subjects: ["ord.>"] });

  const first = await request(nc, "m-1");
  const duplicate = await request(nc, "m-1");
  assert.equal(Buffer.from(first).toString("latin1"), fixture("nats-2.9.10-domain-stored.txt"));
  assert.equal(Buffer.from(duplicate).toString("latin1"), fixture("nats-2.9.10-domain-duplicate.txt"));
  assert.equal(readPlainPubAck(first), undefined);
  assert.deepEqual(parsePubAck({ data: first, headers: undefined }, "ord.a"), [null, { stream: STREAM, seq: 1, duplicate: false }]);
  assert.deepEqual(parsePubAck({ data: duplicate, headers: undefined }, "ord.a"), [null, { stream: STREAM, seq: 1, duplicate: true }]);
});
