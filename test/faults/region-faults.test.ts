import { test } from "node:test";
import { withServers } from "../helpers/servers.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import type { NatsConnection } from "@nats-io/nats-core";
import assert from "node:assert/strict";
import { startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, linkYaml, publishIds, waitForCount, twoRegions } from "../helpers/scenario.js";
import { jetstreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import { createLogger } from "../../src/observability/logger.js";
import { Relay } from "../../src/relay.js";

const TOTAL = 10_000;

test("destination is a 3-node cluster whose stream leader is killed mid-transfer", async (t) => {
  const servers = withServers(t);
  const [a, cluster] = await Promise.all([servers.startNats(), servers.startNatsCluster({ size: 3 })]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, cluster.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  const ids = await publishIds(nca, src, "m", TOTAL);
  const { relay } = await startRelay(
    t,
    linkYaml({ regions: { a: [a.url], b: cluster.urls }, links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }] }),
    "b",
  );
  await waitForCount(ncb, dst, TOTAL * 0.2, 60_000, "before the leader is killed");
  const leaderName = (await (await jetstreamManager(ncb)).streams.info(dst)).cluster?.leader;
  const leader = cluster.nodes.find((n) => n.name === leaderName);
  if (!leader) throw new Error(`stream leader ${leaderName} is not one of the cluster's nodes`);
  await assertMidTransfer(ncb, dst, TOTAL);
  await leader.kill();
  await waitForCount(ncb, dst, TOTAL, 90_000, "after the leader was killed").catch(async (err: unknown) => {
    // Say what the cluster thinks, so a failure here can be told apart from a relay problem.
    for (const n of cluster.nodes.filter((x) => x.running)) {
      const jsz = await fetch(`http://127.0.0.1:${n.monitorPort}/jsz?streams=true`).then((r) => r.text(), (e: unknown) => String(e));
      console.error(n.name, jsz.slice(0, 1500));
    }
    console.error(JSON.stringify(relay.status().links[0]));
    throw err;
  });
  await leader.restart();
  await assertExactlyOnce(ncb, dst, ids);
});

for (const side of ["source", "destination"] as const) {
  test(`the ${side} region goes down and comes back mid-transfer`, async (t) => {
    const { a, b, src, dst, nca, ncb } = await twoRegions(t);
    const ids = await publishIds(nca, src, "m", TOTAL);
    const { relay } = await startRelay(
      t,
      linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }] }),
      "b",
    );
    await waitForCount(ncb, dst, TOTAL * 0.2, 60_000, `before the ${side} goes down`);
    const victim = side === "source" ? a : b;
    await assertMidTransfer(ncb, dst, TOTAL);
    await victim.kill();
    await check(() => relay.status().links[0]?.state === "recovering", { name: "link reports recovering", timeoutMs: 20_000 });
    await victim.restart();
    await waitForCount(ncb, dst, TOTAL, 90_000, `after the ${side} came back`);
    await check(() => relay.status().links[0]?.state === "live", { name: "link live again", timeoutMs: 20_000 });
    await assertExactlyOnce(ncb, dst, ids);
  });
}

/**
 * Called right before a fault: with thousands of messages still to go, the fault hits a transfer in
 * progress (otherwise the test would prove nothing).
 */
async function assertMidTransfer(nc: NatsConnection, stream: string, total: number): Promise<void> {
  const n = await streamCount(nc, stream);
  assert.ok(n < total - 2_000, `fault injected mid-transfer (${n} of ${total} were relayed just before it)`);
}

test("a region that is down when the relay starts holds back only its links, which start when it comes up", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const ids = await publishIds(nca, src, "m", 500);
  await a.stop();
  const { relay } = await startRelayWithoutWaiting(t, linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }] }));
  const waiting = relay.status().links[0];
  assert.equal(waiting?.state, "starting");
  assert.match(waiting?.stateReason ?? "", /connecting to regions a and b/);
  assert.equal(relay.readiness().ready, false);
  await a.restart();
  await waitForCount(ncb, dst, ids.length, 60_000);
  await assertExactlyOnce(ncb, dst, ids);
  await check(() => relay.readiness().ready, { name: "ready once the link runs", timeoutMs: 20_000 });
});

async function startRelayWithoutWaiting(t: Parameters<typeof withServers>[0], yaml: string) {
  const relay = new Relay(parseConfigText(yaml, "test.yaml"), "b", { logger: createLogger({ level: "silent" }), pollIntervalMs: 250, startWaitMs: 200 });
  t.after(() => relay.stop(AbortSignal.timeout(5_000)));
  await relay.start();
  return { relay };
}
