import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import { pino } from "pino";
import { LinkLease } from "../../src/group/lease.js";
import { GroupMembership } from "../../src/group/membership.js";
import { memberKeyOf, memberModeKeyLeaseMs } from "../../src/group/member-session.js";
import { groupSessions } from "../../src/group/session-judge.js";
import type { StoredLeaseValue } from "../../src/group/lease-value.js";
import { check, uniqueName } from "../helpers/check.js";
import { deferrals, withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";

/**
 * Member mode (member-session.ts, session-judge.ts, lease-mode.ts): a member's leases are renewed by
 * the writes of its own member key, not one write per lease per renewal; a contender takes them once
 * that member's session is over (evicted after its lease unchanged), and a relay that predates member
 * mode is kept off by the long lease such a write stores. Real nats-server, real KV writes.
 */
const LEASE_MS = 1_500;
const RENEW_MS = 250;
const logger = pino({ level: process.env.LEASE_TEST_LOG ?? "silent" });

const shared = withServers({ after });
let node: NatsNode;
before(async () => {
  node = await shared.startNats();
});

interface SessionMember {
  readonly id: string;
  readonly nc: NatsConnection;
  readonly membership: GroupMembership;
  readonly leases: LinkLease[];
  readonly losses: string[];
}

/** A member as a relay runs one: its connection, its membership with a session, a lease per key (not started). */
async function sessionMember(
  defer: (fn: () => unknown) => void,
  bucket: string,
  id: string,
  keys: readonly string[],
  leaseMs = LEASE_MS,
  url = node.url,
): Promise<SessionMember> {
  const nc = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  defer(() => nc.close());
  const sessions = groupSessions({ leaseMs, renewMs: RENEW_MS }, logger);
  const membership = new GroupMembership({
    nc,
    bucket,
    member: { id, name: id },
    leaseMs,
    renewMs: RENEW_MS,
    logger,
    sessions,
  });
  defer(() => membership.stop());
  const losses: string[] = [];
  const leases = keys.map((key) => {
    const lease = new LinkLease({ nc, bucket, key, owner: id, leaseMs, renewMs: RENEW_MS, logger, sessions });
    lease.onLost((reason) => losses.push(reason));
    defer(() => lease.stop());
    return lease;
  });
  membership.start();
  return { id, nc, membership, leases, losses };
}

async function openKv(nc: NatsConnection, bucket: string): Promise<KV> {
  return new Kvm(nc).open(bucket);
}

async function stored(
  kv: KV,
  key: string,
): Promise<{ revision: number; value: StoredLeaseValue } | undefined> {
  const e = await kv.get(key);
  return e?.operation === "PUT"
    ? {
        revision: e.revision,
        value: e.json<StoredLeaseValue & { session?: number; memberLeaseMs?: number }>(),
      }
    : undefined;
}

/** Waits until every lease of `m` is valid and its key stores a session (member mode). */
async function inMemberMode(m: SessionMember, kv: KV, keys: readonly string[]): Promise<void> {
  await check(
    async () => {
      if (!m.leases.every((l) => l.valid())) return false;
      for (const key of keys) if ((await stored(kv, key))?.value.session === undefined) return false;
      return true;
    },
    { name: `${m.id} owns every key in member mode`, timeoutMs: 10_000 },
  );
}

test("a member's leases are renewed by its member key: the lease keys stay unchanged while the member key moves, and every lease stays valid", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const keys = [1, 2, 3, 4, 5].map((i) => uniqueName(`link${i}`));
  const a = await sessionMember(defer, bucket, "a", keys);
  for (const l of a.leases) l.start();
  const kv = await openKv(a.nc, bucket);
  await inMemberMode(a, kv, keys);
  const before = await Promise.all(keys.map((k) => stored(kv, k)));
  for (const s of before) {
    assert.equal(s?.value.owner, "a");
    assert.equal(
      s?.value.leaseMs,
      memberModeKeyLeaseMs(LEASE_MS),
      "a write in member mode stores the long key lease (what an older relay judges by)",
    );
    assert.equal((s?.value as { memberLeaseMs?: number }).memberLeaseMs, LEASE_MS);
  }
  const memberRevision = (await kv.get(memberKeyOf("a")))?.revision ?? 0;
  // Three lease durations of member-key renewals: in key mode each lease key would have moved ~18 times.
  await check(
    async () =>
      ((await kv.get(memberKeyOf("a")))?.revision ?? 0) >=
      memberRevision + Math.ceil((3 * LEASE_MS) / RENEW_MS),
    {
      name: "the member key renewed for three lease durations",
      timeoutMs: 10_000,
    },
  );
  const afterwards = await Promise.all(keys.map((k) => stored(kv, k)));
  assert.deepEqual(
    afterwards.map((s) => s?.revision),
    before.map((s) => s?.revision),
    "no lease key was rewritten",
  );
  assert.ok(
    a.leases.every((l) => l.valid() && l.state === "owner"),
    "every lease still valid",
  );
  assert.deepEqual(a.losses, []);
});

