import { test } from "node:test";
import type { TestContext } from "node:test";
import { deferrals, withServers } from "../helpers/servers.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import type { NatsConnection } from "@nats-io/nats-core";
import assert from "node:assert/strict";
import { metricValue, startRelay } from "../helpers/relays.js";
import { DEFAULT_GROUP, linkYaml, publishIds, waitForCount, twoRegions } from "../helpers/scenario.js";
import { jetstreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import { createLogger } from "../../src/observability/logger.js";
import { HttpServer } from "../../src/observability/http-server.js";
import { Relay } from "../../src/relay/relay.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";
import type { FaultReport } from "./checker.js";
import { watchLiveness } from "../helpers/liveness.js";
import type { LivenessReport, LivenessWatch } from "../helpers/liveness.js";

// A backlog the self-sized window does not finish before the fault (it moves ~20,000 msgs/s on loopback).
const TOTAL = scaled(40_000, 100_000);

test("destination is a 3-node cluster whose stream leader is killed mid-transfer", async (t) => {
  // A backlog the self-sized window does not finish before the leader is looked up and killed.
  const total = scaled(50_000, 100_000);
  const servers = withServers(t);
  const [a, cluster] = await Promise.all([servers.startNats(), servers.startNatsCluster({ size: 3 })]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, cluster.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  await publishIds(nca, src, "m", total);
  // The server may store a later message before an earlier one here (counted by the relay and allowed
  // below); the same reorder moves that entity's version back, so versions are not checked separately.
  const source = await readSource(nca, src, { versions: false });
  const { relay, url } = await startRelay(
    t,
    linkYaml({
      regions: { a: [a.url], b: cluster.urls },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
      // The group bucket lives in the cluster whose node is killed: the default lease, as the scenario was written.
      extra: DEFAULT_GROUP,
    }),
    "b",
    { http: true },
  );
  const live = watch(t, url);
  await waitForCount(ncb, dst, total * 0.2, 60_000, "before the leader is killed");
  const leaderName = (await (await jetstreamManager(ncb)).streams.info(dst)).cluster?.leader;
  const leader = cluster.nodes.find((n) => n.name === leaderName);
  if (!leader) throw new Error(`stream leader ${leaderName} is not one of the cluster's nodes`);
  await assertMidTransfer(ncb, dst, total);
  await leader.kill();
  await waitForCount(ncb, dst, total, 90_000, "after the leader was killed").catch(async (err: unknown) => {
    // Say what the cluster thinks, so a failure here can be told apart from a relay problem.
    for (const n of cluster.nodes.filter((x) => x.running)) {
      const jsz = await fetch(`http://127.0.0.1:${n.monitorPort}/jsz?streams=true`).then(
        (r) => r.text(),
        (e: unknown) => String(e),
      );
      console.error(n.name, jsz.slice(0, 1500));
    }
    console.error(JSON.stringify(relay.status().links[0]));
    throw err;
  });
  await leader.restart();
  await check(() => relay.status().links[0]?.state === "live", {
    name: "link live after the leader change",
    timeoutMs: 20_000,
  });
  // The one fault where the destination itself may store a later message while an earlier one's
  // publish failed (the old leader stored it, or not, and died): nothing lost or duplicated, and every
  // reordering the checker sees is one the relay saw and counted.
  const reorderedMetric = await metricValue(relay, "relay_reordered_total", {});
  const liveness = await live.stop(); // before the test's own stream reads load this process
  const report = await checkDelivery({
    fault: "destination stream leader kill -9 (R3)",
    dest: ncb,
    stream: dst,
    source,
  });
  t.diagnostic(
    `reordered: checker ${report.reordered} (per subject ${report.reorderedBySubject}), relay_reordered_total ${reorderedMetric}`,
  );
  await conclude(t, report, relay, liveness, { reorderedAllowed: reorderedMetric });
  assert.equal(
    report.reordered,
    reorderedMetric,
    "every reordering in the destination is counted in relay_reordered_total",
  );
});

for (const side of ["source", "destination"] as const) {
  test(`the ${side} region goes down and comes back mid-transfer`, async (t) => {
    const { a, b, src, dst, nca, ncb } = await twoRegions(t);
    await publishIds(nca, src, "m", TOTAL);
    const source = await readSource(nca, src);
    const { relay, url } = await startRelay(
      t,
      linkYaml({
        regions: { a: [a.url], b: [b.url] },
        links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
        // Region b holds the group bucket: taking it away runs with the default lease, as the scenario was written.
        ...(side === "destination" ? { extra: DEFAULT_GROUP } : {}),
      }),
      "b",
      { http: true },
    );
    const live = watch(t, url);
    await waitForCount(ncb, dst, TOTAL * 0.2, 60_000, `before the ${side} goes down`);
    const victim = side === "source" ? a : b;
    await assertMidTransfer(ncb, dst, TOTAL);
    await victim.kill();
    await check(() => relay.status().links[0]?.state === "recovering", {
      name: "link reports recovering",
      timeoutMs: 20_000,
    });
    await victim.restart();
    await waitForCount(ncb, dst, TOTAL, 90_000, `after the ${side} came back`);
    await check(() => relay.status().links[0]?.state === "live", {
      name: "link live again",
      timeoutMs: 20_000,
    });
    const liveness = await live.stop(); // before the test's own stream reads load this process
    const report = await checkDelivery({
      fault: `${side} region kill -9 + restart (single node)`,
      dest: ncb,
      stream: dst,
      source,
    });
    await conclude(t, report, relay, liveness);
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
  await publishIds(nca, src, "m", 500);
  const source = await readSource(nca, src);
  await a.stop();
  const { relay, url } = await startRelayWithoutWaiting(
    t,
    linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
    }),
  );
  const live = watch(t, url);
  const waiting = relay.status().links[0];
  assert.equal(waiting?.state, "starting");
  assert.match(waiting?.stateReason ?? "", /connecting to regions a and b/);
  assert.equal(relay.readiness().ready, false);
  await a.restart();
  await waitForCount(ncb, dst, source.length, 60_000);
  await check(() => relay.readiness().ready, { name: "ready once the link runs", timeoutMs: 20_000 });
  const liveness = await live.stop(); // before the test's own stream reads load this process
  const report = await checkDelivery({
    fault: "source region down at relay start",
    dest: ncb,
    stream: dst,
    source,
  });
  await conclude(t, report, relay, liveness);
});

/** A relay whose start does not wait for its regions (startRelay's does), with its HTTP server for the liveness probes. */
async function startRelayWithoutWaiting(t: Parameters<typeof withServers>[0], yaml: string) {
  const relay = new Relay(parseConfigText(yaml, "test.yaml"), "b", {
    logger: createLogger({ level: "silent" }),
    pollIntervalMs: 250,
    startWaitMs: 200,
  });
  const http = new HttpServer({
    host: "127.0.0.1",
    port: 0,
    registry: relay.registry,
    status: () => relay.status(),
    ready: () => relay.readiness(),
  });
  const url = `http://127.0.0.1:${await http.start()}`;
  deferrals(t)(async () => {
    await relay.stop(AbortSignal.timeout(5_000));
    await http.stop();
  });
  await relay.start();
  return { relay, url };
}

/** `/healthz` probes from now until the watcher is stopped (before the checker reads the streams). */
function watch(t: TestContext, url: string): LivenessWatch {
  const live = watchLiveness(url);
  t.after(() => live.stop());
  return live;
}

/** Attaches liveness and the relayed counter, prints and records the report, then asserts the guarantees (order included). */
async function conclude(
  t: TestContext,
  report: FaultReport,
  relay: Relay,
  liveness: LivenessReport,
  opts: { reorderedAllowed?: number } = {},
): Promise<void> {
  const full: FaultReport = {
    ...report,
    liveness,
    relayedMetric: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
  };
  t.diagnostic(
    `${full.fault}: messages ${full.messages}, lost ${full.lost}, duplicated ${full.duplicated}, reordered ${full.reordered} (per subject ${full.reorderedBySubject}), extra ${full.extra}, relayed metric ${full.relayedMetric}, /healthz worst ${liveness.worstMs} ms (${liveness.failures} failed)`,
  );
  await recordRow(full);
  assertDelivery(full, opts);
}
