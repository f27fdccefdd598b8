import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import { pino } from "pino";
import { LinkLease } from "../../src/group/lease.js";
import { LeaseKeyWatches } from "../../src/group/lease-wakeup.js";
import { jetstreamManager } from "@nats-io/jetstream";
import type { LeaseOptions } from "../../src/group/lease.js";
import type { StoredLeaseValue } from "../../src/group/lease-value.js";
import { check, uniqueName } from "../helpers/check.js";
import { deferrals, withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";

// Short but realistic ratios: a lease of 1.5 s renewed every 250 ms (deadline = last send + 1375 ms).
const LEASE_MS = 1_500;
const RENEW_MS = 250;
const logger = pino({ level: process.env.LEASE_TEST_LOG ?? "silent" });

const shared = withServers({ after });
let node: NatsNode;
before(async () => {
  node = await shared.startNats();
});

interface Member {
  lease: LinkLease;
  nc: NatsConnection;
  losses: string[];
}

/** One member = its own connection (as another process would have) and its own lease on `key`. */
async function member(
  defer: (fn: () => unknown) => void,
  servers: string | string[],
  key: string,
  owner: string,
  extra: Partial<LeaseOptions> & { connect?: Record<string, unknown> } = {},
): Promise<Member> {
  const { connect: connectExtra, ...leaseExtra } = extra;
  const nc = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100, ...connectExtra });
  defer(() => nc.close());
  const lease = new LinkLease({ nc, bucket: "relay_leases", key, owner, leaseMs: LEASE_MS, renewMs: RENEW_MS, logger, ...leaseExtra });
  const losses: string[] = [];
  lease.onLost((reason) => losses.push(reason));
  defer(() => lease.stop());
  return { lease, nc, losses };
}

async function openKv(nc: NatsConnection, bucket = "relay_leases"): Promise<KV> {
  return new Kvm(nc).create(bucket, { history: 1, replicas: 1 });
}

/**
 * Samples every lease's valid() every 2 ms (one event loop: each sample is one instant). Records how
 * often more than one was valid and the sequence of lease revisions held by valid owners.
 */
function watchValidity(leases: readonly LinkLease[]) {
  let samples = 0;
  let overlaps = 0;
  const revisions: number[] = [];
  const sample = () => {
    samples++;
    const valid = leases.filter((l) => l.valid());
    if (valid.length > 1) overlaps++;
    for (const l of valid) if (l.leaseRevision !== undefined && revisions.at(-1) !== l.leaseRevision) revisions.push(l.leaseRevision);
  };
  sample();
  const timer = setInterval(sample, 2);
  return {
    /** Takes a last sample, then stops. */
    stop() {
      clearInterval(timer);
      sample();
      return { samples, overlaps, revisions };
    },
  };
}

function assertIncreasing(revisions: readonly number[]): void {
  for (let i = 1; i < revisions.length; i++) assert.ok(revisions[i]! > revisions[i - 1]!, `lease revisions strictly increase: ${revisions.join(", ")}`);
}

/** Waits `ms` of real time while asserting `fn` stays true at every 5 ms sample. */
async function holds(ms: number, what: string, fn: () => boolean): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    assert.ok(fn(), what);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const ownerOf = (members: readonly Member[]) => members.find((m) => m.lease.valid());

