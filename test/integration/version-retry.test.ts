import { test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { MemoryGuard } from "../../src/guard/memory-guard.js";
import { RedisGuard } from "../../src/guard/redis-guard.js";
import { check, uniqueName } from "../helpers/check.js";
import { startPubDropProxy } from "../helpers/pub-drop-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { linkYaml, twoRegions } from "../helpers/scenario.js";
import { startRedisCluster } from "../helpers/local-redis-cluster.js";
import { withServers } from "../helpers/servers.js";
import type { HasAfter } from "../helpers/servers.js";
import { publishMany, readStream } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";

/**
 * A publish that fails while later ones pipelined behind it are stored (what a destination stream
 * leader dying under a window does) is retried after them. With `guard.versions`, the retry is judged
 * again before it goes: a newer version of its entity that reached the destination (sent by this link)
 * or was committed in the guard (by anyone) since makes it stale, so versions never go backwards.
 * A proxy between the relay and the destination loses one chosen publish and passes the rest.
 */

const VERSIONS = `versions: { entity: "header:Test-Entity", version: "header:Test-Version" }`;

/** Two regions, Redis, and a link a-to-b whose destination side goes through a publish-dropping proxy. */
async function setup(t: HasAfter) {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const proxy = await startPubDropProxy(t, r.b.port);
  const yaml = linkYaml({
    regions: { a: [r.a.url], b: [proxy.url] },
    links: [
      {
        name: "a-to-b",
        from: "a",
        fromStream: r.src,
        to: "b",
        toStream: r.dst,
        extra: `    guard: { redis: { url: "${redis.url}" }, ${VERSIONS} }\n`,
      },
    ],
  });
  return { ...r, redis, proxy, yaml };
}

/** One message of entity `entity` at `version`, id `id`, on `${src}.<subject>`. */
const message = (src: string, id: string, entity: string, version: number, subject = "e") => ({
  subject: `${src}.${subject}`,
  headers: { "Nats-Msg-Id": id, "Test-Entity": entity, "Test-Version": String(version) },
});

async function decided(relay: Relay, n: number): Promise<void> {
  await check(
    async () =>
      (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) +
        (await metricValue(relay, "relay_messages_total", { outcome: "stale" })) ===
      n,
    { name: `${n} messages relayed or stale`, timeoutMs: 20_000 },
  );
}

test("a publish lost while the next version of its entity is stored: its retry is stale, never stored after it", async (t) => {
  const { src, dst, nca, ncb, proxy, yaml } = await setup(t);
  // e1 v1, e1 v2, e2 v1: all delivered, claimed and published in one window.
  const sent = [
    message(src, "x-1", "e1", 1),
    message(src, "x-2", "e1", 2),
    message(src, "x-3", "e2", 1, "f"),
  ];
  await publishMany(nca, sent.length, (i) => sent[i]!, 1);
  const lost = proxy.dropPublish("Nats-Msg-Id: x-1\r\n");
  const { relay } = await startRelay(t, yaml, "b", { level: "debug" });
  await lost;
  // x-1 gets no PubAck (publishTimeout 2 s) while x-2 and x-3 are stored; then it is retried.
  await decided(relay, 3);
  const report = await checkDelivery({
    fault: "one publish lost",
    dest: ncb,
    stream: dst,
    source: await readSource(nca, src),
  });
  assert.equal(report.versionsRegressed, 0, `no version went backwards: ${JSON.stringify(report)}`);
  assert.deepEqual(report.samples.lost, ["x-1"], "only the superseded version is missing");
  assertDelivery(report, { staleDropsAllowed: 1 });
  assert.deepEqual(
    (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]),
    ["x-2", "x-3"],
  );
  assert.equal(await metricValue(relay, "relay_corrections_total", { kind: "stale_version" }), 1);
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "stale" }), 1);
  assert.equal(await metricValue(relay, "relay_stale_retries_total", {}), 1);
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 2);
});

test("a publish lost while another writer commits a newer version of its entity: the retry is judged against the guard", async (t) => {
  const { src, dst, nca, ncb, redis, proxy, yaml } = await setup(t);
  await publishMany(nca, 2, (i) => [message(src, "y-1", "e7", 1), message(src, "y-2", "e8", 1, "f")][i]!, 1);
  // Another link writing to the same destination has e7 v5 on its way: claimed now, committed while
  // y-1 (e7 v1) waits for its PubAck.
  const other = new RedisGuard(
    { kind: "redis", url: redis.url },
    { idTtlMs: 3_600_000, claimTtlMs: 30_000, strict: false },
    {
      logger: pino({ level: "silent" }),
      scope: `b:${dst}`,
      linkName: "c-to-b",
    },
  );
  await other.start();
  t.after(() => other.stop());
  const [claimed] = await other.claim([{ id: "z-5", entity: "e7", version: 5 }]);
  assert.equal(claimed?.decision, "relay");
  const lost = proxy.dropPublish("Nats-Msg-Id: y-1\r\n");
  const { relay } = await startRelay(t, yaml, "b");
  await lost;
  await other.commit([
    {
      id: "z-5",
      entity: "e7",
      version: 5,
      token: claimed.token ?? "",
      ...(claimed.key ? { key: claimed.key } : {}),
    },
  ]);
  await decided(relay, 2);
  assert.deepEqual(
    (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]),
    ["y-2"],
    "y-1 (e7 v1) is older than e7 v5 committed meanwhile: not stored",
  );
  assert.equal(await metricValue(relay, "relay_corrections_total", { kind: "stale_version" }), 1);
  assert.equal(await metricValue(relay, "relay_stale_retries_total", {}), 1);
});

test("readVersions answers the committed version of each entity, as a claim compares with it: single Redis, Redis Cluster, memory", async (t) => {
  const [redis, cluster] = await Promise.all([
    withServers(t).startRedis({ appendonly: true }),
    startRedisCluster(t, { masters: 3 }),
  ]);
  const config = { idTtlMs: 600_000, claimTtlMs: 30_000, strict: false };
  const logger = pino({ level: "silent" });
  const guards = {
    single: new RedisGuard({ kind: "redis", url: redis.url }, config, {
      logger,
      scope: uniqueName("B:RV"),
      linkName: "t",
    }),
    cluster: new RedisGuard({ kind: "redis", cluster: { nodes: cluster.seeds } }, config, {
      logger,
      scope: uniqueName("B:RVC"),
      linkName: "t",
    }),
    memory: new MemoryGuard(config, { logger, scope: uniqueName("B:RVM"), linkName: "t" }),
  };
  for (const [name, g] of Object.entries(guards)) {
    await g.start();
    t.after(() => g.stop());
    const items = Array.from({ length: 200 }, (_, i) => ({
      id: `${name}-${i}`,
      entity: `e${i % 40}`,
      version: i,
    }));
    const claimed = await g.claim(items);
    await g.commit(items.map((item, i) => ({ ...item, token: claimed[i]?.token ?? "" })));
    const read = await g.readVersions(["e0", "e7", "e39", "never"]);
    assert.deepEqual(
      Object.fromEntries(read),
      { e0: 160, e7: 167, e39: 199 },
      `${name}: the last committed versions, none for an entity never committed`,
    );
    const again = await g.claim([{ id: `${name}-late`, entity: "e7", version: 167 }]);
    assert.equal(again[0]?.decision, "stale", `${name}: the claim agrees`);
  }
});