test("a member that goes silent (its connection gone): another takes its leases about a lease later by evicting its session, never while it is still valid", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const keys = [1, 2, 3].map((i) => uniqueName(`link${i}`));
  const a = await sessionMember(defer, bucket, "a", keys);
  for (const l of a.leases) l.start();
  const kv = await openKv(a.nc, bucket);
  await inMemberMode(a, kv, keys);
  const b = await sessionMember(defer, bucket, "b", keys);
  const watcher = await connect({ servers: node.url });
  defer(() => watcher.close());
  const kvw = await openKv(watcher, bucket);
  await check(async () => (await kvw.get(memberKeyOf("b")))?.operation === "PUT", {
    name: "b has joined",
    timeoutMs: 5_000,
  });
  for (const l of b.leases) l.start();

  // a goes silent: nothing it sends arrives, nothing arrives to it (as a process cut off would be).
  const cutAt = performance.now();
  await a.nc.close();
  let overlap = 0;
  await check(
    () => {
      for (let i = 0; i < keys.length; i++) if (a.leases[i]!.valid() && b.leases[i]!.valid()) overlap++;
      return b.leases.every((l) => l.valid());
    },
    { name: "b owns every key", timeoutMs: 15_000, intervalMs: 5 },
  );
  const tookMs = performance.now() - cutAt;
  assert.equal(overlap, 0, "never both valid");
  assert.ok(
    tookMs < memberModeKeyLeaseMs(LEASE_MS),
    `taken through the session (${Math.round(tookMs)} ms), not after the key's long lease`,
  );
  assert.equal(
    (await kvw.get(memberKeyOf("a")))?.operation,
    "DEL",
    "a's session was evicted: its member key deleted by CAS",
  );
  for (const key of keys) assert.equal((await stored(kvw, key))?.value.owner, "b");
});

test("a relay without member sessions (an older version) does not take a lease held in member mode while its owner lives; a release hands it over at once", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const key = uniqueName("link");
  const a = await sessionMember(defer, bucket, "a", [key]);
  a.leases[0]!.start();
  const kv = await openKv(a.nc, bucket);
  await inMemberMode(a, kv, [key]);
  const nc = await connect({ servers: node.url });
  defer(() => nc.close());
  const old = new LinkLease({ nc, bucket, key, owner: "old", leaseMs: LEASE_MS, renewMs: RENEW_MS, logger });
  defer(() => old.stop());
  old.start();
  const memberRevision = (await kv.get(memberKeyOf("a")))?.revision ?? 0;
  let both = 0;
  await check(
    async () => {
      if (old.valid() && a.leases[0]!.valid()) both++;
      return (
        ((await kv.get(memberKeyOf("a")))?.revision ?? 0) >=
        memberRevision + Math.ceil((3 * LEASE_MS) / RENEW_MS)
      );
    },
    { name: "three of its own lease durations pass for the older relay", timeoutMs: 10_000, intervalMs: 20 },
  );
  assert.equal(both, 0);
  assert.equal(old.state, "contending", "the older relay waits: the key stores the long lease");
  assert.ok(a.leases[0]!.valid());
  await a.leases[0]!.release();
  await check(() => old.valid(), { name: "the older relay takes the released lease", timeoutMs: 3_000 });
});

test("an evicted member learns it at its next member write: its leases in member mode are lost, then taken back in a new session", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const keys = [uniqueName("link1"), uniqueName("link2")];
  const a = await sessionMember(defer, bucket, "a", keys);
  for (const l of a.leases) l.start();
  const kv = await openKv(a.nc, bucket);
  await inMemberMode(a, kv, keys);
  const session = (await stored(kv, keys[0]!))?.value.session;
  // Another member's eviction, as session-judge.ts does it: a delete by CAS on the revision it saw.
  const entry = await kv.get(memberKeyOf("a"));
  assert.ok(entry);
  await kv.delete(memberKeyOf("a"), { previousSeq: entry.revision }).catch(async () => {
    const again = await kv.get(memberKeyOf("a"));
    await kv.delete(memberKeyOf("a"), { previousSeq: again!.revision });
  });
  await check(() => a.losses.length >= keys.length, { name: "a's leases are lost", timeoutMs: 5_000 });
  assert.ok(
    a.losses.every((r) => /session/.test(r)),
    `lost through the session: ${a.losses.join("; ")}`,
  );
  await check(
    async () => {
      if (!a.leases.every((l) => l.valid())) return false;
      for (const key of keys) {
        const s = (await stored(kv, key))?.value.session;
        if (s === undefined || s === session) return false;
      }
      return true;
    },
    { name: "a owns both again, in a new session", timeoutMs: 10_000 },
  );
});