test("a single member acquires at once and renews: the key's revision moves, the lease revision stays", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const a = await member(defer, node.url, key, "a");
  // A member's first look at a bucket younger than the lease holds off (lease-bucket.ts): this one is older.
  await openKv(a.nc);
  const created = Date.parse((await (await jetstreamManager(a.nc)).streams.info("KV_relay_leases")).created);
  await check(() => Date.now() - created > LEASE_MS + 100, { name: "the bucket is older than the lease", timeoutMs: 5_000 });
  const started = performance.now();
  a.lease.start();
  const leaseRevision = await a.lease.acquired();
  assert.ok(performance.now() - started < 1_000, "acquired at once");
  assert.equal(a.lease.state, "owner");
  assert.equal(a.lease.leaseRevision, leaseRevision);
  assert.ok(a.lease.valid());

  const kv = await openKv(a.nc);
  assert.equal((await kv.status()).replicas, 1, "R3 refused by a single server: the bucket fell back to R1");
  const first = await kv.get(key);
  assert.ok(first && first.revision >= leaseRevision);
  const renewed = await check(
    async () => {
      const e = await kv.get(key);
      return e && e.revision >= first.revision + 3 ? e : undefined;
    },
    { name: "three renewals", timeoutMs: 3_000 },
  );
  // The stored JSON: the lease revision keeps its wire key `epoch` (relays of every version read it).
  const value = renewed.json<StoredLeaseValue>();
  assert.equal(value.owner, "a");
  assert.equal(value.epoch, leaseRevision, "renewals keep the lease revision, under the JSON key `epoch`");
  assert.equal(a.lease.leaseRevision, leaseRevision);
  assert.ok(a.lease.valid());
  assert.deepEqual(a.losses, []);

  // Lifecycle edges: acquired() resolves at once for the owner; honours its signal; stop is idempotent.
  assert.equal(await a.lease.acquired(), leaseRevision);
  await assert.rejects(a.lease.acquired(AbortSignal.abort(new Error("gave up"))), /gave up/);
  await Promise.all([a.lease.stop(), a.lease.stop()]);
  await a.lease.closed();
  assert.equal(a.lease.state, "stopped");
  assert.equal(a.lease.valid(), false);
  await assert.rejects(a.lease.acquired(), { name: "AbortError" });
  assert.equal((await kv.get(key))?.operation, "DEL", "stop released the key");
});

test("a second member waits while the first renews", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const a = await member(defer, node.url, key, "a");
  const b = await member(defer, node.url, key, "b");
  a.lease.start();
  const leaseRevision = await a.lease.acquired();
  b.lease.start();
  const kv = await openKv(a.nc);
  const before = (await kv.get(key))!.revision;
  await holds(2 * LEASE_MS, "a stays the only valid owner", () => a.lease.valid() && !b.lease.valid() && b.lease.state === "contending");
  assert.equal(a.lease.leaseRevision, leaseRevision);
  assert.ok((await kv.get(key))!.revision > before + 4, "a kept renewing");
  assert.equal(b.lease.leaseRevision, undefined);
});

test("release hands over at once, long before the lease would expire", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  // Production timings here: 5 s lease, 1 s renew/poll. The successor must not wait for either.
  const slow = { leaseMs: 5_000, renewMs: 1_000 };
  const a = await member(defer, node.url, key, "a", slow);
  const b = await member(defer, node.url, key, "b", slow);
  a.lease.start();
  const revisionA = await a.lease.acquired();
  b.lease.start();
  await check(() => b.lease.state === "contending", { name: "b contending" });
  await new Promise((r) => setTimeout(r, 300)); // b is between polls now
  const sampler = watchValidity([a.lease, b.lease]);
  const released = performance.now();
  await a.lease.stop();
  const revisionB = await b.lease.acquired();
  const handoverMs = performance.now() - released;
  const { overlaps, revisions } = sampler.stop();
  // Under half a poll interval: the successor reacts to the delete (watch), not to its next poll.
  assert.ok(handoverMs < 500, `handover took ${Math.round(handoverMs)} ms`);
  assert.ok(revisionB > revisionA);
  assert.equal(overlaps, 0);
  assert.deepEqual(revisions, [revisionA, revisionB]);
  assert.deepEqual(a.losses, [], "a release is not a loss");
});

test("an abandoned lease is taken over only after leaseMs since the contender saw it change", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const a = await member(defer, node.url, key, "a");
  const b = await member(defer, node.url, key, "b");
  a.lease.start();
  const revisionA = await a.lease.acquired();
  b.lease.start();
  await new Promise((r) => setTimeout(r, 2 * RENEW_MS)); // b has seen a renew
  const sampler = watchValidity([a.lease, b.lease]);
  const abandoned = performance.now();
  await a.lease.stop({ release: false }); // a crash: the key keeps a's last revision
  const revisionB = await b.lease.acquired();
  const tookMs = performance.now() - abandoned;
  const { overlaps } = sampler.stop();
  // b's clock started when it first saw a's last renewal, which a sent at most one renewal before stopping.
  assert.ok(tookMs >= LEASE_MS - RENEW_MS - 50, `took over after ${Math.round(tookMs)} ms`);
  assert.ok(tookMs <= LEASE_MS + 3 * RENEW_MS, `took over after ${Math.round(tookMs)} ms`);
  assert.ok(revisionB > revisionA);
  assert.equal(overlaps, 0);
});

