import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { watchLiveness } from "../helpers/liveness.js";
import { startRelay } from "../helpers/relays.js";
import { linkYaml, waitForCount } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany } from "../helpers/streams.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";
import { ownershipOverlaps } from "./ownership.js";

/**
 * A partitioned link: subjects carry a partition number at a token (what the server's
 * `partition(N, …)` subject mapping produces; here the publisher computes it), and each partition is
 * worked as a link of its own — its own durable and lease — so one stream spreads over the group.
 * Source order is promised per key (each key is in one partition), not across partitions.
 */

const PARTITIONS = 4;
const KEYS = 40;
const TOTAL = 8_000;

test("a link with 4 partitions over 2 relays: partitions split 2/2, each with its own durable; one relay leaves mid-load and the other takes all 4; every key in order, versions never backwards", async (t) => {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], duplicateWindowMs: 1_000 });
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [
      {
        name: "orders",
        from: "a",
        fromStream: src,
        to: "b",
        toStream: dst,
        extra: `    partitions: { count: ${PARTITIONS}, token: 2 }\n`,
      },
    ],
    extra: "group: { lease: 3s, renew: 500ms }",
  }).replace(`stream: ${src} }`, `stream: ${src}, filter: "${src}.*.>" }`);
  const first = await startRelay(t, yaml, "b", { http: true });
  const second = await startRelay(t, yaml, "b", { http: true });
  const members = [first, second];
  const owned = (m: (typeof members)[number]) => m.relay.status().links.filter((l) => l.ownership?.self).map((l) => l.name);
  await check(() => owned(first).length === 2 && owned(second).length === 2, {
    name: "4 partitions over 2 relays: 2/2",
    timeoutMs: 20_000,
  }).catch((err: unknown) => {
    throw new Error(`${String(err)}; first ${JSON.stringify(owned(first))}, second ${JSON.stringify(owned(second))}`, { cause: err });
  });
  assert.deepEqual([...owned(first), ...owned(second)].sort(), ["orders/p0", "orders/p1", "orders/p2", "orders/p3"]);
  // Each owner creates its partitions' durables right after taking their leases.
  const jsm = await jetstreamManager(nca);
  let durables: string[] = [];
  await check(
    async () => {
      durables = (await jsm.consumers.list(src).next()).map((c) => c.name).sort();
      return durables.length === PARTITIONS;
    },
    { name: "a durable per partition", timeoutMs: 20_000 },
  );
  assert.deepEqual(durables, ["relay-orders-p0", "relay-orders-p1", "relay-orders-p2", "relay-orders-p3"]);

  // Key k goes to partition k % 4; its versions count up in publish order.
  const live = watchLiveness(first.url);
  const sending = (async () => {
    const chunk = 400;
    for (let sent = 0; sent < TOTAL; sent += chunk) {
      await publishMany(nca, chunk, (j) => {
        const i = sent + j;
        const key = i % KEYS;
        return {
          subject: `${src}.${key % PARTITIONS}.k${key}`,
          headers: { "Nats-Msg-Id": `m-${i}`, Entity: `k${key}`, Version: String(Math.floor(i / KEYS)) },
        };
      });
      await delay(50);
    }
  })();
  await waitForCount(ncb, dst, 1_000, 30_000, "both relays relaying");
  await second.relay.stop(AbortSignal.timeout(10_000)); // leaves the group, drains, releases its partitions
  await check(() => owned(first).length === PARTITIONS, { name: "the remaining relay owns all 4 partitions", timeoutMs: 10_000 });
  await sending;
  await waitForCount(ncb, dst, TOTAL, 60_000, "every message");
  const liveness = await live.stop();
  assert.deepEqual(ownershipOverlaps(members.map((m) => m.logs.lines)), [], "no partition had two owners at once");
  const report = {
    ...(await checkDelivery({
      fault: "partitioned link (4) over 2 relays, one leaves",
      dest: ncb,
      stream: dst,
      source: await readSource(nca, src, { entityHeader: "Entity", versionHeader: "Version" }),
    })),
    liveness,
  };
  await recordRow(report);
  // Per key (= per subject) order and versions are promised; across partitions, messages interleave.
  assertDelivery(report, { overallOrder: false });
  assert.ok(report.reordered > 0, "partitions really ran side by side (messages of different partitions interleave)");
});
