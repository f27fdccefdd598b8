import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { check } from "../helpers/check.js";
import type { HasAfter } from "../helpers/servers.js";
import { DiscardPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { createStream, readStream, streamCount, updateStream } from "../helpers/streams.js";
import { startGate } from "../helpers/tcp-gate.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { LivenessReport } from "../helpers/liveness.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";
import { mergeLiveness, scrapeMetric, settled, startLoad, terminate, waitReady, watch, withReport } from "./process-harness.js";

/**
 * A region's group loses its owner: the relay process that owns the link is killed or frozen while
 * another member stands by. The lease (3 s here) is what decides: another member is publishing within
 * 5 s of a kill, and a frozen owner that wakes after losing its lease publishes and acks nothing. The
 * destination's duplicate window is 1 s, so a second copy cannot hide behind broker dedup. Every test
 * ends in the checker: every id once, in source order (overall and per subject), /healthz answering.
 */

const LEASE_MS = 3_000;
const DUP_WINDOW_MS = 1_000;
const SETTLE_MS = scaled(120_000, 600_000);

async function setup(t: HasAfter, guard = "", leaseMs = LEASE_MS) {
  const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
  let guardYaml = "";
  if (guard === "redis") {
    const redis = await r.servers.startRedis({ appendonly: true });
    guardYaml = `    guard: { redis: { url: "${redis.url}" } }\n`;
  }
  const config = await writeConfig(
    r.yaml(`    batchSize: 200\n    inFlight: 512\n${guardYaml}`, `group: { lease: ${leaseMs / 1000}s, renew: ${leaseMs / 4}ms }\nhttp: { listen: "127.0.0.1:0" }`),
  );
  return { ...r, config };
}

/** Two regions with two source/destination stream pairs (for two links): `r.src`→`r.dst` and `src2`→`dst2`. */
async function twoStreamPairs(t: HasAfter) {
  const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
  const src2 = `${r.src}_2`;
  const dst2 = `${r.dst}_2`;
  await createStream(r.nca, { name: src2, subjects: [`${src2}.>`] });
  await createStream(r.ncb, { name: dst2, subjects: [`${src2}.>`], duplicateWindowMs: DUP_WINDOW_MS });
  return { r, src2, dst2 };
}

interface Member {
  readonly process: RelayProcess;
  readonly url: string;
}

async function member(t: HasAfter, config: string): Promise<Member> {
  const process = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  return { process, url: await process.httpUrl() };
}

interface StatusBody {
  links: { name: string; state: string; ownership?: { self: boolean; key: string } }[];
  group?: { members: { id: string }[] };
}

async function status(m: Member): Promise<StatusBody> {
  const res = await fetch(`${m.url}/status`, { signal: AbortSignal.timeout(2_000) });
  return (await res.json()) as StatusBody;
}

async function owns(m: Member): Promise<boolean> {
  return (await status(m).catch(() => undefined))?.links[0]?.ownership?.self === true;
}

/** The one member that owns the link (after the group settled), and the others. */
async function ownerOf(members: readonly Member[], what: string): Promise<{ owner: Member; others: Member[] }> {
  let owner: Member | undefined;
  await check(
    async () => {
      const flags = await Promise.all(members.map(owns));
      const holders = members.filter((_, i) => flags[i]);
      owner = holders.length === 1 ? holders[0] : undefined;
      return owner !== undefined;
    },
    { name: `${what}: exactly one member owns the link`, timeoutMs: 20_000, intervalMs: 100 },
  );
  if (!owner) throw new Error("unreachable");
  const found = owner;
  return { owner: found, others: members.filter((m) => m !== found) };
}

const relayed = (m: Member) => scrapeMetric(m.url, "relay_messages_total", { link: "a-to-b", outcome: "relayed" });

test("the owner is SIGKILLed under steady load: another member publishes within 5 s (lease 3 s); every id once, in order", async (t) => {
  const r = await setup(t);
  const rounds = scaled(2, 10);
  const total = scaled(24_000, 200_000);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 1_000 });
  let members = [await member(t, r.config), await member(t, r.config)];
  const liveness: LivenessReport[] = [];
  const failoverMs: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const { owner, others } = await ownerOf(members, `round ${round}`);
    await waitForCount(r.ncb, r.dst, (await streamCount(r.ncb, r.dst)) + 500, 30_000, `round ${round}: the owner relays`);
    const probes = others.map((m) => watch(t, m.url));
    const before = await Promise.all(others.map(relayed));
    const killedAt = Date.now();
    owner.process.signal("SIGKILL");
    await owner.process.exited;
    await check(async () => (await Promise.all(others.map(relayed))).some((n, i) => n > (before[i] ?? 0)), {
      name: `round ${round}: another member publishing within 5 s of the owner's SIGKILL`,
      timeoutMs: 5_000,
      intervalMs: 50,
    });
    failoverMs.push(Date.now() - killedAt);
    for (const p of probes) liveness.push(await p.stop());
    members = [...others, await member(t, r.config)]; // the replacement pod
  }
  t.diagnostic(`failover after SIGKILL (ms): ${failoverMs.join(", ")}`);
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the kills", SETTLE_MS);
  const codes = await Promise.all(members.map((m) => terminate(m.process)));
  const merged = mergeLiveness(liveness);
  const report = {
    ...(await checkDelivery({ fault: `group owner SIGKILL x${rounds} (lease 3 s)`, dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })),
    ...(merged ? { liveness: merged } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.deepEqual(codes, members.map(() => 0), "the surviving members drain and exit 0");
});

