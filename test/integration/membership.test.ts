import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { pino } from "pino";
import { listKeys } from "../../src/group/bucket.js";
import { GroupMembership, MEMBER_PREFIX } from "../../src/group/membership.js";
import { withDeadline } from "../../src/lifecycle/deadline.js";
import type { MemberView } from "../../src/group/membership.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import type { HasAfter } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";

/** A region's group members in the KV bucket, against a real nats-server. */

const LEASE_MS = 1_500;
const RENEW_MS = 250;
const logger = pino({ level: "silent" });

const shared = withServers({ after });
let node: NatsNode;
before(async () => {
  node = await shared.startNats();
});

async function join(t: HasAfter, bucket: string, id: string, forgetAfterMs?: number): Promise<{ membership: GroupMembership; changes: (readonly MemberView[])[] }> {
  const nc = await connect({ servers: node.url });
  const membership = new GroupMembership({ nc, bucket, member: { id, name: `host-${id}` }, leaseMs: LEASE_MS, renewMs: RENEW_MS, logger, ...(forgetAfterMs ? { forgetAfterMs } : {}) });
  const changes: (readonly MemberView[])[] = [];
  membership.onChange((members, changed) => {
    if (changed) changes.push(members);
  });
  t.after(async () => {
    await membership.stop();
    await nc.close();
  });
  membership.start();
  return { membership, changes };
}

const ids = (members: readonly MemberView[]) => members.map((m) => m.id);

test("members see each other join; one that stops is gone from the others' view at once", async (t) => {
  const bucket = uniqueName("grp");
  const a = await join(t, bucket, "a");
  const b = await join(t, bucket, "b");
  await check(() => ids(a.membership.members).join() === "a,b" && ids(b.membership.members).join() === "a,b", { name: "both see a and b", timeoutMs: 5_000 });
  const stoppedAt = performance.now();
  await b.membership.stop();
  await check(() => ids(a.membership.members).join() === "a", { name: "a sees b leave", timeoutMs: 5_000, intervalMs: 10 });
  assert.ok(performance.now() - stoppedAt < LEASE_MS, "a stopped member's deleted key is seen at once, not after the lease");
});

test("a member that crashed (its key left behind) drops out after the lease; one that started after the crash never counts it", async (t) => {
  const bucket = uniqueName("grp");
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const kv = await new Kvm(nc).create(bucket, { history: 1, replicas: 1 });
  const a = await join(t, bucket, "a");
  // "dead" wrote its key once and then died, as a SIGKILLed relay would.
  await kv.put(`${MEMBER_PREFIX}.dead`, JSON.stringify({ id: "dead", name: "host-dead", startedAt: new Date().toISOString() }));
  await check(() => ids(a.membership.members).includes("dead"), { name: "a sees dead join", timeoutMs: 5_000 });
  const seenAt = performance.now();
  await check(() => !ids(a.membership.members).includes("dead"), { name: "dead drops out of a's view", timeoutMs: 5_000, intervalMs: 10 });
  const droppedAfter = performance.now() - seenAt;
  assert.ok(droppedAfter >= LEASE_MS - RENEW_MS, `not before the lease (${Math.round(droppedAfter)} ms)`);
  assert.ok(droppedAfter < LEASE_MS + RENEW_MS, `on time, not at a later read (${Math.round(droppedAfter)} ms)`);
  // A member joining now finds the key stored long ago: it never counts dead as live, not even for a moment.
  const late = await join(t, bucket, "late");
  await check(() => ids(late.membership.members).join() === "a,late", { name: "late sees a and itself", timeoutMs: 5_000 });
  assert.ok(
    late.changes.every((members) => !ids(members).includes("dead")),
    `late's views: ${JSON.stringify(late.changes.map(ids))}`,
  );
});

test("listing member keys while other keys are written and deleted answers every time (kv.keys() could wait out its 5 s heartbeat)", async (t) => {
  const bucket = uniqueName("grp");
  const nc = await connect({ servers: node.url });
  const churner = await connect({ servers: node.url });
  t.after(async () => {
    await nc.close();
    await churner.close();
  });
  const kv = await new Kvm(nc).create(bucket, { history: 1, replicas: 1 });
  const other = await new Kvm(churner).open(bucket);
  await kv.put(`${MEMBER_PREFIX}.keep`, "{}");
  await kv.put("elsewhere", "{}");
  let churning = true;
  const churn = (async () => {
    for (let i = 0; churning; i++) {
      await other.put(`${MEMBER_PREFIX}.k${i % 5}`, "{}");
      await other.delete(`${MEMBER_PREFIX}.k${i % 5}`);
    }
  })();
  let unanswered = 0;
  for (let i = 0; i < 200; i++) {
    const keys = await withDeadline(listKeys(kv, `${MEMBER_PREFIX}.>`), 2_000, "listing member keys").catch(() => undefined);
    if (keys === undefined) unanswered++;
    else {
      assert.ok(keys.includes(`${MEMBER_PREFIX}.keep`), "a key with a value is listed");
      assert.ok(!keys.includes("elsewhere"), "a key outside the filter is not");
    }
  }
  churning = false;
  await churn;
  assert.equal(unanswered, 0, "every listing answered within 2 s");
});

test("the delete marker of a member that stopped is removed once it is old: the listing does not grow with every restart", async (t) => {
  const bucket = uniqueName("grp");
  const a = await join(t, bucket, "a", 500);
  const b = await join(t, bucket, "b");
  await check(() => ids(a.membership.members).join() === "a,b", { name: "a sees b", timeoutMs: 5_000 });
  await b.membership.stop();
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const kv = await new Kvm(nc).open(bucket);
  assert.ok((await listKeys(kv, `${MEMBER_PREFIX}.>`)).includes(`${MEMBER_PREFIX}.b`), "right after the stop, b's delete marker is listed (what the others' watches saw)");
  await check(async () => !(await listKeys(kv, `${MEMBER_PREFIX}.>`)).includes(`${MEMBER_PREFIX}.b`), { name: "b's delete marker removed by a's reads", timeoutMs: 5_000 });
  assert.deepEqual(await listKeys(kv, `${MEMBER_PREFIX}.>`), [`${MEMBER_PREFIX}.a`], "a's own key stays");
  assert.deepEqual(ids(a.membership.members), ["a"]);
});

test("a member unchanged longer than forgetAfter but within the lease it stored is not forgotten (its key is not deleted before its lease)", async (t) => {
  const bucket = uniqueName("grp");
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const kv = await new Kvm(nc).create(bucket, { history: 1, replicas: 1 });
  const storedLeaseMs = 2_500;
  const key = `${MEMBER_PREFIX}.slow`;
  // "slow" runs with a lease longer than the others' forgetAfter; it wrote once and is still within its lease.
  await kv.put(key, JSON.stringify({ id: "slow", name: "host-slow", startedAt: new Date().toISOString(), leaseMs: storedLeaseMs, renewMs: 500 }));
  const writtenAt = performance.now();
  await join(t, bucket, "a", 300);
  let deletedAfterMs: number | undefined;
  await check(
    async () => {
      if ((await kv.get(key))?.operation !== "PUT") deletedAfterMs ??= performance.now() - writtenAt;
      return deletedAfterMs !== undefined;
    },
    { name: "slow's key is forgotten once unchanged for its lease", timeoutMs: 10_000, intervalMs: 20 },
  );
  assert.ok((deletedAfterMs ?? 0) >= storedLeaseMs, `deleted ${Math.round(deletedAfterMs ?? 0)} ms after its write, within its lease (${storedLeaseMs} ms)`);
});
