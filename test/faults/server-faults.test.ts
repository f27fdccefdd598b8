import { test } from "node:test";
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import {
  assertDelivery,
  checkDelivery,
  computeReport,
  jitter,
  readSource,
  recordRow,
  scaled,
} from "./checker.js";
import type { FaultReport, SourceMessage } from "./checker.js";
import { watchLiveness } from "../helpers/liveness.js";
import type { LivenessReport, LivenessWatch } from "../helpers/liveness.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany, readStream, streamCount } from "../helpers/streams.js";
import { metricValue, spawnRelay, startRelay, writeConfig } from "../helpers/relays.js";
import { DEFAULT_GROUP, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";
import { startGate } from "../helpers/tcp-gate.js";
import type { NatsCluster, NatsNode } from "../helpers/types.js";

/**
 * The server-side half of the fault matrix: what a NATS server (or the network to it, or an operator
 * deleting things) does to a link mid-transfer. Every scenario ends with the checker: nothing lost,
 * nothing duplicated, source order kept (overall and per subject), and `/healthz` answering within
 * 1 s while the fault was on. Destination duplicate windows are 1 s wherever a replay is possible, so
 * broker dedup cannot hide one.
 *
 * Short form (CI): each scenario well under a minute. FAULTS_LONG=1: more messages, more rounds,
 * randomized timing.
 */

const LINK = "a-to-b";
/** docs/config.md: a link's `durable` defaults to `relay-<link name>`. */
const DURABLE = `relay-${LINK}`;
/** Destination duplicate window where a replay is possible: shorter than every outage below. */
const DUP_WINDOW_MS = 1_000;
/** How long a link may take to settle once the last fault is over. */
const SETTLE_MS = scaled(30_000, 300_000);
/** Per test: a scenario that wedges fails on this instead of hanging the run. */
const TEST_TIMEOUT_MS = scaled(120_000, 1_800_000);
/** Messages published right before each fault, which then hits part-way through relaying them. */
// A self-sized window moves a burst fast on loopback: large enough that a fault lands inside it.
const BURST = scaled(12_000, 50_000);

// ---------------------------------------------------------------------------------------------
// 1. Source stream leader killed

test(
  "source stream leader (R3 on a 3-node region a) is killed -9 mid-transfer",
  { timeout: TEST_TIMEOUT_MS },
  async (t) => {
    const rounds = scaled(1, 4);
    const servers = withServers(t);
    const [cluster, b] = await Promise.all([servers.startNatsCluster({ size: 3 }), servers.startNats()]);
    const src = uniqueName("SRC");
    const dst = uniqueName("DST");
    const nca = await connectTo(t, cluster.urls);
    const ncb = await connectTo(t, b.url);
    const r = { nca, src, ncb, dst };
    await createStream(nca, { name: src, subjects: [`${src}.>`], replicas: 3 });
    await createStream(ncb, { name: dst, subjects: [`${src}.>`], duplicateWindowMs: DUP_WINDOW_MS });
    const yaml = linkYaml({
      regions: { a: cluster.urls, b: [b.url] },
      links: [{ name: LINK, from: "a", fromStream: src, to: "b", toStream: dst }],
    });
    const { relay, url } = await startRelay(t, yaml, "b", { http: true });
    const live = watch(t, url);

    const faultError = await attempt(async () => {
      for (let round = 0; round < rounds; round++) {
        const before = await count(ncb, dst);
        const burst = await midBurst(r, `burst${round}`, BURST, `round ${round}`);
        const leader = await streamLeader(nca, src, cluster);
        await leader.kill();
        t.diagnostic(`round ${round}: killed source stream leader ${leader.name}`);
        try {
          const atKill = await count(ncb, dst);
          // Progress, or the whole burst when less than 500 of it was left at the kill.
          await waitForCount(
            ncb,
            dst,
            Math.min(atKill + 500, before + BURST),
            // Two of three nodes elect a new leader within seconds; a link still stuck after this is broken.
            30_000,
            `round ${round}: relaying with the old source leader dead`,
          );
          await delay(jitter(scaled(200, 3_000)));
        } finally {
          await leader.restart();
        }
        await burst;
        await cluster.waitHealthy?.(30_000);
      }
    });
    await restoreCluster(cluster);
    const stalled = await settled(
      () => relay.status().links[0],
      "link settled after the source leader kills",
    );
    const liveness = await live.stop(); // before the test's own stream reads load this process
    const source = await readSource(nca, src);
    const report = await checkDelivery({
      fault: "source stream leader kill -9 (R3)",
      dest: ncb,
      stream: dst,
      source,
    });
    await conclude(t, report, {
      liveness,
      relayed: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
      errors: [faultError, stalled],
    });
  },
);

// ---------------------------------------------------------------------------------------------
// 2. Destination down (SIGKILL + restart, or SIGSTOP + SIGCONT) for longer than its duplicate window

for (const how of ["kill", "pause"] as const) {
  for (const guarded of [false, true]) {
    const name = `destination ${how === "kill" ? "killed -9 and restarted" : "SIGSTOPped and continued"}, down ~3 s (> its 1 s duplicate window) under load, ${guarded ? "Redis guard" : "no guard"}`;
    test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
      const rounds = scaled(3, 8);
      const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
      const guard = guarded
        ? `    guard: { redis: { url: "${(await r.servers.startRedis({ appendonly: true })).url}" } }\n`
        : "";
      // The group bucket lives in region b, which the fault takes away: the default lease, as the scenario was written.
      const { relay, url } = await startRelay(t, r.yaml(guard, DEFAULT_GROUP), "b", { http: true });
      const live = watch(t, url);
      const load = startLoad(r.nca, r.src, {
        total: scaled(5_000, 50_000),
        spanMs: rounds * scaled(5_000, 10_000),
      });

      const faultError = await attempt(async () => {
        for (let round = 0; round < rounds; round++) {
          const burst = await midBurst(r, `burst${round}`, BURST, `round ${round}`);
          const downMs = 3_000 + jitter(scaled(200, 3_000));
          if (how === "kill") await r.b.kill();
          else await r.b.pause();
          try {
            await delay(downMs); // the fault itself: down for longer than the duplicate window
          } finally {
            if (how === "kill") await r.b.restart();
            else await r.b.resume();
          }
          t.diagnostic(`round ${round}: destination ${how} for ${downMs} ms`);
          await burst;
        }
        await load.done;
      });
      if (!r.b.running) await r.b.restart();
      await load.done.catch(() => undefined);
      const stalled = await settled(
        () => relay.status().links[0],
        "link settled after the destination outages",
      );
      const liveness = await live.stop(); // before the test's own stream reads load this process
      const source = await readSource(r.nca, r.src);
      const report = await checkDelivery({
        fault: `destination ${how} 3s x${rounds} > dup window, ${guarded ? "redis guard" : "no guard"}`,
        dest: r.ncb,
        stream: r.dst,
        source,
      });
      await conclude(t, report, {
        liveness,
        relayed: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
        errors: [faultError, stalled],
      });
    });
  }
}