for (const guard of ["", "redis"]) {
  test(`the owner is SIGSTOPped for 3× the lease while another takes over, then continued: it publishes nothing after waking and rejoins (${guard ? "Redis guard" : "no guard"}; 1 s duplicate window)`, async (t) => {
    const r = await setup(t, guard);
    const total = scaled(16_000, 100_000);
    // A first part the owner relays in full before it is frozen: with nothing in flight at the freeze,
    // its relayed counter cannot move after it unless it publishes after its lease passed.
    const first = 2_000;
    const members = [await member(t, r.config), await member(t, r.config)];
    const { owner, others } = await ownerOf(members, "before the freeze");
    await startLoad(r.nca, r.src, first, { ratePerSec: 1_000 }).done;
    const idle = await settled(r.nca, r.src, "the owner relays and acks the first part", 60_000);
    if (idle) throw idle;
    const probes = others.map((m) => watch(t, m.url));
    const ownerRelayed = await relayed(owner);
    owner.process.signal("SIGSTOP");
    const frozenAt = Date.now();
    // Delivered to the frozen owner's pull requests, or to the next owner's: the woken one must not publish them.
    const load = startLoad(r.nca, r.src, total - first, { ratePerSec: 1_000, from: first });
    await check(async () => (await Promise.all(others.map(owns))).some(Boolean), {
      name: "another member owns the link while the owner is frozen",
      timeoutMs: 2 * LEASE_MS,
      intervalMs: 100,
    });
    const atTakeover = await streamCount(r.ncb, r.dst);
    await check(async () => Date.now() - frozenAt >= 3 * LEASE_MS && (await streamCount(r.ncb, r.dst)) > atTakeover, {
      name: "frozen for 3× the lease while the new owner relays",
      timeoutMs: 6 * LEASE_MS,
      intervalMs: 200,
    });
    owner.process.signal("SIGCONT");
    // Woken: it sees its lease deadline passed before anything else runs, so its counter stays where it was.
    await check(
      async () => {
        const s = await status(owner);
        return s.links[0]?.state === "standby" && (s.group?.members.length ?? 0) === 2;
      },
      { name: "the woken relay rejoins: standby, and sees both members", timeoutMs: 20_000, intervalMs: 200 },
    );
    assert.equal(await relayed(owner), ownerRelayed, "the woken relay relayed nothing after its lease passed");
    await load.done;
    const stuck = await settled(r.nca, r.src, "after the freeze", SETTLE_MS);
    const liveness = mergeLiveness(await Promise.all(probes.map((p) => p.stop())));
    const codes = await Promise.all(members.map((m) => terminate(m.process)));
    const report = {
      ...(await checkDelivery({
        fault: `group owner SIGSTOP 3x lease${guard ? ", Redis guard" : ""}`,
        dest: r.ncb,
        stream: r.dst,
        source: await readSource(r.nca, r.src),
      })),
      ...(liveness ? { liveness } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
    assert.deepEqual(codes, [0, 0], "both members drain and exit 0");
  });
}

test("the owner is SIGSTOPped mid-publish again and again, each time for 3x the lease, under heavy load (no guard, 1 s duplicate window): no copy, no reorder", async (t) => {
  // Review #21 item 3: a process stopped between issuing a publish (its lease checked) and the client
  // writing it must not send it after waking: by then another member owns the link and has published
  // the same messages, more than the duplicate window ago. Each freeze lands at a random moment of a
  // busy owner (2,500 msgs/s, for the whole test), so some land inside a publish or ack burst.
  const leaseMs = 2_000;
  const r = await setup(t, "", leaseMs);
  const rounds = scaled(2, 10);
  const total = scaled(rounds * 25_000, 10 * 25_000);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 2_500 });
  const members = [await member(t, r.config), await member(t, r.config)];
  const liveness: LivenessReport[] = [];
  const discarded: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const { owner, others } = await ownerOf(members, `round ${round}`);
    await waitForCount(r.ncb, r.dst, (await streamCount(r.ncb, r.dst)) + 1_000, 30_000, `round ${round}: the owner relays`);
    const probes = others.map((m) => watch(t, m.url));
    // The freeze lands at a random moment of the next 200 ms: inside or between the owner's bursts.
    await delay(Math.random() * 200);
    owner.process.signal("SIGSTOP");
    const frozenAt = Date.now();
    await check(async () => (await Promise.all(others.map(owns))).some(Boolean), {
      name: `round ${round}: another member owns the link while the owner is frozen`,
      timeoutMs: 3 * leaseMs,
      intervalMs: 100,
    });
    await check(() => Date.now() - frozenAt >= 3 * leaseMs, { name: `round ${round}: frozen for 3x the lease`, timeoutMs: 4 * leaseMs, intervalMs: 100 });
    owner.process.signal("SIGCONT");
    await check(async () => (await status(owner).catch(() => undefined))?.links[0]?.state === "standby", {
      name: `round ${round}: the woken relay is standby`,
      timeoutMs: 20_000,
      intervalMs: 200,
    });
    discarded.push(await scrapeMetric(owner.url, "relay_lapsed_writes_discarded_total", { link: "a-to-b" }).catch(() => -1));
    for (const p of probes) liveness.push(await p.stop());
  }
  t.diagnostic(`lapsed writes discarded by the woken owners (cumulative per process, per round): ${discarded.join(", ")}`);
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the freezes", SETTLE_MS);
  const codes = await Promise.all(members.map((m) => terminate(m.process)));
  const merged = mergeLiveness(liveness);
  const report = {
    ...(await checkDelivery({ fault: `group owner SIGSTOP mid-publish x${rounds} (lease 2 s)`, dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })),
    ...(merged ? { liveness: merged } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.deepEqual(codes, [0, 0], "both members drain and exit 0");
});

test("the owner's connection to its own region is cut: it is fenced within the lease and another member takes over; healed, it rejoins; every id once, in order", async (t) => {
  const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
  const gate = await startGate(t, r.b.port);
  const config = (bUrl: string) =>
    writeConfig(
      linkYaml({
        regions: { a: [r.a.url], b: [bUrl] },
        links: [{ name: "a-to-b", from: "a", fromStream: r.src, to: "b", toStream: r.dst, extra: "    batchSize: 200\n    inFlight: 512\n" }],
        extra: `group: { lease: ${LEASE_MS / 1000}s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }`,
      }),
    );
  const total = scaled(16_000, 100_000);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 1_000 });
  // The first member reaches region b through the gate; it owns the link before the second joins,
  // and placement keeps a link with its owner.
  const cutOff = await member(t, await config(`nats://127.0.0.1:${gate.port}`));
  await check(() => owns(cutOff), { name: "the member behind the gate owns the link", timeoutMs: 20_000, intervalMs: 100 });
  const other = await member(t, await config(r.b.url));
  await waitForCount(r.ncb, r.dst, 1_000, 30_000, "the owner relays");
  assert.equal(await owns(cutOff), true, "still the owner after the second member joined");
  const probes = [watch(t, other.url), watch(t, cutOff.url)];
  await gate.refuse();
  const cutAt = Date.now();
  await check(async () => (await owns(other)) && !(await owns(cutOff)), {
    name: "the other member owns the link and the cut-off one does not",
    timeoutMs: 3 * LEASE_MS,
    intervalMs: 100,
  });
  t.diagnostic(`takeover ${Date.now() - cutAt} ms after the cut`);
  const atTakeover = await streamCount(r.ncb, r.dst);
  await waitForCount(r.ncb, r.dst, atTakeover + 1_000, 30_000, "the new owner relays while the cut lasts");
  await gate.open();
  await check(
    async () => {
      const s = await status(cutOff);
      return s.links[0]?.state === "standby" && (s.group?.members.length ?? 0) === 2;
    },
    { name: "healed, the cut-off member rejoins: standby, seeing both members", timeoutMs: 20_000, intervalMs: 200 },
  ).catch(async (err: unknown) => {
    const last = await status(cutOff).catch((e: unknown) => String(e));
    throw new Error(`${String(err)}\nlast /status: ${JSON.stringify(last).slice(0, 2_000)}\noutput:\n${cutOff.process.output().slice(-6_000)}`, { cause: err });
  });
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the cut", SETTLE_MS);
  const liveness = mergeLiveness(await Promise.all(probes.map((p) => p.stop())));
  const codes = await Promise.all([terminate(cutOff.process), terminate(other.process)]);
  const report = {
    ...(await checkDelivery({ fault: "group owner cut off from its region (TCP)", dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })),
    ...(liveness ? { liveness } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.deepEqual(codes, [0, 0], "both members drain and exit 0");
});

test("a handover waiting on a full destination meets a lost lease: the old owner stands by at once and the new owner relays; every id once, in order", async (t) => {
  const { r, src2, dst2 } = await twoStreamPairs(t);
  const pairs = [
    { link: "one", src: r.src, dst: r.dst },
    { link: "two", src: src2, dst: dst2 },
  ];
  // Both destinations full: what an owner pulls waits in its pipeline, so a handover cannot finish.
  for (const p of pairs) {
    await updateStream(r.ncb, p.dst, { discard: DiscardPolicy.New, max_msgs: 100 });
    await publishIds(r.nca, p.src, p.link, 1_000);
  }
  const config = await writeConfig(
    linkYaml({
      regions: { a: [r.a.url], b: [r.b.url] },
      links: pairs.map((p) => ({ name: p.link, from: "a", fromStream: p.src, to: "b", toStream: p.dst })),
      extra: `group: { lease: ${LEASE_MS / 1000}s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }`,
    }),
  );
  const linkOf = async (m: Member, name: string) => (await status(m).catch(() => undefined))?.links.find((l) => l.name === name);
  const first = await member(t, config);
  await check(async () => (await Promise.all(pairs.map((p) => linkOf(first, p.link)))).every((l) => l?.ownership?.self === true && l.state === "paused"), {
    name: "the first member owns both links, both paused by their full destinations",
    timeoutMs: 20_000,
    intervalMs: 100,
  });
  // The second member joins: placement moves one link to it, and the first starts handing that one over.
  const second = await member(t, config);
  const probes = [watch(t, first.url), watch(t, second.url)];
  const { handing } = await check(
    () => {
      const line = first.process.output().split("\n").find((l) => l.includes("handing the link over"));
      return line ? { handing: (JSON.parse(line) as { link: string }).link } : undefined;
    },
    { name: "the first member hands a link over", timeoutMs: 20_000, intervalMs: 100 },
  );
  const key = (await linkOf(first, handing))?.ownership?.key;
  assert.ok(key, `${handing}: the lease key in /status`);
  // It cannot finish (its held messages cannot be published), and now loses the lease: an operator
  // deletes the key, as a bucket re-created or a key purged would. The second member takes the link.
  await (await new Kvm(r.ncb).open("relay_leases")).delete(key);
  await check(async () => (await linkOf(second, handing))?.ownership?.self === true, {
    name: `${handing}: the second member owns it`,
    timeoutMs: 3 * LEASE_MS,
    intervalMs: 100,
  });
  // The old owner stops waiting for a handover that is no longer its to finish: standby, its held messages dropped.
  await check(async () => (await linkOf(first, handing))?.state === "standby", {
    name: `${handing}: the first member stands by`,
    timeoutMs: 10_000,
    intervalMs: 100,
  }).catch(async (err: unknown) => {
    throw new Error(`${String(err)}\nlast /status: ${JSON.stringify(await linkOf(first, handing))}`, { cause: err });
  });
  for (const p of pairs) await updateStream(r.ncb, p.dst, { max_msgs: -1 });
  for (const p of pairs) await waitForCount(r.ncb, p.dst, 1_000, 60_000, `${p.link}: everything relayed once the destination has room`);
  const liveness = mergeLiveness(await Promise.all(probes.map((p) => p.stop())));
  for (const p of pairs) {
    const report = {
      ...(await checkDelivery({ fault: `handover meets a lost lease, ${p.link}`, dest: r.ncb, stream: p.dst, source: await readSource(r.nca, p.src) })),
      ...(liveness ? { liveness } : {}),
    };
    await recordRow(report);
    assertDelivery(report);
  }
  assert.deepEqual(await Promise.all([first, second].map((m) => terminate(m.process))), [0, 0], "both members drain and exit 0");
});

test("rolling restart of every member of a group with 2 links under load: every id once and in order per link, no link idle for 5 s", async (t) => {
  const { r, src2, dst2 } = await twoStreamPairs(t);
  const config = await writeConfig(
    linkYaml({
      regions: { a: [r.a.url], b: [r.b.url] },
      links: [
        { name: "one", from: "a", fromStream: r.src, to: "b", toStream: r.dst },
        { name: "two", from: "a", fromStream: src2, to: "b", toStream: dst2 },
      ],
      extra: `group: { lease: ${LEASE_MS / 1000}s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }`,
    }),
  );
  const total = scaled(12_000, 100_000);
  const loads = [startLoad(r.nca, r.src, total, { ratePerSec: 500 }), startLoad(r.nca, src2, total, { ratePerSec: 500 })];
  let members = [await member(t, config), await member(t, config)];
  await waitForCount(r.ncb, dst2, 500, 30_000, "both links relaying");
  const liveness: LivenessReport[] = [];
  const rolloutFrom = Date.now();
  for (const old of [...members]) {
    // Kubernetes: the new pod first, ready; then the old one gets SIGTERM and drains.
    const next = await member(t, config);
    await waitReady(next.url, "the new member");
    const probe = watch(t, next.url);
    assert.equal(await terminate(old.process), 0, "the old member drains and exits 0");
    members = [...members.filter((m) => m !== old), next];
    liveness.push(await probe.stop());
  }
  const rolloutTo = Date.now();
  await Promise.all(loads.map((l) => l.done));
  for (const [src, dst] of [[r.src, r.dst], [src2, dst2]] as const) {
    const stuck = await settled(r.nca, src, "after the rolling restart", SETTLE_MS);
    const merged = mergeLiveness(liveness);
    const report = {
      ...(await checkDelivery({ fault: `group rolling restart, ${dst}`, dest: r.ncb, stream: dst, source: await readSource(r.nca, src) })),
      ...(merged ? { liveness: merged } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
    // Load was steady throughout: the longest pause in what the destination stored is how long the link sat idle.
    const times = (await readStream(r.ncb, dst)).map((m) => m.time).filter((ms) => ms >= rolloutFrom && ms <= rolloutTo);
    const idle = times.slice(1).reduce((worst, ms, i) => Math.max(worst, ms - (times[i] ?? ms)), 0);
    t.diagnostic(`${dst}: longest pause in the destination during the rollout ${idle} ms`);
    assert.ok(times.length > 0, `${dst} received messages during the rollout`);
    assert.ok(idle < 5_000, `${dst}: idle ${idle} ms during the rolling restart`);
  }
  assert.deepEqual(await Promise.all(members.map((m) => terminate(m.process))), [0, 0]);
});
