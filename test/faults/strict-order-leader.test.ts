import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { withServers } from "../helpers/servers.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { linkYaml, publishIds, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";

/**
 * `to.order: strict` under real destination leader failures (issue #39 item 1): an R3 destination
 * whose stream leader is killed -9 again and again while the link relays a backlog, no guard. The
 * server may lose publishes of the window at each kill; with the chain of expected last sequences
 * nothing may be stored out of source order, nothing lost or stored twice. (That the same loss
 * reorders the destination without the option is proved exactly in
 * test/integration/strict-order.test.ts, with a proxy that loses one publish: under real kills the
 * server's reorder is rare.)
 */
test("destination stream leader killed -9 in a loop, to.order strict: nothing reordered, lost or duplicated", async (t) => {
  const total = scaled(30_000, 100_000);
  const kills = scaled(3, 6);
  const servers = withServers(t);
  const [a, cluster] = await Promise.all([servers.startNats(), servers.startNatsCluster({ size: 3 })]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, cluster.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  await publishIds(nca, src, "m", total);
  const source = await readSource(nca, src);
  const yaml = linkYaml({
    regions: { a: [a.url], b: cluster.urls },
    // A capped rate keeps the transfer going through every kill (a backlog relayed at full speed can end
    // before the second election is over).
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    maxRate: { messages: 2000/s }\n" }],
  }).replace(`to: { region: b, stream: ${dst} }`, `to: { region: b, stream: ${dst}, order: strict }`);
  assert.ok(yaml.includes("order: strict"));
  const { relay } = await startRelay(t, yaml, "b");
  const jsm = await jetstreamManager(ncb);
  let midTransfer = 0;
  for (let k = 0; k < kills; k++) {
    await waitForCount(ncb, dst, Math.floor(total * (0.1 + (0.7 * k) / kills)), 120_000, `before kill ${k + 1}`);
    const leaderName = (await jsm.streams.info(dst)).cluster?.leader;
    const leader = cluster.nodes.find((n) => n.name === leaderName);
    if (!leader) throw new Error(`stream leader ${leaderName} is not one of the cluster's nodes`);
    if ((await streamCount(ncb, dst)) < total - 1_000) midTransfer++;
    await leader.kill();
    // A new leader among the two left, then the killed node back: the next kill finds three again.
    await check(async () => {
      try {
        const now = (await jsm.streams.info(dst)).cluster?.leader;
        return now !== undefined && now !== leaderName;
      } catch {
        return false;
      }
    }, { name: `a new leader after kill ${k + 1}`, timeoutMs: 60_000, intervalMs: 250 });
    await leader.restart();
  }
  assert.ok(midTransfer >= 2, `at least two kills mid-transfer (${midTransfer} of ${kills})`);
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) + (await metricValue(relay, "relay_messages_total", { outcome: "duplicate" })) >= total, {
    name: `all ${total} messages decided`,
    timeoutMs: 180_000,
    intervalMs: 250,
  });
  const report = await checkDelivery({ fault: "destination stream leader kill -9 in a loop (R3), to.order strict", dest: ncb, stream: dst, source });
  const rejections = await metricValue(relay, "relay_order_rejections_total", {});
  const reordered = await metricValue(relay, "relay_reordered_total", {});
  t.diagnostic(`kills ${kills} (${midTransfer} mid-transfer); order rejections ${rejections}; reordered: checker ${report.reordered}, relay_reordered_total ${reordered}; lost ${report.lost}, duplicated ${report.duplicated}`);
  await recordRow(report);
  assertDelivery(report);
  assert.equal(reordered, 0, "the relay saw no reorder either");
});
