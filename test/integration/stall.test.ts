import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JsMsg } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { parseConfigText } from "../../src/config/load.js";
import { durableConfig } from "../../src/nats/durable-consumer.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";

/**
 * Stall by progress (#20 item 3): the source has messages for the link and delivers none while every
 * connection is healthy. Here a pull the link did not make holds the consumer's whole MaxAckPending and
 * never acks (an operator's `nats consumer next`, an ex-owner's client): the server delivers nothing
 * more until the ack wait (2 minutes here) while heartbeats keep coming, so nothing looks wrong but the
 * lack of progress. The relay says `stalled` and pulls again (the steps after that, re-creating the
 * consumer and reconnecting, are in test/unit/stall-watch.test.ts), and the flow resumes long before
 * the ack wait.
 */
// A window of one: the foreign pull, waiting first, takes the first message and with it the whole window.
const WINDOW = 1;
const MESSAGES = 50;

test("a consumer that delivers nothing while messages wait is stalled and healed (a new pull): every id once, in order, long before the ack wait", async (t) => {
  const r = await twoRegions(t);
  // (The scenario's links have a 5 s ack wait: this one's is 2 minutes.)
  const yaml = r.yaml(`    inFlight: ${WINDOW}\n    batchSize: ${WINDOW}\n    stallAfter: 2s\n`).replace("ackWait: 5s", "ackWait: 2m");
  const link = parseConfigText(yaml, "test.yaml").links[0];
  if (!link) throw new Error("the config has no link");
  const jsm = await jetstreamManager(r.nca);
  await jsm.consumers.add(r.src, durableConfig(link));
  // The foreign pull waits first, so it is served first: it takes the whole window and never acks.
  const stolen: JsMsg[] = [];
  const foreign = await (await jetstream(r.nca).consumers.get(r.src, link.durableName)).fetch({ max_messages: WINDOW, expires: 60_000 });
  const taking = (async () => {
    for await (const m of foreign) stolen.push(m);
  })();
  taking.catch(() => undefined);
  const { relay } = await startRelay(t, yaml, "b");
  // Pulling: its own pull request waits behind the foreign one. (Its state says catching-up as soon as
  // it owns the link, before its cursor is placed: a message published then would be taken by the
  // foreign pull before the relay looks, and ordered recovery would re-create the consumer under it.)
  await check(async () => (await jsm.consumers.info(r.src, link.durableName)).num_waiting >= 2, { name: "the link pulls, behind the foreign pull", timeoutMs: 20_000 });
  const started = Date.now();
  await publishIds(r.nca, r.src, "m", MESSAGES);
  await check(() => stolen.length === WINDOW, { name: "the foreign pull holds the whole window", timeoutMs: 10_000 });
  await check(() => relay.status().links[0]?.state === "stalled", { name: "the link is stalled", timeoutMs: 10_000 });
  assert.match(relay.status().links[0]?.stateReason ?? "", /no delivery for \d+ s while the source has messages for the link/);
  await waitForCount(r.ncb, r.dst, MESSAGES, 60_000, "every message relayed after the healing");
  const tookMs = Date.now() - started;
  assert.ok(tookMs < 60_000, `healed well within the 2 min ack wait (${tookMs} ms)`);
  // The first step heals it here: pulling again places the cursor again, and the message the foreign
  // pull holds (ack-pending, held by nobody in this relay) moves the cursor back so it goes first.
  assert.equal(await metricValue(relay, "relay_link_stalls_total", { link: "a-to-b", step: "pull" }), 1, "a new pull first");
  assert.equal(await metricValue(relay, "relay_link_stalls_total", { link: "a-to-b", step: "consumer" }), 0, "healed by the first step");
  assertDelivery(await checkDelivery({ fault: "a foreign pull holding the window", dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) }));
  await check(() => relay.status().links[0]?.state === "live", { name: "live again", timeoutMs: 10_000 });
  await taking.catch(() => undefined); // its consumer was deleted under it
});

test("no false stall: an idle source, and a link paused by a full destination, are never stalled", async (t) => {
  const r = await twoRegions(t);
  const jsb = await jetstreamManager(r.ncb);
  const { relay } = await startRelay(t, r.yaml("    stallAfter: 1s\n"), "b");
  await publishIds(r.nca, r.src, "a", 10);
  await waitForCount(r.ncb, r.dst, 10, 20_000);
  // Idle for 4× stallAfter.
  const idleFrom = Date.now();
  await check(() => Date.now() - idleFrom > 4_000, { name: "idle for 4 s", timeoutMs: 6_000 });
  // The destination takes no more: the link holds what it received and waits for it.
  const full = (await jsb.streams.info(r.dst)).config;
  await jsb.streams.update(r.dst, { ...full, max_msgs: 10, discard: DiscardPolicy.New });
  await publishIds(r.nca, r.src, "b", 50);
  await check(() => relay.status().links[0]?.state === "paused", { name: "paused by the full destination", timeoutMs: 10_000 });
  const pausedFrom = Date.now();
  await check(() => Date.now() - pausedFrom > 4_000, { name: "paused for 4 s", timeoutMs: 6_000 });
  assert.equal(await metricValue(relay, "relay_link_stalls_total", {}), 0, "no stall step taken");
  assert.ok(!relay.status().links[0]?.stateHistory.some((h) => h.state === "stalled"), "never stalled");
  await jsb.streams.update(r.dst, full);
  await waitForCount(r.ncb, r.dst, 60, 20_000, "after the destination takes messages again");
});