// ---------------------------------------------------------------------------------------------
// 3. The network between relay and destination cut

test(
  "relay-to-destination connection cut (TCP proxy) for longer than the 1 s duplicate window, twice (8 times in the long form)",
  { timeout: TEST_TIMEOUT_MS },
  async (t) => {
    const rounds = scaled(2, 8);
    const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
    const gate = await startGate(t, r.b.port);
    const proxy = await startTcpProxy({ port: gate.port });
    t.after(() => proxy.close());
    const yaml = linkYaml({
      regions: { a: [r.a.url], b: [`nats://127.0.0.1:${proxy.port}`] },
      links: [{ name: LINK, from: "a", fromStream: r.src, to: "b", toStream: r.dst }],
      // The group bucket lives in region b, which the cut takes away: the default lease, as the scenario was written.
      extra: DEFAULT_GROUP,
    });
    const { relay, url } = await startRelay(t, yaml, "b", { http: true });
    const live = watch(t, url);
    const load = startLoad(r.nca, r.src, {
      total: scaled(5_000, 50_000),
      spanMs: rounds * scaled(5_000, 10_000),
    });

    const faultError = await attempt(async () => {
      for (let round = 0; round < rounds; round++) {
        const burst = await midBurst(r, `burst${round}`, BURST, `round ${round}`);
        const cutMs = 2_500 + jitter(scaled(200, 3_000));
        const acceptedAtCut = proxy.accepted;
        const cutAt = Date.now();
        await gate.refuse();
        proxy.dropAll();
        try {
          // Proof the cut is real: the relay noticed and is trying (and failing) to get back in.
          await check(() => proxy.accepted > acceptedAtCut, {
            name: `round ${round}: the relay tries to reconnect during the cut`,
            timeoutMs: cutMs,
          });
          await delay(Math.max(0, cutMs - (Date.now() - cutAt))); // the fault itself: cut for longer than the duplicate window
        } finally {
          await gate.open();
        }
        t.diagnostic(
          `round ${round}: cut for ${cutMs} ms; reconnect attempts during the cut: ${proxy.accepted - acceptedAtCut}`,
        );
        await burst;
      }
      await load.done;
    });
    await gate.open();
    await load.done.catch(() => undefined);
    const stalled = await settled(() => relay.status().links[0], "link settled after the cuts");
    const liveness = await live.stop(); // before the test's own stream reads load this process
    const source = await readSource(r.nca, r.src);
    const report = await checkDelivery({
      fault: `relay-destination TCP cut >1s x${rounds}`,
      dest: r.ncb,
      stream: r.dst,
      source,
    });
    await conclude(t, report, {
      liveness,
      relayed: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
      errors: [faultError, stalled],
    });
  },
);