test("expiry is judged by the contender's own monotonic clock", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  let bClock = 0; // frozen until the test moves it
  const a = await member(defer, node.url, key, "a");
  const b = await member(defer, node.url, key, "b", { now: () => bClock });
  a.lease.start();
  await a.lease.acquired();
  b.lease.start();
  await check(() => b.lease.state === "contending", { name: "b contending" });
  await a.lease.stop({ release: false });
  await holds(LEASE_MS + 2 * RENEW_MS, "b does not take over while its own clock stands still", () => b.lease.state === "contending");
  bClock += LEASE_MS;
  await b.lease.acquired(AbortSignal.timeout(2 * RENEW_MS + 500));
});

test("a paused owner sees valid() false on wake-up before doing anything, then re-acquires with a new lease revision", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  let pausedMs = 0;
  const a = await member(defer, node.url, key, "a", { now: () => performance.now() + pausedMs });
  a.lease.start();
  const leaseRevision = await a.lease.acquired();
  assert.ok(a.lease.valid());
  pausedMs += LEASE_MS; // what SIGSTOP for a lease's length looks like to the process's monotonic clock
  assert.equal(a.lease.valid(), false, "invalid synchronously: no I/O, no timer needed");
  await check(() => a.losses.length === 1, { name: "a noticed the loss" });
  // Nobody else took the key, and it still names a: a takes it back at once, as a new lease revision.
  const next = await a.lease.acquired(AbortSignal.timeout(2_000));
  assert.ok(next > leaseRevision);
  assert.match(a.losses[0]!, /deadline/);
});

test("the stored wall time never decides: renewedAt in the past is respected, in the future still expires", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const b = await member(defer, node.url, key, "b");
  const kv = await openKv(b.nc);
  // A "ghost" owner whose wall clock is decades behind renews by CAS like a real one would.
  // Its value as relays store it (the lease revision under the JSON key `epoch`).
  const ghost = (renewedAt: string, leaseRevision?: number) => JSON.stringify({ owner: "ghost", epoch: leaseRevision, renewedAt });
  let revision = await kv.create(key, ghost("1970-01-01T00:00:00.000Z"));
  const leaseRevision = revision;
  b.lease.start();
  const end = performance.now() + 2 * LEASE_MS;
  while (performance.now() < end) {
    await new Promise((r) => setTimeout(r, RENEW_MS));
    revision = await kv.update(key, ghost("1970-01-01T00:00:00.000Z", leaseRevision), revision);
    assert.equal(b.lease.valid(), false, "b never owns a lease that is being renewed");
    assert.equal(b.lease.state, "contending");
  }
  // Last renewal, dated far in the future; then the ghost dies.
  await kv.update(key, ghost("2999-01-01T00:00:00.000Z", leaseRevision), revision);
  const died = performance.now();
  const revisionB = await b.lease.acquired(AbortSignal.timeout(LEASE_MS * 3));
  const tookMs = performance.now() - died;
  assert.ok(tookMs >= LEASE_MS - 50 && tookMs <= LEASE_MS + 3 * RENEW_MS, `took over after ${Math.round(tookMs)} ms`);
  assert.ok(revisionB > revision);
});

test("an owner whose key is overwritten or deleted loses at once, not at its deadline", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const a = await member(defer, node.url, key, "a");
  a.lease.start();
  await a.lease.acquired();
  const kv = await openKv(a.nc);
  // Someone else writes over a's revision (an operator, or a member with a bug).
  const current = (await kv.get(key))!.revision;
  const written = performance.now();
  await kv.update(key, JSON.stringify({ owner: "intruder", renewedAt: new Date().toISOString() }), current);
  await check(() => a.losses.length === 1, { name: "a lost", timeoutMs: 2 * RENEW_MS + 200, intervalMs: 5 });
  assert.ok(performance.now() - written < 2 * RENEW_MS, "at the next renewal, long before the deadline");
  assert.match(a.losses[0]!, /taken by intruder/);
  assert.equal(a.lease.valid(), false);
  // The intruder never renews: a takes the key back after a lease of its own clock, as a new lease revision.
  const leaseRevision = await a.lease.acquired(AbortSignal.timeout(LEASE_MS + 1_000));
  // An operator deletes the key: the watch tells a at once.
  const deleted = performance.now();
  await kv.delete(key);
  await check(() => a.losses.length === 2, { name: "a lost again", timeoutMs: RENEW_MS, intervalMs: 2 });
  assert.ok(performance.now() - deleted < RENEW_MS / 2, "before the next renewal was due");
  assert.match(a.losses[1]!, /deleted/);
  assert.ok((await a.lease.acquired(AbortSignal.timeout(2_000))) > leaseRevision);
});

