import { test } from "node:test";
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { LocalBackend } from "../helpers/local-backend.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import { startRelay } from "../helpers/relays.js";
import { deferrals } from "../helpers/teardown.js";
import { linkYaml } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";
import { mergeLiveness, settled, watch, withReport } from "./process-harness.js";
import { startChaosLoad } from "./chaos/load.js";
import type { Relay } from "../../src/relay/relay.js";

/**
 * Silent paths (#20 item 2): the path to the source node the relay uses stops carrying anything, with
 * no close (a middlebox or NAT on the WAN lost its state; a node hangs), while the region's other nodes
 * are reachable. The source region is a 3-node cluster that advertises no client URLs, reached through
 * one proxy per node: the relay can only leave the silent node by noticing the silence. Before: the
 * flow stopped for 35.6 s and `/status` said `live` for 13 s of it. Each test ends in the shared checker:
 * every id once, source order overall and per subject, versions never back, /healthz answering throughout.
 */

const RATE = 200;

async function region(t: TestContext) {
  const servers = new LocalBackend();
  deferrals(t)(() => servers.cleanup());
  const [a, b] = await Promise.all([servers.startNatsCluster({ size: 3, node: () => ({ noAdvertise: true }) }), servers.startNats()]);
  const proxies = await Promise.all(a.nodes.map((n) => startBlackHoleProxy({ port: n.port })));
  deferrals(t)(() => Promise.all(proxies.map((p) => p.close())));
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.urls);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`], replicas: 3 });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  const yaml = linkYaml({
    regions: { a: proxies.map((p) => `nats://127.0.0.1:${p.port}`), b: [b.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
  });
  return { a, b, proxies, src, dst, nca, ncb, yaml };
}

/** The port of the source-region server the relay's connection to region a uses now. */
function sourcePort(relay: Relay): number | undefined {
  const c = relay.status().connections?.find((x) => x.region === "a" && x.state === "connected");
  const port = c?.server?.split(":").at(-1);
  return port === undefined ? undefined : Number(port);
}

test("black hole on the path to the source node in use: status not live within 5 s, flow resumes through another node within 10 s; every id once, in order", async (t) => {
  const r = await region(t);
  const { relay, url } = await startRelay(t, r.yaml, "b", { http: true });
  const live = watch(t, url);
  const load = startChaosLoad(r.nca, r.src, { total: 20 * RATE, ratePerSec: RATE, entities: 10 });
  t.after(() => load.stop());
  await check(async () => relay.status().links[0]?.state === "live" && (await streamCount(r.ncb, r.dst)) > 2 * RATE, { name: "the link is live and relaying", timeoutMs: 30_000 });
  const port = sourcePort(relay);
  const proxy = r.proxies.find((p) => p.port === port);
  if (!proxy) throw new Error(`the relay's source connection (port ${port}) is not through a proxy`);
  const before = await streamCount(r.ncb, r.dst);
  proxy.blackHole();
  const holedAt = Date.now();
  await check(() => !["live", "catching-up"].includes(relay.status().links[0]?.state ?? ""), {
    name: "status says the link is not live within 5 s of the black hole",
    timeoutMs: 5_000,
    intervalMs: 100,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(relay.status().links[0]?.stateHistory.slice(-4))}`);
  });
  const notLiveMs = Date.now() - holedAt;
  // Resumed: another node's connection, and messages published after the black hole began arriving.
  await check(async () => sourcePort(relay) !== port && (await streamCount(r.ncb, r.dst)) > before + RATE, {
    name: "the flow resumes through another source node within 10 s",
    timeoutMs: 10_000,
    intervalMs: 100,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(relay.status().links[0]?.stateHistory.slice(-4))} connections ${JSON.stringify(relay.status().connections)} proxies ${r.proxies.map((p) => p.port).join(",")} holed ${port}`);
  });
  const resumedMs = Date.now() - holedAt;
  t.diagnostic(`black hole: not live after ${notLiveMs} ms, flowing again after ${resumedMs} ms; states ${JSON.stringify(relay.status().links[0]?.stateHistory.slice(-4).map((h) => `${h.state}: ${h.reason ?? ""}`))}`);
  proxy.restore();
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the black hole", 60_000);
  const liveness = await live.stop(); // before the test's own stream reads load this process
  const report = { ...(await checkDelivery({ fault: "black hole to the source node in use", dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })), liveness };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
});