// ---------------------------------------------------------------------------------------------
// 4. The link's durable consumer deleted under load

test(
  "the link's durable consumer is deleted under load (destination duplicate window 1 s)",
  { timeout: TEST_TIMEOUT_MS },
  async (t) => {
    const rounds = scaled(1, 5);
    const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
    await publishIds(r.nca, r.src, "early", 1_000);
    const { relay, url } = await startRelay(t, r.yaml(), "b", { http: true });
    const startedAt = Date.now();
    const live = watch(t, url);
    const load = startLoad(r.nca, r.src, {
      total: scaled(5_000, 50_000),
      spanMs: rounds * scaled(5_000, 10_000),
    });
    const jsm = await jetstreamManager(r.nca);

    const faultError = await attempt(async () => {
      await waitForCount(r.ncb, r.dst, 1_000, 30_000, "the first messages relayed");
      // The first copies must be older than the destination's window when a replay could bring them back.
      await check(() => Date.now() - startedAt > 2 * DUP_WINDOW_MS, {
        name: "the first copies are older than the duplicate window",
        timeoutMs: 10_000,
      });
      for (let round = 0; round < rounds; round++) {
        const burst = await midBurst(r, `burst${round}`, BURST, `round ${round}`);
        await jsm.consumers.delete(r.src, DURABLE);
        t.diagnostic(
          `round ${round}: deleted consumer ${DURABLE} with ${await count(r.ncb, r.dst)} messages in the destination`,
        );
        await check(async () => (await jsm.consumers.info(r.src, DURABLE)).name === DURABLE, {
          name: `round ${round}: the link re-creates its durable consumer`,
          timeoutMs: 30_000,
          intervalMs: 100,
        });
        await burst;
        await delay(jitter(scaled(100, 3_000)));
      }
      await load.done;
    });
    await load.done.catch(() => undefined);
    const stalled = await settled(() => relay.status().links[0], "link settled after the consumer deletions");
    const liveness = await live.stop(); // before the test's own stream reads load this process
    const source = await readSource(r.nca, r.src);
    const report = await checkDelivery({
      fault: `source consumer deleted under load x${rounds}`,
      dest: r.ncb,
      stream: r.dst,
      source,
    });
    await conclude(t, report, {
      liveness,
      relayed: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
      errors: [faultError, stalled],
    });
  },
);

// ---------------------------------------------------------------------------------------------
// 5. The source stream deleted and re-created with the same name

