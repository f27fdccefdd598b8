import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { withServers } from "../helpers/servers.js";
import { check } from "../helpers/check.js";
import { createStream, publishMany } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertInOrder, twoRegions, waitForCount } from "../helpers/scenario.js";

type T = Parameters<typeof withServers>[0];

/** Region a with a source stream, region b without its destination stream yet: the relay holds what it receives. */
async function destinationMissing(t: T) {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t, { createDestination: false });
  return { src, dst, nca, ncb, yaml };
}

async function consumerInfo(nc: NatsConnection, stream: string) {
  return (await jetstreamManager(nc)).consumers.info(stream, "relay-a-to-b");
}

test("the in-flight window is bounded in bytes: the source stops delivering at inFlightBytes, nothing is dropped or reordered", async (t) => {
  const { src, dst, nca, ncb, yaml } = await destinationMissing(t);
  const size = 256 * 1024;
  const ids = Array.from({ length: 60 }, (_, i) => `big-${i}`);
  await publishMany(nca, ids.length, (i) => ({ subject: `${src}.${i % 3}`, data: new Uint8Array(size).fill(i), headers: { "Nats-Msg-Id": ids[i] ?? "-" } }), 8);
  // 2 MiB bound, pulls of 2 messages: the bound plus what arrives while the consumer update is on its
  // way (a few pulls), never the 15 MiB on offer.
  const { relay } = await startRelay(t, yaml("    batchSize: 2\n    inFlight: 100\n    inFlightBytes: 2MiB\n"), "b");
  await check(async () => ((await consumerInfo(nca, src)).config.max_ack_pending ?? 0) < 8, { name: "MaxAckPending lowered at the byte bound", timeoutMs: 20_000 });
  const held = relay.status().links[0]?.inFlight ?? 0;
  assert.ok(held * size <= 4 * 1024 * 1024, `held ${held} messages of 256 KiB`);
  // Delivered is at most the window (8: 2 MiB over 256 KiB messages) and a couple on the wire.
  const ackPending = (await consumerInfo(nca, src)).num_ack_pending;
  assert.ok(ackPending <= 10, `the server stopped delivering (${ackPending} ack-pending, ${held} held)`);
  assert.ok((await metricValue(relay, "relay_inflight_bytes", { link: "a-to-b" })) >= 0);
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  await waitForCount(ncb, dst, ids.length, 60_000, "once the destination exists");
  await assertInOrder(ncb, dst, ids);
  // Back to the window: the self-sizing window, which starts at two batches (4) and never passes its
  // bytes cap, 2 MiB over the stream's 256 KiB messages (and their headers): 7 or 8.
  await check(
    async () => (await consumerInfo(nca, src)).config.max_ack_pending === (await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" })),
    { name: "MaxAckPending back to the window", timeoutMs: 20_000 },
  );
  const max = (await consumerInfo(nca, src)).config.max_ack_pending ?? 0;
  assert.ok(max >= 4 && max <= 8, `MaxAckPending ${max}`);
});

test("messages held longer than half the ack wait get in-progress acks: the source does not redeliver them", async (t) => {
  const { src, dst, nca, ncb, yaml } = await destinationMissing(t);
  await publishMany(nca, 50, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } }));
  // linkYaml's ack wait is 5 s; the destination is missing for three of them.
  await startRelay(t, yaml(""), "b");
  await check(async () => (await consumerInfo(nca, src)).num_ack_pending === 50, { name: "all 50 held", timeoutMs: 20_000 });
  const heldSince = Date.now();
  await check(async () => Date.now() - heldSince > 15_000 && (await consumerInfo(nca, src)).num_ack_pending === 50, {
    name: "held for three ack waits",
    timeoutMs: 30_000,
    intervalMs: 1_000,
  });
  const info = await consumerInfo(nca, src);
  assert.equal(info.num_redelivered, 0, "nothing redelivered while held");
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  await waitForCount(ncb, dst, 50, 30_000);
  await assertInOrder(ncb, dst, Array.from({ length: 50 }, (_, i) => `m-${i}`));
});
