import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { nanos } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { readDurable } from "../../src/nats/durable-consumer.js";
import { withServers } from "../helpers/servers.js";
import { uniqueName } from "../helpers/check.js";
import { connectTo, createStream } from "../helpers/streams.js";

let nc!: NatsConnection;
let jsm!: JetStreamManager;
after(() => nc?.close());
const servers = withServers({ after });
before(async () => {
  const node = await servers.startNats();
  nc = await connectTo({ after: () => undefined }, node.url); // closed by the file's own after hook
  jsm = await jetstreamManager(nc);
});

/** A link whose source is a fresh stream, the stream, and the link's config. */
async function linkOnNewStream() {
  const stream = uniqueName("SRC");
  await createStream(nc, { name: stream, subjects: [`${stream}.>`] });
  const config = parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: ${stream} }, to: { region: b, stream: DST } }
`,
    "test",
  );
  return { stream, link: config.links[0]! };
}

test("readDurable clears an inactive_threshold someone else set on the durable", async () => {
  const { stream, link } = await linkOnNewStream();
  await jsm.consumers.add(stream, { durable_name: link.durableName, ack_policy: AckPolicy.Explicit, inactive_threshold: nanos(30_000) });
  assert.equal((await jsm.consumers.info(stream, link.durableName)).config.inactive_threshold, nanos(30_000));

  const info = await readDurable(jsm, link);
  assert.ok(info);
  assert.equal(info.config.inactive_threshold ?? 0, 0, "the update's answer");
  assert.equal((await jsm.consumers.info(stream, link.durableName)).config.inactive_threshold ?? 0, 0, "read back");
  assert.equal(info.config.ack_wait, nanos(link.ackWaitMs), "the link's own settings too");
});

test("a cleared inactive_threshold no longer deletes an idle durable (and one left set does)", async () => {
  const { stream, link } = await linkOnNewStream();
  await jsm.consumers.add(stream, { durable_name: link.durableName, ack_policy: AckPolicy.Explicit, inactive_threshold: nanos(1_000) });
  await jsm.consumers.add(stream, { durable_name: "left-alone", ack_policy: AckPolicy.Explicit, inactive_threshold: nanos(1_000) });
  await readDurable(jsm, link);
  await new Promise((r) => setTimeout(r, 3_500));
  assert.equal((await jsm.consumers.info(stream, link.durableName)).name, link.durableName, "the link's durable is still there");
  await assert.rejects(jsm.consumers.info(stream, "left-alone"), /consumer not found/, "the server does delete idle durables with a threshold");
});

test("readDurable leaves a durable already at the link's settings as it is", async () => {
  const { stream, link } = await linkOnNewStream();
  const created = await jsm.consumers.add(stream, { durable_name: link.durableName, ack_policy: AckPolicy.Explicit, ack_wait: nanos(link.ackWaitMs), max_ack_pending: link.inFlight, max_deliver: -1 });
  const info = await readDurable(jsm, link);
  assert.equal(info?.config.inactive_threshold ?? 0, 0);
  assert.deepEqual(info?.config, created.config);
});
