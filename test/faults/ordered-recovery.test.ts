import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { withServers } from "../helpers/servers.js";
import { check } from "../helpers/check.js";
import { createStream, publishMany } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import { TEST_GROUP, twoRegions, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";
import { watch } from "./process-harness.js";

type T = Parameters<typeof withServers>[0];

/** One link a-to-b with the production ack wait (30 s): the held messages must not wait for it. */
function config(aUrl: string, bUrl: string, src: string, dst: string, guard = ""): string {
  return `regions:
  a: { servers: ["${aUrl}"] }
  b: { servers: ["${bUrl}"] }
links:
  - name: a-to-b
    from: { region: a, stream: ${src} }
    to: { region: b, stream: ${dst} }
    ackWait: 30s
    publishTimeout: 2s
${guard}http: { listen: "127.0.0.1:0" }
log: { level: info }
${TEST_GROUP}
`;
}

/**
 * Ids `m-<i>` on 5 subjects, each an update of entity `e<i % 7>` at version i: published one at a time,
 * so versions rise with the stream order and every one of them must be applied (none is stale).
 */
async function publishVersioned(nc: NatsConnection, src: string, from: number, count: number): Promise<void> {
  await publishMany(
    nc,
    count,
    (i) => ({
      subject: `${src}.${(i + from) % 5}`,
      headers: {
        "Nats-Msg-Id": `m-${i + from}`,
        "Entity-Id": `e${(i + from) % 7}`,
        "Entity-Version": String(i + from),
      },
    }),
    1,
  );
}

async function ackPending(nc: NatsConnection, stream: string, durable: string): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.consumers.info(stream, durable)).num_ack_pending;
}

/**
 * The deterministic form of "after a crash, newer messages overtake the ones the dead process held":
 * the relay holds 100 messages it received but could not publish (the destination stream does not
 * exist yet), is SIGKILLed, the destination appears, 10 newer messages are published, the relay restarts.
 * JetStream delivers the 10 at once and would redeliver the 100 only after the 30 s ack wait.
 */
async function heldMessagesGoFirst(t: T, guard: (t: T) => Promise<string>) {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t, { createDestination: false });
  const file = await writeConfig(config(a.url, b.url, src, dst, await guard(t)));
  await publishVersioned(nca, src, 0, 100);

  const first = spawnRelay(t, ["run", "--config", file, "--region", "b"]);
  await check(async () => (await ackPending(nca, src, "relay-a-to-b")) === 100, {
    name: "the relay holds all 100 (destination missing)",
    timeoutMs: 30_000,
  });
  first.signal("SIGKILL");
  await first.exited;

  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  await publishVersioned(nca, src, 100, 10);
  const startedAt = Date.now();
  const second = spawnRelay(t, ["run", "--config", file, "--region", "b"]);
  const live = watch(t, await second.httpUrl());
  await waitForCount(ncb, dst, 110, 20_000, "after the restart");
  const liveness = await live.stop();
  const tookMs = Date.now() - startedAt;
  assert.ok(tookMs < 20_000, `well before the 30 s ack wait (${tookMs} ms)`);
  const source = await readSource(nca, src, { entityHeader: "Entity-Id", versionHeader: "Entity-Version" });
  const report = {
    ...(await checkDelivery({ fault: "held messages after SIGKILL", dest: ncb, stream: dst, source })),
    liveness,
  };
  await recordRow(report);
  assertDelivery(report);
  assert.equal(report.messages, 110);
  assert.match(second.output(), /ordered recovery: 100 messages were held by a previous owner/);
  await second.stop();
}

test("after SIGKILL the messages the dead relay held reach the destination first, in source order, well before ack wait", async (t) => {
  await heldMessagesGoFirst(t, () => Promise.resolve(""));
});

test("the same with a Redis guard and entity versions: the dead relay's claims do not let newer messages pass, no version is lost or goes backwards", async (t) => {
  await heldMessagesGoFirst(t, async (tt) => {
    const redis = await withServers(tt).startRedis({ appendonly: true });
    return `    guard: { redis: { url: "${redis.url}" }, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`;
  });
});

test("the same with cumulative source acks (AckAll): the held messages go first, every id once and in order", async (t) => {
  await heldMessagesGoFirst(t, () => Promise.resolve("    sourceAcks: cumulative\n"));
});
