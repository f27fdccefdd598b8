import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { check } from "../helpers/check.js";
import type { HasAfter } from "../helpers/servers.js";
import { streamCount } from "../helpers/streams.js";
import { metricValue, spawnRelay, startRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { TwoRegions } from "../helpers/scenario.js";
import { watchLiveness } from "../helpers/liveness.js";
import type { LivenessReport, LivenessWatch } from "../helpers/liveness.js";
import { assertDelivery, checkDelivery, jitter, LONG, readSource, recordRow, scaled } from "./checker.js";
import type { FaultReport } from "./checker.js";

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

async function setup(t: HasAfter) {
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
          extra: "    batchSize: 200\n    inFlight: 512\n",
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

/** SIGTERM, and the exit code once it has drained. */
async function terminate(relay: RelayProcess): Promise<number | null> {
  relay.signal("SIGTERM");
  return relay.exited;
}

/**
 * Publishes `total` ids (`m-<i>`, five subjects) in the background: first `burst` of them unpaced (a
 * backlog to catch up on), the rest `ratePerSec` a second (unpaced when 0): load that goes on while
 * the fault is injected.
 */
function startLoad(
  nc: NatsConnection,
  subjectPrefix: string,
  total: number,
  opts: { ratePerSec: number; burst?: number },
) {
  const tick = 100;
  const paced = opts.ratePerSec > 0;
  const chunk = paced ? Math.max(1, Math.round((opts.ratePerSec * tick) / 1_000)) : total;
  let published = 0;
  const run = async (): Promise<void> => {
    const burst = Math.min(total, opts.burst ?? 0);
    if (burst > 0) await publishIds(nc, subjectPrefix, "m", burst);
    published = burst;
    while (published < total) {
      const started = Date.now();
      const n = Math.min(chunk, total - published);
      await publishIds(nc, subjectPrefix, "m", n, published);
      published += n;
      const rest = tick - (Date.now() - started);
      if (paced && rest > 0) await delay(rest);
    }
  };
  const done = run();
  // Awaited by the test; this only keeps an early failure from being an unhandled rejection meanwhile.
  done.catch(() => undefined);
  return {
    done,
    get published() {
      return published;
    },
    get finished() {
      return published >= total;
    },
  };
}

/**
 * Waits until the relay has consumed and acked all of the source: every consumer on it has delivered
 * the last sequence, with nothing pending or unacked. Returns the timeout error instead of throwing it,
 * so the test still reports what the destination holds (the numbers say more than "timed out").
 */
async function settled(nc: NatsConnection, stream: string, what: string): Promise<Error | undefined> {
  const jsm = await jetstreamManager(nc);
  return check(
    async () => {
      const last = (await jsm.streams.info(stream)).state.last_seq;
      const consumers = await jsm.consumers.list(stream).next();
      return (
        consumers.length > 0 &&
        consumers.every(
          (c) => c.delivered.stream_seq >= last && c.num_pending === 0 && c.num_ack_pending === 0,
        )
      );
    },
    { name: `every message of ${stream} delivered and acked ${what}`, timeoutMs: SETTLE_MS, intervalMs: 200 },
  ).then(
    () => undefined,
    async (err: unknown) => {
      const consumers = await jsm.consumers.list(stream).next();
      const where = consumers.map((c) => ({
        name: c.name,
        delivered: c.delivered.stream_seq,
        ackFloor: c.ack_floor.stream_seq,
        pending: c.num_pending,
        ackPending: c.num_ack_pending,
        redelivered: c.num_redelivered,
      }));
      return new Error(`${String(err)}; consumers: ${JSON.stringify(where)}`, { cause: err });
    },
  );
}

/** A fault test that did not finish: its error, with what the destination held by then. */
function withReport(err: Error, report: FaultReport): Error {
  return new Error(`${report.fault}: ${err.message}\n${JSON.stringify(report, null, 2)}`, { cause: err });
}

async function waitReady(url: string, what: string): Promise<void> {
  let last = "";
  await check(
    async () => {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
      last = await res.text();
      return res.ok;
    },
    { name: `${what} /readyz 200`, timeoutMs: 30_000 },
  ).catch((err: unknown) => {
    throw new Error(`${String(err)}; last /readyz: ${last.replace(/\s+/g, " ").slice(0, 1_000)}`, {
      cause: err,
    });
  });
}

/** Fault injected while thousands of messages are still to go, or the test proves nothing. */
async function assertMidTransfer(r: TwoRegions, total: number, load?: { finished: boolean }): Promise<void> {
  const n = await streamCount(r.ncb, r.dst);
  assert.ok(
    n < total - 1_000 || (load !== undefined && !load.finished),
    `fault injected mid-transfer (${n} of ${total} relayed, load finished: ${load?.finished})`,
  );
}

function mergeLiveness(reports: readonly LivenessReport[]): LivenessReport | undefined {
  if (reports.length === 0) return undefined;
  const failed = reports.find((r) => r.firstFailure !== undefined);
  return {
    probes: reports.reduce((n, r) => n + r.probes, 0),
    failures: reports.reduce((n, r) => n + r.failures, 0),
    worstMs: Math.max(...reports.map((r) => r.worstMs)),
    ...(failed?.firstFailure === undefined ? {} : { firstFailure: failed.firstFailure }),
  };
}

function watch(t: HasAfter, url: string): LivenessWatch {
  const w = watchLiveness(url);
  t.after(() => w.stop());
  return w;
}

test("a: the relay is SIGKILLed at random moments mid-transfer and restarted: every id once, in order", async (t) => {
  const r = await setup(t);
  const total = scaled(30_000, 300_000);
  const kills = scaled(5, 25);
  // Short: the whole backlog first, a burst to catch up on. Long: a backlog, then a paced stream for
  // minutes, so the faults land both while catching up and while live.
  // Long: the paced part (250k at 1,000/s) outlasts 25 rounds of restart, progress and a kill.
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(0, 1_000), burst: scaled(total, 50_000) });
  if (!LONG) await load.done;
  for (let round = 0; round < kills; round++) {
    const relay = runRelay(t, r.config);
    const before = await streamCount(r.ncb, r.dst);
    // Progress first, then a random extra delay: a kill at a random point of the transfer.
    await waitForCount(
      r.ncb,
      r.dst,
      Math.min(total, before + 500),
      60_000,
      `round ${round}: progress before the kill`,
    );
    await delay(jitter(scaled(300, 3_000)));
    await assertMidTransfer(r, total, load);
    relay.signal("SIGKILL");
    await relay.exited;
  }
  const last = runRelay(t, r.config);
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the last restart");
  assert.equal(await terminate(last), 0, "the last relay drains and exits 0");
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const report = await checkDelivery({
    fault: `relay SIGKILL x${kills} + restart`,
    dest: r.ncb,
    stream: r.dst,
    source,
  });
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
});

