import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { writeControl } from "../../src/group/link-control.js";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import {
  assertExactlyOnce,
  assertInOrder,
  publishIds,
  twoRegions,
  waitForCount,
} from "../helpers/scenario.js";
import { streamCount } from "../helpers/streams.js";

/**
 * Issue #36 item 5: state keyed by a revision of the group bucket is keyed by (bucket incarnation,
 * revision). A bucket deleted and created again counts its revisions from 1: an operator's pause written
 * in the new bucket is honoured by a relay that knew the old one, and a relay that first sees a bucket
 * just re-created takes no lease until the bucket is as old as the longest lease an owner of the old
 * bucket could still hold.
 */

const BUCKET = "relay_leases";
const STREAM = `KV_${BUCKET}`;

async function openBucket(nc: NatsConnection): Promise<KV> {
  return new Kvm(nc).create(BUCKET, { history: 1, replicas: 1, allow_direct: false });
}

const pause = (paused: boolean) => ({
  paused,
  reason: paused ? "maintenance" : "",
  by: "ops@test",
  at: new Date().toISOString(),
});

test("a pause written in a re-created group bucket (its revisions start again at 1) is honoured by the running relay, and so is the resume", async (t) => {
  const r = await twoRegions(t);
  // Revisions of a filler key: the control key's revision in the old bucket is far above what the new one starts at.
  const old = await openBucket(r.ncb);
  for (let i = 0; i < 200; i++) await old.put("filler", String(i));
  const { relay } = await startRelay(t, r.yaml("", `group: { lease: 2s, renew: 500ms }\n`), "b");
  const link = () => relay.status().links[0];
  await check(() => link()?.state === "live", {
    name: "the relay owns the link and is live",
    timeoutMs: 20_000,
  });
  const leaseKey = link()?.ownership?.key;
  assert.ok(leaseKey);
  // Paused and resumed once in the old bucket: the relay has seen the control key at a high revision.
  await writeControl(old, leaseKey, pause(true));
  await check(async () => (await metricValue(relay, "relay_link_paused", { link: "a-to-b" })) === 1, {
    name: "paused in the old bucket",
    timeoutMs: 30_000,
  });
  const resumedAt = await writeControl(old, leaseKey, pause(false));
  assert.ok(resumedAt > 200, `the resume's revision ${resumedAt} is past the filler's`);
  await check(async () => (await metricValue(relay, "relay_link_paused", { link: "a-to-b" })) === 0, {
    name: "resumed in the old bucket",
    timeoutMs: 30_000,
  });

  const first = await publishIds(r.nca, r.src, "m", 300);
  await waitForCount(r.ncb, r.dst, first.length, 20_000, "relayed before the bucket goes");
  const jsm = await jetstreamManager(r.ncb);
  const created = Date.parse((await jsm.streams.info(STREAM)).created);
  await jsm.streams.delete(STREAM);
  // The relay re-creates the bucket and owns the link again in it.
  await check(
    async () => {
      const info = await jsm.streams.info(STREAM).catch(() => undefined);
      return (
        info !== undefined &&
        Date.parse(info.created) > created &&
        link()?.ownership?.self === true &&
        link()?.state === "live"
      );
    },
    { name: "the relay re-created the bucket and owns the link in it", timeoutMs: 20_000 },
  );
  const fresh = await openBucket(r.ncb);
  const pausedAt = await writeControl(fresh, leaseKey, pause(true));
  assert.ok(
    pausedAt < resumedAt,
    `the pause's revision ${pausedAt} in the new bucket is below the resume's ${resumedAt} in the old one`,
  );
  await check(() => link()?.state === "paused" && link()?.inFlight === 0, {
    name: "the running relay honours the pause written in the new bucket",
    timeoutMs: 30_000,
  });
  assert.equal(await metricValue(relay, "relay_link_paused", { link: "a-to-b" }), 1);
  const second = await publishIds(r.nca, r.src, "m", 300, first.length);
  // The source grows; the destination stays put for 2 s (polled every 150 ms).
  const until = Date.now() + 2_000;
  while (Date.now() < until) {
    assert.equal(await streamCount(r.ncb, r.dst), first.length, "nothing published while paused");
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  await writeControl(fresh, leaseKey, pause(false));
  const ids = [...first, ...second];
  await waitForCount(r.ncb, r.dst, ids.length, 20_000, "everything relayed after the resume");
  await assertExactlyOnce(r.ncb, r.dst, ids);
  await assertInOrder(r.ncb, r.dst, ids);
});

test("a relay that first sees the group bucket just after it was re-created takes no lease until the bucket is group.lease old; on an old bucket it takes the lease at once", async (t) => {
  const r = await twoRegions(t);
  const LEASE_MS = 3_000;
  const yaml = r.yaml("", `group: { lease: 3s, renew: 500ms }\n`);
  // An operator (or another relay) re-created the bucket a moment ago: owners of the old one may still act.
  await openBucket(r.ncb);
  const jsm = await jetstreamManager(r.ncb);
  const created = Date.parse((await jsm.streams.info(STREAM)).created);
  const { relay } = await startRelay(t, yaml, "b");
  let ownedAt = 0;
  await check(
    () => {
      if (relay.status().links[0]?.ownership?.self !== true) return false;
      ownedAt = Date.now();
      return true;
    },
    { name: "the fresh relay owns the link", timeoutMs: 20_000, intervalMs: 20 },
  );
  // The server's clock stamped `created`; this host's clock reads `ownedAt` (the same machine here).
  assert.ok(
    ownedAt - created >= LEASE_MS - 100,
    `the lease was taken ${ownedAt - created} ms after the bucket was created: not before group.lease (${LEASE_MS} ms)`,
  );
  assert.equal(
    await metricValue(relay, "relay_lease_holdoffs_total", { link: "a-to-b", reason: "young_bucket" }),
    1,
    "the hold-off is counted",
  );
  await relay.stop(AbortSignal.timeout(5_000));

  // The bucket is old now: a relay starting on it waits for nothing but the released key.
  const started = Date.now();
  const { relay: next } = await startRelay(t, yaml, "b");
  await check(() => next.status().links[0]?.ownership?.self === true, {
    name: "the next relay owns the link",
    timeoutMs: 20_000,
    intervalMs: 20,
  });
  assert.ok(
    Date.now() - started < LEASE_MS,
    `owned ${Date.now() - started} ms after start: no hold-off on a bucket older than group.lease`,
  );
  assert.equal(
    await metricValue(next, "relay_lease_holdoffs_total", { link: "a-to-b", reason: "young_bucket" }),
    0,
  );
});