test(
  "the source stream is deleted and re-created with the same name mid-run: messages without Nats-Msg-Id of every incarnation arrive",
  { timeout: TEST_TIMEOUT_MS },
  async (t) => {
    const perIncarnation = scaled(2_000, 20_000);
    const recreations = scaled(1, 3);
    // Default (2 min) duplicate window on purpose: ids derived as <region>:<stream>:<seq> alone would
    // collide across incarnations inside it, and the broker would drop the new messages as duplicates.
    const r = await twoRegions(t);
    const run = uniqueName("run");
    const jsm = await jetstreamManager(r.nca);
    // No Nats-Msg-Id: the relay derives ids. The payload is what identifies a message here:
    // `<run>/<incarnation>/<i>`, unique across incarnations, so the comparison is by payload.
    const publishIncarnation = (k: number) =>
      publishMany(r.nca, perIncarnation, (i) => ({
        subject: `${r.src}.${i % 5}`,
        data: new TextEncoder().encode(`${run}/${k}/${i}`),
      }));
    /** The source in order, identified by payload; seq is offset so incarnation k sorts after k - 1. */
    const readIncarnation = async (k: number): Promise<SourceMessage[]> =>
      (await readStream(r.nca, r.src, 120_000)).map((m) => ({
        id: m.data,
        subject: m.subject,
        seq: k * 1_000_000_000 + m.seq,
      }));

    await publishIncarnation(0);
    const { relay, url } = await startRelay(t, r.yaml(), "b", { http: true });
    const live = watch(t, url);
    const source: SourceMessage[] = [];
    let current = 0;

    const faultError = await attempt(async () => {
      await waitForCount(r.ncb, r.dst, perIncarnation, 60_000, "first incarnation relayed");
      for (let k = 1; k <= recreations; k++) {
        const idle = await settled(() => relay.status().links[0], `link idle after incarnation ${k - 1}`);
        if (idle) throw idle;
        source.push(...(await readIncarnation(k - 1)));
        await jsm.streams.delete(r.src);
        await delay(jitter(scaled(100, 3_000)));
        await createStream(r.nca, { name: r.src, subjects: [`${r.src}.>`] });
        current = k;
        await publishIncarnation(k);
        t.diagnostic(
          `incarnation ${k}: stream re-created, ${perIncarnation} messages published (source seq 1..${perIncarnation} again)`,
        );
      }
    });
    const stalled = await settled(
      () => relay.status().links[0],
      "link settled after the stream re-creations",
    );
    const liveness = await live.stop(); // before the test's own stream reads load this process
    source.push(...(await readIncarnation(current)));
    // The checker's pure half, fed payloads as ids (on both sides) instead of Nats-Msg-Id.
    const stored = (await readStream(r.ncb, r.dst, 120_000)).map((m) => ({ id: m.data, subject: m.subject }));
    const report = computeReport(
      `source stream deleted+recreated x${recreations}, derived ids (compared by payload)`,
      stored,
      source,
    );
    await conclude(t, report, {
      liveness,
      relayed: await metricValue(relay, "relay_messages_total", { outcome: "relayed" }),
      errors: [faultError, stalled],
    });
  },
);

// ---------------------------------------------------------------------------------------------
// 6. A message larger than the destination's max_payload