test("a renewal that lands after its request timed out is recognised, not mistaken for a takeover", async (t) => {
  const defer = deferrals(t);
  const servers = withServers(t);
  const own = await servers.startNats();
  const a = await member(defer, own.url, uniqueName("link"), "a");
  a.lease.start();
  const leaseRevision = await a.lease.acquired();
  await new Promise((r) => setTimeout(r, RENEW_MS + 20));
  // The server stops answering for longer than a request timeout (500 ms) but well within the lease:
  // the renewal sent meanwhile times out on the client, then lands when the server resumes.
  await own.pause();
  await holds(700, "a stays valid while the server is frozen", () => a.lease.valid());
  await own.resume();
  await holds(LEASE_MS, "a stays valid and keeps its lease revision", () => a.lease.valid() && a.lease.leaseRevision === leaseRevision);
  assert.deepEqual(a.losses, []);
});

test("members racing for one key: never two valid at once, lease revisions strictly increase", async (t) => {
  const defer = deferrals(t);
  const key = uniqueName("link");
  const members = await Promise.all(["m1", "m2", "m3", "m4"].map((id) => member(defer, node.url, key, id)));
  const sampler = watchValidity(members.map((m) => m.lease));
  for (const m of members) m.lease.start();
  const acquisitions: number[] = [];
  // Three handovers: release, cut off (the owner's connection closes: it keeps believing until its
  // deadline), release. Each time exactly one of the others must take over.
  for (const leave of ["release", "cut", "release"] as const) {
    const owner = await check(() => ownerOf(members), { name: "one owner", timeoutMs: 5_000 });
    acquisitions.push(owner.lease.leaseRevision!);
    if (leave === "release") await owner.lease.stop();
    else await owner.nc.close();
    await check(() => ownerOf(members) !== undefined && ownerOf(members) !== owner, { name: `a new owner after ${leave}`, timeoutMs: 5_000 });
  }
  acquisitions.push(ownerOf(members)!.lease.leaseRevision!);
  const { samples, overlaps, revisions } = sampler.stop();
  assert.ok(samples > 500, `sampled ${samples} times`);
  assert.equal(overlaps, 0, "never two valid owners at one instant");
  assertIncreasing(revisions);
  assertIncreasing(acquisitions);
  assert.equal(new Set(acquisitions).size, 4);
});

test("the owner's server dies: valid() turns false at its own deadline; after a restart it re-acquires", async (t) => {
  const defer = deferrals(t);
  const servers = withServers(t);
  const own = await servers.startNats();
  const a = await member(defer, own.url, uniqueName("link"), "a");
  a.lease.start();
  const leaseRevision = await a.lease.acquired();
  await new Promise((r) => setTimeout(r, 2 * RENEW_MS));
  await own.kill();
  const killed = performance.now();
  await check(() => !a.lease.valid(), { name: "a invalid", timeoutMs: LEASE_MS + 500, intervalMs: 2 });
  const invalidAfter = performance.now() - killed;
  // The deadline is the last successful renewal's send time + 1500 − 125 ms; that renewal was sent at
  // most one interval (plus its round trip) before the kill.
  assert.ok(invalidAfter <= LEASE_MS - RENEW_MS / 2 + 50, `invalid after ${Math.round(invalidAfter)} ms`);
  assert.ok(invalidAfter >= LEASE_MS - RENEW_MS / 2 - RENEW_MS - 50, `invalid after ${Math.round(invalidAfter)} ms`);
  await check(() => a.lease.state === "contending" && a.losses.length === 1, { name: "a back to contending", timeoutMs: 1_000 });
  await own.restart();
  const next = await a.lease.acquired(AbortSignal.timeout(10_000));
  assert.ok(next > leaseRevision);
  assert.equal(a.losses.length, 1);
});

