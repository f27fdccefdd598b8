import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerInfo } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startDelayProxy } from "../helpers/delay-proxy.js";
import { startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, assertInOrder, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { Relay } from "../../src/relay/relay.js";

const linkOf = (relay: Relay) => relay.status().links[0];
const HISTORY = 1_500;

/** Ack floor, delivered and ack-pending of a consumer, for messages and diagnostics. */
const brief = (c: ConsumerInfo) => ({ ackFloor: c.ack_floor, delivered: c.delivered, ackPending: c.num_ack_pending, redelivered: c.num_redelivered, created: c.created });

/**
 * Review #21 item 2: ordered recovery deletes the durable and creates it again under the same name, so
 * the ack subjects of the old consumer and the new one look alike. An old owner whose last cumulative
 * acks are still on their way (a WAN) when it releases the lease would have them land on the new
 * consumer: AckAll takes their large delivery sequence as its floor (nats-server 2.9.10
 * processAckMsg) and ignores every ack of the new owner until its own deliveries count past it, so
 * its ack-pending count only grows and everything is redelivered every ack wait. The relay flushes
 * its source connection (PING/PONG after the acks) before any release: the acks are at the server
 * before the next owner can touch the durable.
 */
test("an old owner's late cumulative acks do not freeze the consumer the next owner re-creates: its ack floor reaches the last message", async (t) => {
  const r = await twoRegions(t);
  const jsa = await jetstreamManager(r.nca);
  // The first relay reaches the source region across a 3 s round trip, the second across 50 ms: its
  // takeover (a few round trips) re-creates the durable while the first one's last acks are on their
  // way (1.5 s), and its own first ack on the new consumer comes a few round trips later, so some of
  // them land before it. (On a direct path that window is ~10 ms and the freeze showed in 2 runs of 3
  // only; on a path as slow as the first one's the takeover outlasts the acks and they land on the old
  // consumer.)
  const wan = await startDelayProxy({ port: r.a.port, oneWayMs: 1_500 });
  t.after(() => wan.close());
  const near = await startDelayProxy({ port: r.a.port, oneWayMs: 25 });
  t.after(() => near.close());
  const group = "group: { lease: 3s, renew: 500ms }";
  const link = [{ name: "a-to-b", from: "a", fromStream: r.src, to: "b", toStream: r.dst }];
  // The flush before the release waits one round trip: within publishTimeout (5 s, not the usual 2 s).
  const yamlVia = (aUrl: string) => linkYaml({ regions: { a: [aUrl], b: [r.b.url] }, links: link, extra: group }).replace("publishTimeout: 2s", "publishTimeout: 5s");
  const first = await startRelay(t, yamlVia(`nats://127.0.0.1:${wan.port}`), "b");
  await check(() => linkOf(first.relay)?.ownership?.self === true && linkOf(first.relay)?.state === "live", { name: "the first relay owns the link and is live", timeoutMs: 45_000 });
  const second = await startRelay(t, yamlVia(`nats://127.0.0.1:${near.port}`), "b");
  await check(() => linkOf(second.relay)?.state === "standby", { name: "the second relay in standby", timeoutMs: 20_000 });
  const durable = first.config.links[0]!.durableName;
  const consumer = () => jsa.consumers.info(r.src, durable);

  // A long history through the first relay: the old consumer's delivery sequences reach past 1,500,
  // far above what the new consumer delivers within the checks below (a few hundred; ack wait 5 s).
  const ids = await publishIds(r.nca, r.src, "old", HISTORY);
  await waitForCount(r.ncb, r.dst, ids.length, 60_000, "relayed by the first relay");

  // Then steady traffic (~100 msgs/s), so the first relay acks continuously: when it stops, its
  // cumulative acks of the last 1.5 s are on the wire to the source, arriving one after another.
  let live = 0;
  let publishing = true;
  const publisher = (async () => {
    while (publishing) {
      ids.push(...(await publishIds(r.nca, r.src, "live", 1, live++)));
      await delay(10);
    }
  })();
  t.after(async () => {
    publishing = false;
    await publisher.catch(() => undefined);
  });
  // Its acks of the live traffic land at the source one after another (the ack floor moves past the history).
  await check(async () => (await consumer()).ack_floor.stream_seq > HISTORY + 100, { name: "the first relay's acks of live traffic reach the source", timeoutMs: 20_000 });

  // The first relay stops: it drains, acks and releases the lease; the second takes over, finds the
  // deliveries that were on their way to the first one ack-pending and re-creates the durable at its
  // ack floor (ordered recovery).
  // The live traffic ends with it: what the new consumer delivers stays far below the old one's count.
  const before = await consumer();
  const stopped = first.relay.stop(AbortSignal.timeout(15_000));
  publishing = false;
  await publisher;
  await stopped;
  await check(() => linkOf(second.relay)?.ownership?.self === true, { name: "the second relay took the link over", timeoutMs: 10_000 });
  await check(() => second.logs.lines.some((l) => /ordered recovery/.test(l)), { name: "the second relay re-created the durable (ordered recovery)", timeoutMs: 10_000 });
  const takenOver = await consumer();
  assert.ok(Date.parse(takenOver.created) > Date.parse(before.created), "the durable was re-created");

  // More traffic, to the new owner only.
  ids.push(...(await publishIds(r.nca, r.src, "after", 200)));
  const lastSeq = (await jsa.streams.info(r.src)).state.last_seq;
  await waitForCount(r.ncb, r.dst, ids.length, 15_000, "everything relayed after the takeover");
  // Not frozen: the new owner's acks count. The floor reaches the last message and nothing stays
  // ack-pending within less than two ack waits (a frozen consumer only redelivers meanwhile).
  let last: ConsumerInfo | undefined;
  await check(
    async () => {
      last = await consumer();
      return last.ack_floor.stream_seq === lastSeq && last.num_ack_pending === 0;
    },
    { name: `the new consumer's ack floor reaches source seq ${lastSeq} with nothing ack-pending`, timeoutMs: 8_000, intervalMs: 200 },
  ).catch((err: unknown) => {
    throw new Error(
      `${(err as Error).message}\nbefore the stop: ${JSON.stringify(brief(before))}\nafter the takeover: ${JSON.stringify(brief(takenOver))}\nnow: ${last ? JSON.stringify(brief(last)) : "?"}`,
    );
  });
  t.diagnostic(`before the stop: ${JSON.stringify(brief(before))}; after the takeover: ${JSON.stringify(brief(takenOver))}; at the end: ${JSON.stringify(brief(last!))}`);
  await assertExactlyOnce(r.ncb, r.dst, ids);
  await assertInOrder(r.ncb, r.dst, ids);
});