for (const policy of ["dead-letter", "halt"] as const) {
  test(
    `a 100 KB message for a destination with max_payload 64 KiB: ${policy === "halt" ? "halt fails the link and the process stays responsive" : "dead-lettered without its payload, the next messages arrive"}`,
    { timeout: TEST_TIMEOUT_MS },
    async (t) => {
      const before = scaled(500, 5_000);
      const after = scaled(500, 5_000);
      const servers = withServers(t);
      // Source keeps the default 1 MB max_payload, so the big message is stored there.
      const [a, b] = await Promise.all([
        servers.startNats(),
        servers.startNats({ extraConfig: "max_payload: 65536" }),
      ]);
      const src = uniqueName("SRC");
      const dst = uniqueName("DST");
      const dlq = uniqueName("DLQ");
      const dlqSubject = `dlq.${dlq}`;
      const nca = await connectTo(t, a.url);
      const ncb = await connectTo(t, b.url);
      await createStream(nca, { name: src, subjects: [`${src}.>`] });
      await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
      await createStream(ncb, { name: dlq, subjects: [dlqSubject] });
      await publishIds(nca, src, "m", before);
      await publishMany(nca, 1, () => ({
        subject: `${src}.big`,
        data: new Uint8Array(100 * 1024).fill(120),
        headers: { "Nats-Msg-Id": "big-1" },
      }));
      await publishIds(nca, src, "m", after, before);
      const all = await readSource(nca, src);
      assert.equal(all.length, before + 1 + after);

      const onBad =
        policy === "halt"
          ? "    onBadMessage: halt\n"
          : `    onBadMessage: { deadLetter: "${dlqSubject}" }\n`;
      const config = await writeConfig(
        linkYaml({
          regions: { a: [a.url], b: [b.url] },
          links: [{ name: LINK, from: "a", fromStream: src, to: "b", toStream: dst, extra: onBad }],
          extra: 'http: { listen: "127.0.0.1:0" }',
        }),
      );
      // A child process: a relay that spins on the message must not freeze the test (or its probes).
      const child = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
      const url = await child.httpUrl();
      const live = watch(t, url);
      const status = () => remoteLink(url);

      if (policy === "dead-letter") {
        const stalled = await settled(status, "link settled after the oversized message");
        const liveness = await live.stop(); // before the test's own stream reads load this process
        const parked = await readStream(ncb, dlq, 10_000).catch(() => []);
        const source = all.filter((s) => s.id !== "big-1");
        const report = await checkDelivery({
          fault: "100KB message > dest max_payload, dead-letter",
          dest: ncb,
          stream: dst,
          source,
        });
        await conclude(t, report, {
          liveness,
          relayed: await scrapeMetric(url, "relay_messages_total", { outcome: "relayed" }),
          errors: [stalled],
          delivery: { relayedMustEqualStored: true },
        });
        assert.equal(parked.length, 1, "one dead-letter record");
        const record = parked[0];
        assert.equal(record?.headers["Nats-Msg-Id"], "big-1");
        assert.equal(record?.data, "", "the dead-letter record holds no payload (it would not fit)");
        assert.match(record?.headers["Relay-Dead-Letter-Reason"] ?? "", /size|payload|large|bytes/i);
        assert.equal(await scrapeMetric(url, "relay_messages_total", { outcome: "dead_lettered" }), 1);
      } else {
        let failedError: Error | undefined;
        const failed = await check(
          async () => {
            const link = await status();
            return link?.state === "failed" ? link : undefined;
          },
          {
            name: "link state failed on the oversized message",
            timeoutMs: 30_000,
            intervalMs: 200,
          },
        ).catch((err: unknown) => {
          failedError = err as Error;
          return undefined;
        });
        // What was stored before the halt is done: acked at the source, or a restart after the
        // operator's fix (later than the duplicate window) would store it a second time.
        const jsm = await jetstreamManager(nca);
        const unacked = await attempt(async () => {
          await check(async () => (await jsm.consumers.info(src, DURABLE)).ack_floor.stream_seq >= before, {
            name: `the ${before} messages stored before the oversized one are acked at the source`,
            timeoutMs: 10_000,
            intervalMs: 200,
          });
        });
        const liveness = await live.stop(); // before the test's own stream reads load this process
        // Everything before the big message, nothing after it: a later message stored now would be
        // ahead of it once an operator fixes the cause and restarts the link.
        const source = all.slice(0, before);
        const report = await checkDelivery({
          fault: "100KB message > dest max_payload, halt",
          dest: ncb,
          stream: dst,
          source,
        });
        await conclude(t, report, {
          liveness,
          relayed: await scrapeMetric(url, "relay_messages_total", { outcome: "relayed" }),
          errors: [failedError, unacked],
          delivery: { relayedMustEqualStored: true },
        });
        assert.match(failed?.lastError?.message ?? "", /size|payload|large|bytes/i, "the error says why");
        assert.equal(
          (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1_000) })).status,
          200,
          "/healthz answers with the link failed",
        );
      }
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Helpers

