import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, TEST_GROUP, waitForCount } from "../helpers/scenario.js";

/**
 * A mesh declared in a few lines (README/docs "Meshes"), and a region added to it by a reload: every
 * relay of the mesh reloads, only the links of the new region start, the others keep their consumers
 * and their run (same Link, same durable), and the running links learn the new direct routes at once
 * (no message from the new region takes two hops and is absorbed as a duplicate).
 */
test("a region added to a running mesh by reload: only its links start, the others keep running, every message exactly once everywhere", async (t) => {
  const started = Date.now();
  const servers = withServers(t);
  const names = ["a", "b", "c", "d"] as const;
  const nodes = await Promise.all(names.map(() => servers.startNats()));
  const stream = uniqueName("MESH");
  const ncs = await Promise.all(nodes.map((n) => connectTo(t, n.url)));
  for (const nc of ncs) await createStream(nc, { name: stream, subjects: [`${stream}.>`] });
  const nc = (region: string): NatsConnection => ncs[names.indexOf(region as (typeof names)[number])]!;

  const yaml = (regions: readonly string[]) => `regions:
${names.map((n, i) => `  ${n}: { servers: ["${nodes[i]?.url}"] }`).join("\n")}
meshes:
  - name: m
    regions: [${regions.join(", ")}]
    streams: [${stream}]
    link: { ackWait: 5s, publishTimeout: 2s }
log: { level: info }
${TEST_GROUP}
shutdown: { grace: 10s }
`;
  const three = ["a", "b", "c"];
  const relays = new Map<string, Awaited<ReturnType<typeof startRelay>>>();
  await Promise.all(three.map(async (r) => relays.set(r, await startRelay(t, yaml(three), r))));
  assert.equal(relays.get("a")?.config.links.length, 6, "3 regions: 6 links from the mesh");

  const before = (
    await Promise.all(three.map((r) => publishIds(nc(r), `${stream}.${r}`, `${r}-1`, 200)))
  ).flat();
  for (const r of three) await waitForCount(nc(r), stream, before.length, 30_000, `in ${r}`);
  // What each running link is before the reload: its run (first state) and its source consumer.
  const linkName = (from: string, to: string) => `m_${stream.toLowerCase()}_${from}-to-${to}`;
  const consumerCreated = async (from: string, to: string) =>
    (await (await jetstreamManager(nc(from))).consumers.info(stream, `relay-${linkName(from, to)}`)).created;
  const runs = new Map<string, string | undefined>();
  const consumers = new Map<string, string>();
  for (const to of three) {
    for (const l of relays.get(to)!.relay.status().links) runs.set(l.name, l.stateHistory[0]?.at);
    for (const from of three.filter((f) => f !== to))
      consumers.set(linkName(from, to), await consumerCreated(from, to));
  }
  assert.equal(runs.size, 6);

  // Region d joins: every relay reloads, then d's relay starts.
  const four = parseConfigText(yaml(names), "mesh.yaml");
  assert.equal(four.links.length, 12);
  for (const to of three) {
    const report = await relays.get(to)!.relay.reload(four, "api");
    assert.equal(report.result, "success", `${to}: ${JSON.stringify(report)}`);
    assert.deepEqual(report.added, [linkName("d", to)], `${to}: only the new region's link starts`);
    assert.deepEqual(report.changed ?? [], [], `${to}: no running link restarts`);
    assert.deepEqual(report.removed ?? [], []);
    assert.deepEqual(
      [...(report.unchanged ?? [])].sort(),
      three
        .filter((f) => f !== to)
        .map((f) => linkName(f, to))
        .sort(),
    );
  }
  relays.set("d", await startRelay(t, yaml(names), "d"));

  const after = (
    await Promise.all(names.map((r) => publishIds(nc(r), `${stream}.${r}`, `${r}-2`, 200)))
  ).flat();
  const all = [...before, ...after];
  for (const r of names) await waitForCount(nc(r), stream, all.length, 40_000, `in ${r}`);
  for (const r of names) await assertExactlyOnce(nc(r), stream, all);

  // The links that ran before are the same runs on the same consumers, and they relayed the new messages.
  for (const to of three) {
    const status = relays.get(to)!.relay.status();
    for (const from of three.filter((f) => f !== to)) {
      const name = linkName(from, to);
      const link = status.links.find((l) => l.name === name);
      assert.equal(link?.stateHistory[0]?.at, runs.get(name), `${name}: not restarted`);
      assert.equal(link?.state, "live", name);
      assert.equal(
        await consumerCreated(from, to),
        consumers.get(name),
        `${name}: its durable was not re-created`,
      );
    }
    assert.equal(
      await metricValue(relays.get(to)!.relay, "relay_messages_total", { outcome: "relayed" }),
      2 * 200 + 3 * 200,
      `${to}: 200 from each of the other two before, 200 from each of the other three after`,
    );
  }
  // The running links read d's direct routes at once: no copy of d's messages came by two hops.
  for (const r of names)
    assert.equal(
      await metricValue(relays.get(r)!.relay, "relay_corrections_total", {}),
      0,
      `${r}: no duplicate absorbed`,
    );
  assert.ok(Date.now() - started < 60_000, `bounded: took ${Date.now() - started} ms`);
  // Stopped here, while their servers run (the hooks stop the servers first); stop() is idempotent.
  await Promise.all([...relays.values()].map((r) => r.relay.stop(AbortSignal.timeout(5_000))));
});
