import { test } from "node:test";
import { withServers } from "../helpers/servers.js";
import { uniqueName } from "../helpers/check.js";
import { connectTo, createStream } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, linkYaml, publishIds, waitForCount } from "../helpers/scenario.js";
import assert from "node:assert/strict";

test("A↔B both ways: every message exactly once in both regions, no loops", async (t) => {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const stream = uniqueName("ORDERS");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: stream, subjects: [`${stream}.>`] });
  await createStream(ncb, { name: stream, subjects: [`${stream}.>`] });
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [
      { name: "a-to-b", from: "a", fromStream: stream, to: "b", toStream: stream },
      { name: "b-to-a", from: "b", fromStream: stream, to: "a", toStream: stream },
    ],
  });
  const inA = await startRelay(t, yaml, "a");
  const inB = await startRelay(t, yaml, "b");
  const [idsA, idsB] = await Promise.all([publishIds(nca, `${stream}.a`, "from-a", 3_000), publishIds(ncb, `${stream}.b`, "from-b", 3_000)]);
  const all = [...idsA, ...idsB];
  await waitForCount(nca, stream, all.length, 60_000);
  await waitForCount(ncb, stream, all.length, 60_000);
  // Every relayed copy comes back once on the opposite link and is stopped there.
  const loopsStopped = async () => (await metricValue(inA.relay, "relay_messages_total", { outcome: "loop" })) + (await metricValue(inB.relay, "relay_messages_total", { outcome: "loop" }));
  const deadline = Date.now() + 20_000;
  while ((await loopsStopped()) < all.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await loopsStopped(), all.length, "each relayed message is stopped once as a loop");
  await assertExactlyOnce(nca, stream, all);
  await assertExactlyOnce(ncb, stream, all);
  assert.equal(await metricValue(inA.relay, "relay_corrections_total", {}), 0);
  assert.equal(await metricValue(inB.relay, "relay_corrections_total", {}), 0);
});

test("3-region full mesh: every message exactly once in every region, no loops, no redundant paths", async (t) => {
  const servers = withServers(t);
  const nodes = await Promise.all([servers.startNats(), servers.startNats(), servers.startNats()]);
  const names = ["a", "b", "c"] as const;
  const stream = uniqueName("EVENTS");
  const ncs = await Promise.all(nodes.map((n) => connectTo(t, n.url)));
  for (const nc of ncs) await createStream(nc, { name: stream, subjects: [`${stream}.>`] });
  const links = names.flatMap((from) =>
    names.filter((to) => to !== from).map((to) => ({ name: `${from}-to-${to}`, from, fromStream: stream, to, toStream: stream })),
  );
  const yaml = linkYaml({ regions: Object.fromEntries(names.map((n, i) => [n, [nodes[i]?.url ?? ""]])), links });
  const relays = [];
  for (const n of names) relays.push(await startRelay(t, yaml, n));
  const published = await Promise.all(names.map((n, i) => publishIds(ncs[i]!, `${stream}.${n}`, `from-${n}`, 1_000)));
  const all = published.flat();
  for (const nc of ncs) await waitForCount(nc, stream, all.length, 60_000);
  for (const nc of ncs) await assertExactlyOnce(nc, stream, all);
  // Two hops are never taken when a direct link exists, so no copy is absorbed as a duplicate.
  for (const r of relays) {
    assert.equal(await metricValue(r.relay, "relay_corrections_total", {}), 0);
    assert.equal(await metricValue(r.relay, "relay_messages_total", { outcome: "relayed" }), 2_000);
  }
});