interface LinkView {
  readonly state?: string;
  readonly inFlight?: number;
  readonly backlog?: { readonly messages: number; readonly at: string };
  readonly lastError?: { readonly code: string; readonly message: string };
}

/** `/healthz` probes from now until the report (or the end of the test). */
function watch(t: TestContext, url: string): LivenessWatch {
  const live = watchLiveness(url);
  t.after(() => live.stop());
  return live;
}

/** Runs the fault phase; an error there is kept for after the report, so a failing run still says what the data looks like. */
async function attempt(fn: () => Promise<void>): Promise<Error | undefined> {
  try {
    await fn();
    return undefined;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/**
 * Waits until the link has nothing left to do: `live`, nothing in flight, and a backlog reading taken
 * at least 500 ms after that was first seen says the source owes nothing. A link that lost messages
 * settles too (the checker then says what is missing); one that never settles resolves with the
 * named timeout error, which the test throws after recording what the destination holds.
 */
async function settled(
  status: () => LinkView | undefined | Promise<LinkView | undefined>,
  name: string,
  timeoutMs = SETTLE_MS,
): Promise<Error | undefined> {
  let idleSince: number | undefined;
  let last: LinkView | undefined;
  try {
    await check(
      async () => {
        last = await status();
        const idle = last?.state === "live" && last.inFlight === 0 && last.backlog?.messages === 0;
        if (!idle) {
          idleSince = undefined;
          return false;
        }
        idleSince ??= Date.now();
        return Date.parse(last?.backlog?.at ?? "") >= idleSince + 500;
      },
      { name, timeoutMs, intervalMs: 200 },
    );
    return undefined;
  } catch (err) {
    const brief = last
      ? JSON.stringify({
          state: last.state,
          inFlight: last.inFlight,
          backlog: last.backlog,
          lastError: last.lastError,
        })
      : "no status";
    return new Error(`${(err as Error).message}; link: ${brief}`, { cause: err });
  }
}

/** Records the report, prints its numbers, asserts the guarantees, then throws what the fault phase threw. */
async function conclude(
  t: TestContext,
  report: FaultReport,
  opts: {
    liveness?: LivenessReport;
    relayed?: number;
    errors?: readonly (Error | undefined)[];
    delivery?: Parameters<typeof assertDelivery>[1];
  },
): Promise<FaultReport> {
  const full: FaultReport = {
    ...report,
    ...(opts.liveness ? { liveness: opts.liveness } : {}),
    ...(opts.relayed !== undefined ? { relayedMetric: opts.relayed } : {}),
  };
  t.diagnostic(
    `${full.fault}: messages ${full.messages}, lost ${full.lost}, duplicated ${full.duplicated}, reordered ${full.reordered} (per subject ${full.reorderedBySubject}), extra ${full.extra}, relayed metric ${full.relayedMetric ?? "-"}, /healthz worst ${full.liveness?.worstMs ?? "-"} ms (${full.liveness?.failures ?? "-"} failed)`,
  );
  await recordRow(full);
  const errors = (opts.errors ?? []).filter((e): e is Error => e !== undefined);
  for (const e of errors) t.diagnostic(`fault phase: ${e.message}`);
  assertDelivery(full, opts.delivery);
  if (errors[0]) throw errors[0];
  return full;
}

/**
 * Publishes a burst of `size` messages (ids `<prefix>-<i>`) and resolves once the relay is part-way
 * through it, with a fifth or more of it still to relay: the fault that follows meets publishes in
 * flight and a backlog, however fast the relay is. Resolves with the burst's publishing, to await
 * after the fault.
 */
async function midBurst(
  r: { nca: NatsConnection; src: string; ncb: NatsConnection; dst: string },
  prefix: string,
  size: number,
  what: string,
): Promise<Promise<unknown>> {
  const d0 = await count(r.ncb, r.dst);
  // Published in twelve paced chunks (~2 s): a relay that keeps up with the publisher cannot get ahead
  // of it, so whatever the machine's speed, part of the burst is still to come when the fault lands.
  const chunk = Math.ceil(size / 12);
  const publishing = (async () => {
    for (let from = 0; from < size; from += chunk) {
      // A chunk that meets the fault (a source leader election) is published again: the same ids,
      // so the source's duplicate window keeps one copy of each.
      const until = Date.now() + 30_000;
      for (;;) {
        try {
          await publishIds(r.nca, r.src, prefix, Math.min(chunk, size - from), from);
          break;
        } catch (err) {
          if (Date.now() > until) throw err;
          await delay(250);
        }
      }
      await delay(150);
    }
  })();
  publishing.catch(() => undefined); // awaited after the fault
  // The fault lands at a random point of the burst, chosen by progress, not by time. Polled often: a
  // relay that keeps up moves a chunk within milliseconds of its publish.
  const at = 0.1 + Math.random() * 0.4;
  await check(async () => (await streamCount(r.ncb, r.dst)) >= d0 + size * at, {
    name: `${what}: relaying a burst, ${Math.round(at * 100)} % of it`,
    timeoutMs: 60_000,
    intervalMs: 10,
  });
  const d = await count(r.ncb, r.dst);
  // Conservative: background traffic relayed meanwhile also counts as progress through the burst.
  assert.ok(
    d - d0 < size * 0.8,
    `${what}: fault injected mid-transfer (${d - d0} of a burst of ${size} relayed just before it)`,
  );
  return publishing;
}

/** A stream's message count, waiting out the test's own client reconnecting after a server restart. */
async function count(nc: NatsConnection, stream: string): Promise<number> {
  const { n } = await check(async () => ({ n: await streamCount(nc, stream) }), {
    name: `message count of ${stream}`,
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  return n;
}

async function streamLeader(nc: NatsConnection, stream: string, cluster: NatsCluster): Promise<NatsNode> {
  const leaderName = await check(
    async () => (await (await jetstreamManager(nc)).streams.info(stream)).cluster?.leader,
    {
      name: `stream ${stream} has a leader`,
      timeoutMs: 20_000,
    },
  );
  const leader = cluster.nodes.find((n) => n.name === leaderName);
  if (!leader) throw new Error(`stream leader ${leaderName} is not one of the cluster's nodes`);
  return leader;
}

async function restoreCluster(cluster: NatsCluster): Promise<void> {
  for (const n of cluster.nodes) if (!n.running) await n.restart();
  await cluster.waitHealthy?.(30_000);
}

interface Load {
  /** Resolves when every message is published (rejects with the first publish error). */
  readonly done: Promise<void>;
}

/**
 * Background traffic: ids `m-0` .. `m-<total - 1>` (5 subjects) in chunks spread over about `spanMs`,
 * so the source keeps growing while the destination side is down.
 */
function startLoad(nc: NatsConnection, src: string, opts: { total: number; spanMs: number }): Load {
  const everyMs = 100;
  const chunk = Math.max(1, Math.ceil(opts.total / (opts.spanMs / everyMs)));
  const done = (async () => {
    for (let next = 0; next < opts.total; next += chunk) {
      const tick = delay(everyMs);
      await publishIds(nc, src, "m", Math.min(chunk, opts.total - next), next);
      await tick;
    }
  })();
  done.catch(() => undefined); // awaited by the test later; until then a rejection is not unhandled
  return { done };
}


/** The first link of a relay running in another process, from its `/status` (undefined when it does not answer in 1 s). */
async function remoteLink(url: string): Promise<LinkView | undefined> {
  const res = await fetch(`${url}/status`, { signal: AbortSignal.timeout(1_000) });
  const body = (await res.json()) as { links?: LinkView[] };
  return body.links?.[0];
}

/** Sums the series of a counter from a relay's `/metrics` whose labels include `labels` (undefined when it does not answer). */
async function scrapeMetric(
  url: string,
  name: string,
  labels: Record<string, string>,
): Promise<number | undefined> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
    let sum = 0;
    for (const line of text.split("\n")) {
      const m = /^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)$/.exec(line);
      if (!m || m[1] !== name) continue;
      const have = new Map([...(m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
      if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[3]);
    }
    return sum;
  } catch {
    return undefined;
  }
}
