import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { Redis } from "ioredis";
import { GroupKeys } from "../../src/guard/layout.js";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";

/**
 * The guard's lease-revision fence against a lease bucket that starts over. The lease revision is the
 * KV revision of the lease key's acquiring write, which restarts at 1 in a new bucket (`nats kv rm relay_leases`, an R1 bucket lost, a
 * rebuilt region keeping its Redis): the fence compares the bucket's incarnation first, so a new bucket
 * is not fenced by the old one's revisions. And a link that cannot commit (fenced while it holds the
 * lease) is not ready.
 */

const BUCKET = "relay_leases";
const GROUP = `group: { lease: 2s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }`;

/** Revisions of a filler key, so the link's lease revision in this bucket is far above what a new bucket starts at. */
async function bucketWithHistory(nc: NatsConnection, revisions: number): Promise<void> {
  const kv = await new Kvm(nc).create(BUCKET, { history: 1, replicas: 1, allow_direct: false });
  for (let i = 0; i < revisions; i++) await kv.put("filler", String(i));
}

/** Publishes `total` ids `m-<i>` in chunks of 100 every 50 ms: traffic while the test does its fault. */
function trickle(nc: NatsConnection, subjectPrefix: string, total: number) {
  let published = 0;
  const done = (async () => {
    while (published < total) {
      const n = Math.min(100, total - published);
      await publishIds(nc, subjectPrefix, "m", n, published);
      published += n;
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  done.catch(() => undefined);
  return {
    done,
    get published() {
      return published;
    },
  };
}

for (const recreatedBy of ["the relay", "an operator"] as const) {
  test(`the lease bucket is deleted under traffic and re-created by ${recreatedBy} (Redis guard): the link goes on with no LEASE_FENCED, every id once, in order`, async (t) => {
    const r = await twoRegions(t);
    const redis = await r.servers.startRedis({ appendonly: true });
    await bucketWithHistory(r.ncb, 200);
    const { relay, url } = await startRelay(t, r.yaml(`    guard: { redis: { url: "${redis.url}" } }\n`, GROUP), "b", { http: true });
    await check(() => relay.status().links[0]?.ownership?.self === true, { name: "the relay owns the link", timeoutMs: 20_000 });
    const before = relay.status().links[0]?.ownership?.leaseRevision ?? 0;
    assert.ok(before > 200, `lease revision ${before} is past the filler's revisions`);
    const total = 6_000;
    const load = trickle(r.nca, r.src, total);
    await waitForCount(r.ncb, r.dst, 1_000, 30_000, "relayed before the bucket goes");
    const jsm = await jetstreamManager(r.ncb);
    const created = Date.parse((await jsm.streams.info(`KV_${BUCKET}`)).created);
    await jsm.streams.delete(`KV_${BUCKET}`);
    if (recreatedBy === "an operator") await new Kvm(r.ncb).create(BUCKET, { history: 1, replicas: 1, allow_direct: false });
    t.diagnostic(`bucket deleted with ${load.published} of ${total} published`);
    await load.done;
    await waitForCount(r.ncb, r.dst, total, 60_000, "every message relayed after the bucket was re-created").catch((err: unknown) => {
      const l = relay.status().links[0];
      throw new Error(`${String(err)}\nlink: ${JSON.stringify({ state: l?.state, reason: l?.stateReason, ownership: l?.ownership, lastError: l?.lastError })}`, { cause: err });
    });
    assert.ok(Date.parse((await jsm.streams.info(`KV_${BUCKET}`)).created) > created, "the bucket in use is a new one");
    const after = relay.status().links[0]?.ownership?.leaseRevision ?? Number.POSITIVE_INFINITY;
    assert.ok(after < before, `the link holds a lease revision of the new bucket (${after}, was ${before})`);
    assert.equal(await metricValue(relay, "relay_errors_total", { code: "LEASE_FENCED" }), 0, "never fenced");
    const ids = Array.from({ length: total }, (_, i) => `m-${i}`);
    await assertExactlyOnce(r.ncb, r.dst, ids);
    await assertInOrder(r.ncb, r.dst, ids);
    await check(async () => (await fetch(`${url}/readyz`)).status === 200, { name: "ready again", timeoutMs: 10_000 });
  });
}

test("a link whose commits the guard refuses while it holds the lease (LEASE_FENCED) is not ready; once the fence lets it through it is ready again and every id arrives once", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const admin = new Redis(redis.url);
  admin.on("error", () => undefined); // the servers stop before this client does (after hooks run in order)
  t.after(() => admin.disconnect());
  const { relay, url } = await startRelay(t, r.yaml(`    guard: { redis: { url: "${redis.url}" } }\n`, GROUP), "b", { http: true });
  const first = await publishIds(r.nca, r.src, "m", 500);
  await waitForCount(r.ncb, r.dst, first.length, 30_000, "relayed before the fence");
  await check(async () => (await fetch(`${url}/readyz`)).status === 200, { name: "ready", timeoutMs: 10_000 });
  // A fence above anything this relay holds: as a guard that kept the lease revision of a lease it no longer knows.
  const leaseKey = relay.status().links[0]?.ownership?.key;
  assert.ok(leaseKey);
  const fenceKey = new GroupKeys(`b:${r.dst}`, 0).fence(leaseKey);
  assert.ok((await admin.exists(fenceKey)) === 1, `the fence key ${fenceKey} exists`);
  // Its name is shared with relays of other versions, from before the lease revision was renamed from "epoch".
  assert.equal(fenceKey, `relay:{b:${r.dst}}:epoch:${leaseKey}`, "the fence key keeps its wire name");
  await admin.set(fenceKey, "999999999");
  const second = await publishIds(r.nca, r.src, "m", 500, first.length);
  let body = "";
  await check(
    async () => {
      const res = await fetch(`${url}/readyz`);
      body = await res.text();
      return res.status === 503;
    },
    { name: "/readyz 503 while the link is fenced", timeoutMs: 15_000, intervalMs: 200 },
  );
  assert.match(body, /a-to-b/, `the reason names the link: ${body}`);
  assert.match(body, /LEASE_FENCED|fenced/i, `the reason says it is fenced: ${body}`);
  assert.equal(relay.status().links[0]?.ownership?.self, true, "it still holds the lease");
  assert.equal(await metricValue(relay, "relay_guard_fenced", { link: "a-to-b" }), 1);
  // The stale fence goes: the link commits again, and is ready.
  await admin.del(fenceKey);
  await check(async () => (await fetch(`${url}/readyz`)).status === 200, { name: "ready again once the fence lets it through", timeoutMs: 15_000, intervalMs: 200 });
  await waitForCount(r.ncb, r.dst, first.length + second.length, 30_000, "every message relayed");
  await assertExactlyOnce(r.ncb, r.dst, [...first, ...second]);
  assert.equal(await metricValue(relay, "relay_guard_fenced", { link: "a-to-b" }), 0);
});

test("the lease bucket re-created with a creation time earlier than the one the guard's fence has seen (a server clock behind, a rebuilt region keeping its Redis): the fence takes the new bucket; every id once, in order", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const admin = new Redis(redis.url);
  admin.on("error", () => undefined);
  t.after(() => admin.disconnect());
  const { relay, url } = await startRelay(t, r.yaml(`    guard: { redis: { url: "${redis.url}" } }\n`, GROUP), "b", { http: true });
  await check(() => relay.status().links[0]?.ownership?.self === true, { name: "the relay owns the link", timeoutMs: 20_000 });
  const leaseKey = relay.status().links[0]?.ownership?.key;
  assert.ok(leaseKey);
  const total = 4_000;
  const load = trickle(r.nca, r.src, total);
  await waitForCount(r.ncb, r.dst, 1_000, 30_000, "relayed before the bucket goes");
  const jsm = await jetstreamManager(r.ncb);
  const created = Date.parse((await jsm.streams.info(`KV_${BUCKET}`)).created);
  await jsm.streams.delete(`KV_${BUCKET}`);
  // As if the bucket the fence saw last had been stamped a day later than the one the relay now re-creates:
  // the fence has seen the real one, then the later-stamped one (its own now, with a high lease revision).
  const keys = new GroupKeys(`b:${r.dst}`, 0);
  const fenceKey = keys.fence(leaseKey);
  const later = created + 86_400_000;
  await admin.hset(keys.meta, `inc:${fenceKey}`, String(later), `incs:${fenceKey}`, `${created},${later}`);
  await admin.set(fenceKey, "999999");
  await load.done;
  await waitForCount(r.ncb, r.dst, total, 60_000, "every message relayed after the bucket was re-created").catch((err: unknown) => {
    const l = relay.status().links[0];
    throw new Error(`${String(err)}\nlink: ${JSON.stringify({ state: l?.state, reason: l?.stateReason, ownership: l?.ownership, lastError: l?.lastError })}`, { cause: err });
  });
  const recreated = Date.parse((await jsm.streams.info(`KV_${BUCKET}`)).created);
  assert.ok(recreated > created && recreated < later, "the new bucket's time is earlier than the one the fence saw last");
  assert.equal(await admin.hget(keys.meta, `incs:${fenceKey}`), `${created},${later},${recreated}`, "the fence took the new bucket as the newest");
  const ids = Array.from({ length: total }, (_, i) => `m-${i}`);
  await assertExactlyOnce(r.ncb, r.dst, ids);
  await assertInOrder(r.ncb, r.dst, ids);
  await check(async () => (await fetch(`${url}/readyz`)).status === 200, { name: "ready again", timeoutMs: 10_000 });
  assert.equal(await metricValue(relay, "relay_guard_fenced", { link: "a-to-b" }), 0);
});