test("an operator deletes the member key of an owner that has gone silent: the other member (its own lease shorter) takes nothing within the owner's lease, and the two are never both owners", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const keys = [uniqueName("link1"), uniqueName("link2")];
  const ownerLeaseMs = 3_000;
  // a reaches the server through a proxy that can go silent: a owner still within its deadline that cannot
  // write (paused, partitioned) is what a delete must not be mistaken for the end of.
  const proxy = await startBlackHoleProxy({ port: node.port });
  defer(() => proxy.close());
  const a = await sessionMember(defer, bucket, "a", keys, ownerLeaseMs, `nats://127.0.0.1:${proxy.port}`);
  for (const l of a.leases) l.start();
  const operator = await connect({ servers: node.url });
  defer(() => operator.close());
  const kv = await openKv(operator, bucket);
  await inMemberMode(a, kv, keys);
  // b runs with a shorter group.lease than a (a rolling restart that changes it).
  const b = await sessionMember(defer, bucket, "b", keys, 1_000);
  await check(() => b.membership.members.length === 2, { name: "b sees a and itself", timeoutMs: 5_000 });
  for (const l of b.leases) l.start();
  await check(() => b.leases.every((l) => l.state === "contending"), {
    name: "b contends",
    timeoutMs: 5_000,
  });

  proxy.blackHole();
  // `nats kv del`: a plain delete, no CAS.
  const deletedAt = performance.now();
  await kv.delete(memberKeyOf("a"));
  let both = 0;
  let bOwnedAfterMs: number | undefined;
  await check(
    () => {
      for (let i = 0; i < keys.length; i++) if (a.leases[i]!.valid() && b.leases[i]!.valid()) both++;
      if (bOwnedAfterMs === undefined && b.leases.some((l) => l.valid()))
        bOwnedAfterMs = performance.now() - deletedAt;
      return b.leases.every((l) => l.valid());
    },
    { name: "b owns every key", timeoutMs: 4 * ownerLeaseMs, intervalMs: 5 },
  );
  assert.equal(both, 0, "never both owners");
  assert.ok(
    (bOwnedAfterMs ?? 0) >= ownerLeaseMs,
    `b owned a lease ${Math.round(bOwnedAfterMs ?? 0)} ms after the delete, within a's lease (${ownerLeaseMs} ms)`,
  );
  assert.ok(
    a.leases.every((l) => !l.valid()),
    "a is fenced",
  );
  proxy.restore();
});

test("a member that stops with leases it could not release: its key's delete marker names its session ended, and another member takes them at once, not a lease later", async (t) => {
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const keys = [uniqueName("link1"), uniqueName("link2")];
  const ownerLeaseMs = 4_000;
  const a = await sessionMember(defer, bucket, "a", keys, ownerLeaseMs);
  for (const l of a.leases) l.start();
  const operator = await connect({ servers: node.url });
  defer(() => operator.close());
  const kv = await openKv(operator, bucket);
  await inMemberMode(a, kv, keys);
  const b = await sessionMember(defer, bucket, "b", keys);
  await check(() => b.membership.members.length === 2, { name: "b sees a and itself", timeoutMs: 5_000 });
  for (const l of b.leases) l.start();
  // The leases left as a crash leaves them (a release that failed), then the member stops.
  await Promise.all(a.leases.map((l) => l.stop({ release: false })));
  const stoppedAt = performance.now();
  await a.membership.stop();
  const marker = await kv.get(memberKeyOf("a"));
  assert.equal(marker?.operation, "DEL");
  assert.equal(
    marker?.json<{ ended?: { id: string } }>()?.ended?.id,
    "a",
    "the marker names a's session ended",
  );
  await check(() => b.leases.every((l) => l.valid()), {
    name: "b owns every key",
    timeoutMs: 3 * ownerLeaseMs,
  });
  const tookMs = performance.now() - stoppedAt;
  assert.ok(
    tookMs < ownerLeaseMs,
    `taken ${Math.round(tookMs)} ms after a stopped, within a's lease (${ownerLeaseMs} ms): the marker is proof`,
  );
});