test("the node leading the source consumer SIGSTOPped for 20 s while every connection stays open: flow resumes within 5 s of the new leader; every id once, in order", async (t) => {
  const r = await region(t);
  const { relay, url } = await startRelay(t, r.yaml, "b", { http: true });
  const live = watch(t, url);
  await check(() => relay.status().links[0]?.state === "live", { name: "the link is live", timeoutMs: 30_000 });
  const jsm = await jetstreamManager(r.nca);
  // The consumer's leader is known once its raft group elected one.
  const leaderName = await check(async () => (await jsm.consumers.info(r.src, "relay-a-to-b")).cluster?.leader, {
    name: "the source consumer has a leader",
    timeoutMs: 20_000,
    intervalMs: 200,
  });
  const leader = r.a.nodes.find((n) => n.name === leaderName);
  if (!leader) throw new Error(`no node leads the consumer (${leaderName})`);
  // The test's own connection (load, and its eyes on the cluster) is to the nodes that stay up.
  const watcher = await connectTo(t, r.a.nodes.filter((n) => n !== leader).map((n) => n.url));
  const wjsm = await jetstreamManager(watcher);
  // Published one at a time with retries: the paused node may lead the stream too (an election).
  const load = startChaosLoad(watcher, r.src, { total: 32 * RATE, ratePerSec: RATE, entities: 10 });
  t.after(() => load.stop());
  await check(async () => (await streamCount(r.ncb, r.dst)) > 2 * RATE, { name: "the link relays", timeoutMs: 30_000 });
  await leader.pause();
  const pausedAt = Date.now();
  t.after(() => (leader.running ? leader.resume() : undefined));
  await check(async () => ((await wjsm.consumers.info(r.src, "relay-a-to-b").catch(() => undefined))?.cluster?.leader ?? leaderName) !== leaderName, {
    name: "the cluster elects a new consumer leader",
    timeoutMs: 20_000,
    intervalMs: 200,
  });
  const electedAt = Date.now();
  const atElection = await streamCount(r.ncb, r.dst);
  // The pull left on the paused leader is gone with it; the client pulls again every heartbeat while
  // they are missing, and the first pull after the election reaches the new leader (before: it asked
  // for the consumer's info first, each try waiting out a 5 s timeout and a 2.5-7.5 s backoff).
  await check(async () => (await streamCount(r.ncb, r.dst)) > atElection + RATE, {
    name: "the flow resumes within 5 s of the new leader",
    timeoutMs: 5_000,
    intervalMs: 100,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(relay.status().links[0]?.stateHistory.slice(-4))}`);
  });
  t.diagnostic(`consumer leader paused: new leader after ${electedAt - pausedAt} ms, flowing again ${Date.now() - electedAt} ms later`);
  await check(() => Date.now() - pausedAt >= 20_000, { name: "paused for 20 s", timeoutMs: 25_000, intervalMs: 200 });
  await leader.resume();
  await load.done;
  const stuck = await settled(watcher, r.src, "after the pause", 60_000);
  const liveness = await live.stop();
  const report = { ...(await checkDelivery({ fault: "source consumer leader SIGSTOP 20 s", dest: r.ncb, stream: r.dst, source: await readSource(watcher, r.src) })), liveness };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.ok(relay.status().links[0]?.state === "live" || relay.status().links[0]?.state === "catching-up");
});

test("black hole on the path to the destination node the owner uses, a group of two relays: flow resumes within 10 s, never two owners; every id once, in order", async (t) => {
  const servers = new LocalBackend();
  deferrals(t)(() => servers.cleanup());
  const [a, b] = await Promise.all([servers.startNats(), servers.startNatsCluster({ size: 3, node: () => ({ noAdvertise: true }) })]);
  // Each relay reaches region b through proxies of its own, one per node.
  const proxiesOf = () => Promise.all(b.nodes.map((n) => startBlackHoleProxy({ port: n.port })));
  const [p1, p2] = await Promise.all([proxiesOf(), proxiesOf()]);
  deferrals(t)(() => Promise.all([...p1, ...p2].map((p) => p.close())));
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  const yamlVia = (proxies: readonly { port: number }[]) =>
    linkYaml({
      regions: { a: [a.url], b: proxies.map((p) => `nats://127.0.0.1:${p.port}`) },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }],
      extra: "group: { lease: 3s, renew: 500ms }\n",
    });
  const started = [await startRelay(t, yamlVia(p1), "b", { http: true }), await startRelay(t, yamlVia(p2), "b", { http: true })];
  const relays = started.map((s) => s.relay);
  const lives = started.map((s) => watch(t, s.url));
  const owners = () => relays.filter((r) => r.status().links[0]?.ownership?.self === true);
  await check(() => owners().length === 1 && owners()[0]?.status().links[0]?.state === "live", { name: "one relay owns the link, live", timeoutMs: 30_000 });
  const load = startChaosLoad(nca, src, { total: 20 * RATE, ratePerSec: RATE, entities: 10 });
  t.after(() => load.stop());
  await check(async () => (await streamCount(ncb, dst)) > 2 * RATE, { name: "the link relays", timeoutMs: 30_000 });
  const owner = owners()[0] as Relay;
  const port = Number(owner.status().connections?.find((c) => c.role === "local" && c.state === "connected")?.server?.split(":").at(-1));
  const proxy = [...p1, ...p2].find((p) => p.port === port);
  if (!proxy) throw new Error(`the owner's destination connection (port ${port}) is not through a proxy`);
  // Never two owners: watched every 50 ms from the black hole to the end.
  let twoOwners = 0;
  const watcher = setInterval(() => {
    if (owners().length > 1) twoOwners++;
  }, 50);
  t.after(() => clearInterval(watcher));
  const before = await streamCount(ncb, dst);
  proxy.blackHole();
  const holedAt = Date.now();
  await check(async () => (await streamCount(ncb, dst)) > before + RATE, {
    name: "the flow resumes within 10 s (the owner on another node, or another owner)",
    timeoutMs: 10_000,
    intervalMs: 100,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${relays.map((r) => JSON.stringify(r.status().links[0]?.stateHistory.slice(-3))).join(" | ")}`);
  });
  t.diagnostic(`destination black hole: flowing again after ${Date.now() - holedAt} ms; owner now ${owners()[0] === owner ? "the same relay" : "the other relay"}`);
  proxy.restore();
  await load.done;
  const stuck = await settled(nca, src, "after the black hole", 60_000);
  clearInterval(watcher);
  const liveness = mergeLiveness(await Promise.all(lives.map((l) => l.stop())));
  const report = {
    ...(await checkDelivery({ fault: "black hole to the destination node the owner uses", dest: ncb, stream: dst, source: await readSource(nca, src) })),
    ...(liveness ? { liveness } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.equal(twoOwners, 0, "never two owners at once");
});
