import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { withServers } from "../helpers/servers.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { DEFAULT_GROUP, linkYaml, publishIds, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";

/**
 * The destination stream's leader killed -9 under a full window, with the Redis guard and per-entity
 * versions (issue #39): the server may store a later publish while an earlier one fails, and the retry
 * of the earlier one comes after it. Versions must never go backwards in the destination: a retry whose
 * entity has a newer version stored by then is dropped as stale (relay_stale_retries_total), and those
 * drops are the only messages missing, each superseded by a newer version of its entity. Reorders of
 * messages of other entities are the one the relay cannot prevent: allowed as counted.
 */
test("destination stream leader killed mid-transfer, Redis guard with versions: versions never go back", async (t) => {
  // A backlog the window does not finish before the leader is looked up and killed; 5 entities, so a
  // retry lands behind a newer version of its own entity whenever it lands behind 5 or more messages.
  const total = scaled(30_000, 100_000);
  const servers = withServers(t);
  const [a, cluster, redis] = await Promise.all([
    servers.startNats(),
    servers.startNatsCluster({ size: 3 }),
    servers.startRedis({ appendonly: true }),
  ]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, cluster.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  await publishIds(nca, src, "m", total);
  const source = await readSource(nca, src);
  const guard = `    guard:\n      redis: { url: "${redis.url}" }\n      versions: { entity: "header:Test-Entity", version: "header:Test-Version" }\n`;
  const { relay } = await startRelay(
    t,
    linkYaml({
      regions: { a: [a.url], b: cluster.urls },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: guard }],
      // The group bucket lives in the cluster whose node is killed: the default lease, as the scenario was written.
      extra: DEFAULT_GROUP,
    }),
    "b",
  );
  await waitForCount(ncb, dst, total * 0.2, 60_000, "before the leader is killed");
  const leaderName = (await (await jetstreamManager(ncb)).streams.info(dst)).cluster?.leader;
  const leader = cluster.nodes.find((n) => n.name === leaderName);
  if (!leader) throw new Error(`stream leader ${leaderName} is not one of the cluster's nodes`);
  const before = await streamCount(ncb, dst);
  assert.ok(
    before < total - 2_000,
    `fault injected mid-transfer (${before} of ${total} relayed just before it)`,
  );
  await leader.kill();
  const decided = async () =>
    (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) +
    (await metricValue(relay, "relay_messages_total", { outcome: "duplicate" })) +
    (await metricValue(relay, "relay_messages_total", { outcome: "stale" }));
  await check(async () => (await decided()) >= total, {
    name: `all ${total} messages decided`,
    timeoutMs: 120_000,
    intervalMs: 250,
  });
  await leader.restart();
  const reordered = await metricValue(relay, "relay_reordered_total", {});
  const staleRetries = await metricValue(relay, "relay_stale_retries_total", {});
  const staleAtClaim =
    (await metricValue(relay, "relay_corrections_total", { kind: "stale_version" })) - staleRetries;
  const report = await checkDelivery({
    fault: "destination stream leader kill -9 (R3), guard versions",
    dest: ncb,
    stream: dst,
    source,
  });
  t.diagnostic(
    `reordered: checker ${report.reordered}, relay_reordered_total ${reordered}; versions regressed ${report.versionsRegressed}; retries dropped as stale ${staleRetries} (lost ${report.lost}, superseded ${report.lostSuperseded}); stale at the claim ${staleAtClaim}`,
  );
  await recordRow(report);
  assertDelivery(report, { reorderedAllowed: reordered, staleDropsAllowed: staleRetries });
  assert.equal(report.lost, staleRetries, "every missing message is a counted stale retry");
  assert.equal(staleAtClaim, 0, "no stale at the claim: the source's versions rise in its own order");
});
