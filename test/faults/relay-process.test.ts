import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { check } from "../helpers/check.js";
import type { HasAfter } from "../helpers/servers.js";
import { streamCount } from "../helpers/streams.js";
import { metricValue, spawnRelay, startRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { linkYaml, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { LivenessReport } from "../helpers/liveness.js";
import { assertDelivery, checkDelivery, jitter, LONG, readSource, recordRow, scaled } from "./checker.js";
import {
  assertMidTransfer,
  mergeLiveness,
  settled,
  startLoad,
  terminate,
  waitOwner,
  waitReady,
  watch,
  withReport,
} from "./process-harness.js";

/**
 * The relay process itself fails: killed, frozen, rolled over to a second copy, terminated, or its
 * Redis guard dies. Every test ends in the checker: nothing lost, nothing duplicated, and the
 * destination in source order (overall and per subject).
 *
 * Short form (CI): each test well under a minute. FAULTS_LONG=1 (`npm run test:faults -- --long`):
 * more messages, more rounds, randomized timing, minutes per test.
 */

/** `ackWait` of every link here (linkYaml's): how long a frozen relay's messages stay its own. */
const ACK_WAIT_MS = 5_000;
/** How long a settled transfer may take after the last fault. */
const SETTLE_MS = scaled(120_000, 600_000);

/** `sourceAcks` of the link: the tests that ack-semantics can break run in both modes. */
type SourceAcksMode = "each" | "cumulative";

async function setup(t: HasAfter, sourceAcks: SourceAcksMode = "each") {
  const regions = await twoRegions(t);
  const { a, b, src, dst } = regions;
  const config = await writeConfig(
    linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [
        {
          name: "a-to-b",
          from: "a",
          fromStream: src,
          to: "b",
          toStream: dst,
          extra: `    batchSize: 200\n    inFlight: 512\n    sourceAcks: ${sourceAcks}\n`,
        },
      ],
      extra: 'http: { listen: "127.0.0.1:0" }',
    }),
  );
  return { ...regions, config };
}

function runRelay(t: HasAfter, config: string): RelayProcess {
  return spawnRelay(t, ["run", "--config", config, "--region", "b"]);
}