test("b: relay A frozen (SIGSTOP) longer than ackWait while relay B runs the link, then thawed: every id once, in order", async (t) => {
  const r = await setup(t);
  const total = scaled(20_000, 300_000);
  const rounds = scaled(1, 6);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(2_000, 1_500) });
  const relayA = runRelay(t, r.config);
  await waitForCount(r.ncb, r.dst, 1_000, 60_000, "A relays");
  const relayB = runRelay(t, r.config);
  const urlB = await relayB.httpUrl();
  const liveB = watch(t, urlB);
  // B's readiness is not this test's point (the rollout test gates on it): B only has to be running.
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
  const stuck = await settled(r.nca, r.src, "with both relays running");
  const liveness = await liveB.stop();
  const [codeA, codeB] = await Promise.all([terminate(relayA), terminate(relayB)]);
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const report = {
    ...(await checkDelivery({
      fault: `relay SIGSTOP > ackWait x${rounds}, 2 relays`,
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

test("c: rollout with maxSurge 1: B starts next to A under load, then A is SIGTERMed: every id once, in order", async (t) => {
  const r = await setup(t);
  const total = scaled(20_000, 300_000);
  const rollouts = scaled(1, 6);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(2_000, 1_500) });
  let old = runRelay(t, r.config);
  await waitForCount(r.ncb, r.dst, 1_000, 60_000, "the first relay relays");
  const liveness: LivenessReport[] = [];
  for (let round = 0; round < rollouts; round++) {
    const next = runRelay(t, r.config);
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
  const stuck = await settled(r.nca, r.src, "after the rollout");
  assert.equal(await terminate(old), 0, "the last relay drains and exits 0");
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const merged = mergeLiveness(liveness);
  const report = {
    ...(await checkDelivery({
      fault: `rollout (maxSurge 1) x${rollouts}`,
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

test("d: SIGTERM mid-transfer drains, exits 0, and a restart finishes: every id once, in order", async (t) => {
  const r = await setup(t);
  const total = scaled(20_000, 300_000);
  const stops = scaled(1, 10);
  // Short: the whole backlog first, a burst to catch up on. Long: a backlog, then a paced stream for
  // minutes, so the faults land both while catching up and while live.
  // Long: the paced part (250k at 1,000/s) outlasts 25 rounds of restart, progress and a kill.
  const load = startLoad(r.nca, r.src, total, { ratePerSec: scaled(0, 1_000), burst: scaled(total, 50_000) });
  if (!LONG) await load.done;
  for (let round = 0; round < stops; round++) {
    const relay = runRelay(t, r.config);
    const before = await streamCount(r.ncb, r.dst);
    await waitForCount(
      r.ncb,
      r.dst,
      Math.min(total, before + 2_000),
      60_000,
      `round ${round}: progress before SIGTERM`,
    );
    await delay(jitter(scaled(300, 3_000)));
    await assertMidTransfer(r, total, load);
    const code = await terminate(relay);
    assert.equal(
      code,
      0,
      `round ${round}: exit code 0 after SIGTERM; output:\n${relay.output().slice(-2_000)}`,
    );
    assert.match(relay.output(), /"msg":"drained: exiting"/);
  }
  const again = runRelay(t, r.config);
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the restart");
  assert.equal(await terminate(again), 0);
  const source = await readSource(r.nca, r.src);
  assert.equal(source.length, total);
  const report = await checkDelivery({
    fault: `relay SIGTERM x${stops} + restart`,
    dest: r.ncb,
    stream: r.dst,
    source,
  });
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
  stuck ??= await settled(r.nca, r.src, "after Redis came back");
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