test("3-node cluster: an owner cut off from the cluster is fenced before another member takes over", async (t) => {
  const defer = deferrals(t);
  const servers = withServers(t);
  const cluster = await servers.startNatsCluster({ size: 3 });
  const [n1, n2, n3] = cluster.nodes;
  const key = uniqueName("link");
  // a only knows n1; b talks to the rest of the cluster.
  const a = await member(defer, n1!.url, key, "a", { connect: { ignoreClusterUpdates: true } });
  const b = await member(defer, [n2!.url, n3!.url], key, "b", { connect: { ignoreClusterUpdates: true } });
  a.lease.start();
  const revisionA = await a.lease.acquired(AbortSignal.timeout(15_000));
  assert.equal((await (await new Kvm(b.nc).open("relay_leases")).status()).replicas, 3, "bucket created R3");
  b.lease.start();
  await holds(LEASE_MS, "a owns while b contends", () => a.lease.valid() && b.lease.state === "contending");
  const sampler = watchValidity([a.lease, b.lease]);
  await n1!.kill();
  const revisionB = await b.lease.acquired(AbortSignal.timeout(20_000));
  const { overlaps, revisions } = sampler.stop();
  assert.equal(overlaps, 0, "never both valid");
  assert.ok(revisionB > revisionA);
  assert.deepEqual(revisions, [revisionA, revisionB]);
  assert.equal(a.lease.valid(), false);
  assert.equal(a.losses.length, 1);
});

test("the bucket is created with min(3, cluster size) replicas: 2 on a 2-node cluster", async (t) => {
  const cluster = await shared.startNatsCluster({ size: 2 });
  const defer = deferrals(t);
  const bucket = uniqueName("grp");
  const a = await member(defer, [...cluster.urls], "k", "a", { bucket });
  a.lease.start();
  await a.lease.acquired(AbortSignal.timeout(20_000));
  const info = await (await new Kvm(a.nc).open(bucket)).status();
  assert.equal(info.replicas, 2);
});

test("a relay's leases share one watch of the bucket: one consumer per relay, a release wakes the successor at once, a delete tells the owner at once", async (t) => {
  const defer = deferrals(t);
  const keys = [uniqueName("link"), uniqueName("link"), uniqueName("link")];
  const slow = { leaseMs: 5_000, renewMs: 1_000 };
  const relayX = new LeaseKeyWatches(logger);
  const relayY = new LeaseKeyWatches(logger);
  const xs = await Promise.all(keys.map((k) => member(defer, node.url, k, "x", { ...slow, keyWatches: relayX })));
  const ys = await Promise.all(keys.map((k) => member(defer, node.url, k, "y", { ...slow, keyWatches: relayY })));
  const jsm = await jetstreamManager(xs[0]!.nc);
  // Watch consumers on the bucket's stream, by what they watch: the whole bucket, or one of our keys.
  // (Earlier tests leave theirs for the server to expire.)
  const watchesOf = async () => {
    const filters: string[] = [];
    for await (const ci of jsm.consumers.list("KV_relay_leases")) filters.push(ci.config.filter_subject ?? "");
    return { bucket: filters.filter((f) => f === "$KV.relay_leases.>").length, perKey: filters.filter((f) => keys.some((k) => f.endsWith(k))).length };
  };
  for (const x of xs) x.lease.start();
  await Promise.all(xs.map((x) => x.lease.acquired()));
  for (const y of ys) y.lease.start();
  await check(() => ys.every((y) => y.lease.state === "contending"), { name: "y contends for every key" });
  // Two relays, three leases each: two watches on the server (a watch per key would be six).
  await check(async () => JSON.stringify(await watchesOf()) === JSON.stringify({ bucket: 2, perKey: 0 }), { name: "one watch consumer per relay", timeoutMs: 5_000 });
  await new Promise((r) => setTimeout(r, 300)); // y is between polls now
  const released = performance.now();
  await xs[0]!.lease.stop();
  await ys[0]!.lease.acquired();
  const handoverMs = performance.now() - released;
  assert.ok(handoverMs < 500, `handover through the shared watch took ${Math.round(handoverMs)} ms`);
  assert.equal(ys[1]!.lease.state, "contending", "the other keys' contenders did not move");
  // An operator deletes a key x still owns: x hears it through its relay's watch, before its next renewal.
  const kv = await openKv(xs[1]!.nc);
  const deleted = performance.now();
  await kv.delete(keys[1]!);
  await check(() => xs[1]!.losses.length === 1, { name: "x lost the deleted key", timeoutMs: 1_000, intervalMs: 2 });
  assert.ok(performance.now() - deleted < 500, "before the next renewal was due");
  assert.deepEqual(xs[2]!.losses, [], "the third key is untouched");
  // Every lease stopped: the shared watches end with them (the server forgets their consumers later).
  await Promise.all([...xs, ...ys].map((m) => m.lease.stop()));
  await check(() => !relayX.watching && !relayY.watching, { name: "the shared watches ended with their leases", timeoutMs: 5_000 });
});