for (const mode of ["each", "cumulative"] as const) {
  test(`a: the relay is SIGKILLed at random moments mid-transfer and restarted: every id once, in order (sourceAcks ${mode})`, async (t) => {
    const r = await setup(t, mode);
    const total = scaled(30_000, 300_000);
    const kills = scaled(5, 25);
    // Short: the whole backlog first, a burst to catch up on. Long: a backlog, then a paced stream for
    // minutes, so the faults land both while catching up and while live.
    // Long: the paced part (250k at 1,000/s) outlasts 25 rounds of restart, progress and a kill.
    const load = startLoad(r.nca, r.src, total, {
      ratePerSec: scaled(0, 1_000),
      burst: scaled(total, 50_000),
    });
    if (!LONG) await load.done;
    // Each kill lands at a random point of the transfer, chosen in messages relayed, not in time: a
    // round gets at most half its share of the stream, so every kill finds thousands still to go however
    // fast or slow (a loaded machine) the relay runs. Polled every 20 ms, the kill follows the progress.
    const share = Math.floor((total - 2_000) / kills);
    // Each relay's /healthz is probed from its start until just before its kill (and the last one's
    // until the transfer settled): catching up a backlog must not stall its event loop.
    const liveness: LivenessReport[] = [];
    for (let round = 0; round < kills; round++) {
      const relay = runRelay(t, r.config);
      const live = watch(t, await relay.httpUrl());
      const before = await streamCount(r.ncb, r.dst);
      const target = before + 300 + Math.floor(Math.random() * (share / 2 - 300));
      await check(async () => (await streamCount(r.ncb, r.dst)) >= target, {
        name: `round ${round}: ${target} relayed before the kill`,
        timeoutMs: 60_000,
        intervalMs: 20,
      });
      await assertMidTransfer(r, total, load);
      liveness.push(await live.stop());
      relay.signal("SIGKILL");
      await relay.exited;
    }
    const last = runRelay(t, r.config);
    const lastLive = watch(t, await last.httpUrl());
    await load.done;
    const stuck = await settled(r.nca, r.src, "after the last restart", SETTLE_MS);
    liveness.push(await lastLive.stop());
    assert.equal(await terminate(last), 0, "the last relay drains and exits 0");
    const source = await readSource(r.nca, r.src);
    assert.equal(source.length, total);
    const merged = mergeLiveness(liveness);
    const report = {
      ...(await checkDelivery({
        fault: `relay SIGKILL x${kills} + restart${mode === "each" ? "" : `, sourceAcks ${mode}`}`,
        dest: r.ncb,
        stream: r.dst,
        source,
      })),
      ...(merged ? { liveness: merged } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
  });
}

for (const mode of ["each", "cumulative"] as const) {
  test(`b: relay A frozen (SIGSTOP) longer than ackWait while relay B runs the link, then thawed: every id once, in order (sourceAcks ${mode})`, async (t) => {
    const r = await setup(t, mode);
    const total = scaled(20_000, 300_000);
    const rounds = scaled(1, 6);
    // Both relays run before the load starts, A owning the link: a process start on a busy machine can
    // take longer than the short form's load, and the freeze must land mid-transfer.
    const relayA = runRelay(t, r.config);
    await waitOwner(await relayA.httpUrl(), "A");
    const relayB = runRelay(t, r.config);
    const urlB = await relayB.httpUrl();
    const liveB = watch(t, urlB);
    // B's readiness is not this test's point (the rollout test gates on it): B only has to be running.
    const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(2_000, 1_500) });
    await waitForCount(r.ncb, r.dst, 1_000, 60_000, "A relays");
    for (let round = 0; round < rounds; round++) {
      await delay(jitter(scaled(1_000, 5_000)));
      await assertMidTransfer(r, total, load);
      relayA.signal("SIGSTOP");
      const frozenUntil = Date.now() + ACK_WAIT_MS + 1_000 + jitter(scaled(1_000, 10_000));
      const atFreeze = await streamCount(r.ncb, r.dst);
      await check(async () => Date.now() > frozenUntil && (await streamCount(r.ncb, r.dst)) > atFreeze, {
        name: `round ${round}: A frozen past ackWait while B makes progress`,
        timeoutMs: 60_000,
        intervalMs: 200,
      });
      relayA.signal("SIGCONT");
    }
    await load.done;
    const stuck = await settled(r.nca, r.src, "with both relays running", SETTLE_MS);
    const liveness = await liveB.stop();
    const [codeA, codeB] = await Promise.all([terminate(relayA), terminate(relayB)]);
    const source = await readSource(r.nca, r.src);
    assert.equal(source.length, total);
    const report = {
      ...(await checkDelivery({
        fault: `relay SIGSTOP > ackWait x${rounds}, 2 relays${mode === "each" ? "" : `, sourceAcks ${mode}`}`,
        dest: r.ncb,
        stream: r.dst,
        source,
      })),
      liveness,
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
    assert.deepEqual([codeA, codeB], [0, 0], "both relays drain and exit 0");
  });
}

for (const mode of ["each", "cumulative"] as const) {
  test(`c: rollout with maxSurge 1: B ready next to A, then A is SIGTERMed under load: every id once, in order (sourceAcks ${mode})`, async (t) => {
    const r = await setup(t, mode);
    const total = scaled(20_000, 300_000);
    const rollouts = scaled(1, 6);
    let old = runRelay(t, r.config);
    await waitOwner(await old.httpUrl(), "the first relay");
    // The first new relay starts before the load (a process start on a busy machine can take longer
    // than the short form's load, and the old one must be terminated mid-transfer); later ones under it.
    let started: RelayProcess | undefined = runRelay(t, r.config);
    await started.httpUrl();
    const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(2_000, 1_500) });
    await waitForCount(r.ncb, r.dst, 1_000, 60_000, "the first relay relays");
    const liveness: LivenessReport[] = [];
    for (let round = 0; round < rollouts; round++) {
      const next = started ?? runRelay(t, r.config);
      started = undefined;
      const url = await next.httpUrl();
      const live = watch(t, url);
      // Kubernetes waits for the new pod's readiness, then terminates the old one.
      await waitReady(url, `round ${round}: the new relay`);
      await delay(jitter(scaled(1_000, 5_000)));
      await assertMidTransfer(r, total, load);
      const code = await terminate(old);
      assert.equal(
        code,
        0,
        `round ${round}: the old relay drains and exits 0; output:\n${old.output().slice(-2_000)}`,
      );
      if (round < rollouts - 1) await delay(jitter(scaled(1_000, 10_000)));
      liveness.push(await live.stop());
      old = next;
    }
    await load.done;
    const stuck = await settled(r.nca, r.src, "after the rollout", SETTLE_MS);
    assert.equal(await terminate(old), 0, "the last relay drains and exits 0");
    const source = await readSource(r.nca, r.src);
    assert.equal(source.length, total);
    const merged = mergeLiveness(liveness);
    const report = {
      ...(await checkDelivery({
        fault: `rollout (maxSurge 1) x${rollouts}${mode === "each" ? "" : `, sourceAcks ${mode}`}`,
        dest: r.ncb,
        stream: r.dst,
        source,
      })),
      ...(merged ? { liveness: merged } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
  });
}

test("d: SIGTERM mid-transfer drains, exits 0, and a restart finishes: every id once, in order", async (t) => {
  const r = await setup(t);
  const total = scaled(20_000, 300_000);
  const stops = scaled(1, 10);
  // Short: the whole backlog first, a burst to catch up on. Long: a backlog, then a paced stream for
  // minutes, so the faults land both while catching up and while live.
  // Long: the paced part (250k at 1,000/s) outlasts 25 rounds of restart, progress and a kill.
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(0, 1_000), burst: scaled(total, 50_000) });
  if (!LONG) await load.done;
  // Each SIGTERM lands at a random point of the transfer chosen in messages relayed, not in time (as
  // in a:): at least 2,000 after the relay's start, within the first half of its share of the stream.
  // (A delay after the first 2,000 let a faster relay finish the whole backlog before the signal.)
  const share = Math.floor((total - 2_000) / stops);
  // Each relay's /healthz is probed from its start until just before its SIGTERM (the last one's until
  // the transfer settled): catching up a backlog must not stall its event loop.
  const liveness: LivenessReport[] = [];
  for (let round = 0; round < stops; round++) {
    const relay = runRelay(t, r.config);
    const live = watch(t, await relay.httpUrl());
    const before = await streamCount(r.ncb, r.dst);
    const target = before + 2_000 + Math.floor(Math.random() * Math.max(1, share / 2 - 2_000));
    await check(async () => (await streamCount(r.ncb, r.dst)) >= target, {
      name: `round ${round}: ${target} relayed before SIGTERM`,
      timeoutMs: 60_000,
      intervalMs: 20,
    });
    await assertMidTransfer(r, total, load);
    liveness.push(await live.stop());
    const code = await terminate(relay);
    assert.equal(
      code,
      0,
      `round ${round}: exit code 0 after SIGTERM; output:\n${relay.output().slice(-2_000)}`,
    );
    assert.match(relay.output(), /"msg":"drained: exiting"/);
  }
  const again = runRelay(t, r.config);
  const againLive = watch(t, await again.httpUrl());
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the restart", SETTLE_MS);
  liveness.push(await againLive.stop());
  assert.equal(await terminate(again), 0);
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const merged = mergeLiveness(liveness);
  const report = {
    ...(await checkDelivery({
      fault: `relay SIGTERM x${stops} + restart`,
      dest: r.ncb,
      stream: r.dst,
      source,
    })),
    ...(merged ? { liveness: merged } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
});

test("e: the Redis guard is SIGKILLed under load and restarted: the link pauses, stays live on /healthz, and loses nothing", async (t) => {
  const r = await twoRegions(t);
  const redis = await r.servers.startRedis({ appendonly: true });
  const total = scaled(20_000, 300_000);
  const outages = scaled(1, 8);
  const { relay, url } = await startRelay(
    t,
    r.yaml(`    batchSize: 200\n    guard: { redis: { url: "${redis.url}" } }\n`),
    "b",
    { http: true },
  );
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(2_000, 1_500) });
  await waitForCount(r.ncb, r.dst, 1_000, 60_000, "relaying through the guard");
  const live = watch(t, url);
  const state = () => relay.status().links[0]?.state;
  let stuck: Error | undefined;
  for (let round = 0; round < outages && !stuck; round++) {
    await delay(jitter(scaled(1_000, 5_000)));
    await assertMidTransfer(r, total, load);
    await redis.kill();
    await check(() => state() === "paused", {
      name: `round ${round}: link paused while Redis is down`,
      timeoutMs: 20_000,
    });
    const downUntil = Date.now() + 1_000 + jitter(scaled(1_000, 10_000));
    await check(() => Date.now() > downUntil, {
      name: `round ${round}: Redis down for a while`,
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    await redis.restart();
    // Resumed by itself: live, or catching up on what the load added while it was paused.
    stuck = await check(() => state() === "live" || state() === "catching-up", {
      name: `round ${round}: link resumes after Redis restarted`,
      timeoutMs: 30_000,
    }).then(
      () => undefined,
      (err: unknown) => new Error(`${String(err)}; link: ${JSON.stringify(relay.status().links[0])}`),
    );
  }
  await load.done;
  stuck ??= await settled(r.nca, r.src, "after Redis came back", SETTLE_MS);
  const liveness = await live.stop();
  const relayedMetric = await metricValue(relay, "relay_messages_total", { outcome: "relayed" });
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const report = {
    ...(await checkDelivery({
      fault: `redis guard SIGKILL x${outages} + restart`,
      dest: r.ncb,
      stream: r.dst,
      source,
    })),
    liveness,
    relayedMetric,
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report, { relayedMustEqualStored: true });
});
