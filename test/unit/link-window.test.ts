import { test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { Registry } from "prom-client";
import { JetStreamApiError } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import { initialWindow, LinkWindow } from "../../src/link/link-window.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { check } from "../helpers/check.js";

const CONFIG = `regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: SRC }, to: { region: b, stream: DST } }
`;

/** A link's window with its defaults (start 1000, cap 16384), no consumer to update (jsm undefined). */
function windowOf(placedRttMs?: number, pingMs?: number) {
  const config = parseConfigText(CONFIG, "test.yaml", {}).links[0]!;
  const registry = new Registry();
  const metrics = createMetrics(registry, { defaultMetrics: false });
  const rate = {
    maxRate: undefined,
    size: 0,
    bytes: 0,
    heldSince: () => false,
    heldWithin: () => false,
    set: () => undefined,
    cappedSeconds: 0,
  };
  const window = new LinkWindow({
    config,
    roundTrip: {
      latest: () => (pingMs === undefined ? Promise.reject(new Error("no server")) : Promise.resolve(pingMs)),
    },
    jsm: () => undefined,
    metrics,
    logger: pino({ level: "silent" }),
    rate,
  });
  window.placed({}, placedRttMs);
  const gauge = async (name: string, labels: Record<string, string>) =>
    (await registry.getSingleMetric(name)?.get())?.values.find((v) =>
      Object.entries(labels).every(([k, l]) => v.labels[k] === l),
    )?.value;
  /** `n` deliveries, the relay holding `held` at each, `pending` more at the source. */
  const deliver = (n: number, held: number, pending = 100_000) => {
    for (let i = 0; i < n; i++) window.receive(512, pending, held);
  };
  return { window, deliver, gauge };
}

test("link window: slow start doubles after a round trip's deliveries found the relay holding little (not in the first round, which began with nothing held)", async () => {
  const w = windowOf();
  assert.equal(w.window.maxAckPending, 1000);
  w.deliver(1000, 0);
  assert.equal(w.window.maxAckPending, 1000, "the first round only starts the clock");
  w.deliver(999, 100);
  assert.equal(w.window.maxAckPending, 1000, "a round is a whole window of deliveries");
  w.deliver(1, 100);
  assert.equal(w.window.maxAckPending, 2000);
  for (const next of [4000, 8000, 16000, 16384]) {
    w.deliver(w.window.maxAckPending, 100);
    assert.equal(
      w.window.maxAckPending,
      next,
      "doubled again after the next round's deliveries, up to the cap",
    );
  }
  assert.equal(w.window.status().limit, "messages cap");
  assert.equal(await w.gauge("relay_pull_window_messages", { link: "a-to-b" }), 16384);
  assert.equal(await w.gauge("relay_window_limit", { link: "a-to-b", limit: "messages cap" }), 1);
});

test("link window: a cursor placed across a WAN (a round trip of 10 ms or more before it) starts at the cap, on a shorter one at two batches", async () => {
  for (const [rtt, start] of [
    [undefined, 1000],
    [0.3, 1000],
    [9.9, 1000],
    [10, 16384],
    [200, 16384],
  ] as const) {
    const w = windowOf(rtt);
    assert.equal(w.window.maxAckPending, start, `placed after a ${rtt} ms round trip`);
    assert.equal(await w.gauge("relay_pull_window_messages", { link: "a-to-b" }), start);
  }
  const link = { guard: undefined, batchSize: 500 };
  assert.deepEqual(
    [
      initialWindow({ ...link, inFlight: 6000 }),
      initialWindow({ ...link, inFlight: 600 }),
      initialWindow({ ...link, inFlight: 6000 }, 10),
    ],
    [1000, 600, 6000],
    "two batches, at most the cap; the cap across a WAN",
  );
  const wan = windowOf(200);
  assert.equal(
    wan.window.status().rttMs,
    200,
    "the placement's round trip stands in until a PING measures one",
  );
});

test("link window: no slow start while the relay holds most of the window, nor when less than a window waits at the source", () => {
  const busy = windowOf();
  busy.deliver(3 * 1000, 600);
  assert.equal(
    busy.window.maxAckPending,
    1000,
    "the relay held most of it at every delivery: the relay limits",
  );
  const short = windowOf();
  short.deliver(3 * 1000, 0, 900);
  assert.equal(short.window.maxAckPending, 1000, "900 waiting: a larger window would carry nothing more");
});

test("link window: within a region (a round trip under 10 ms) slow start stops at 4096, also when a PING reads the queue; with the round trip unknown it doubles", async () => {
  // Loopback under a backlog: the server's and the socket's buffers hold what the relay has not read
  // yet, so the relay holds little at some delivery of each round, as if the window were on the wire.
  // (These rounds take no time: the round trip would hold them.)
  const lan = windowOf(0.3);
  lan.deliver(10 * 4096, 100);
  assert.equal(
    lan.window.maxAckPending,
    4096,
    "a 0.3 ms round trip: 4096 carry 13 million msgs/s; no growth past it",
  );
  assert.equal(await lan.gauge("relay_pull_window_messages", { link: "a-to-b" }), 4096);
  // A PING under the backlog waits behind the messages in the socket buffers: 16 ms is the queue, not
  // the path; the lowest round trip of the last minute (the placement's 0.3 ms) still says LAN.
  const queued = windowOf(0.3, 16);
  queued.window.observe({ held: 100, heldBytes: 51_200, awaitingDestination: 0, sourcePending: 100_000 });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(queued.window.status().rttMs, 16, "the PING's reading is the round trip shown");
  queued.deliver(10 * 4096, 100);
  assert.equal(queued.window.maxAckPending, 4096, "slow start judges the path by its lowest round trip");
  // The same rounds with the round trip unknown (no placement reading yet) double as before.
  const unknown = windowOf();
  unknown.deliver(1000 + 1000, 100);
  assert.equal(unknown.window.maxAckPending, 2000);
});

/**
 * A consumer whose MaxAckPending updates fail `failures` times (a consumer leader election: "JetStream
 * system temporarily unavailable") and then succeed; `server.max` is what the server has.
 */
function flakyConsumer(
  failures: number,
  error: () => Error = () => new Error("JetStream system temporarily unavailable"),
) {
  const server = { max: 1000, calls: [] as number[] };
  let left = failures;
  const jsm = {
    consumers: {
      update: (_stream: string, _durable: string, cfg: { max_ack_pending: number }) => {
        server.calls.push(cfg.max_ack_pending);
        if (left-- > 0) return Promise.reject(error());
        server.max = cfg.max_ack_pending;
        return Promise.resolve({});
      },
    },
  } as unknown as JetStreamManager;
  return { server, jsm };
}

function windowWith(jsm: JetStreamManager, signal?: AbortSignal) {
  const config = parseConfigText(CONFIG, "test.yaml", {}).links[0]!;
  const registry = new Registry();
  const metrics = createMetrics(registry, { defaultMetrics: false });
  const rate = {
    maxRate: undefined,
    size: 0,
    bytes: 0,
    heldSince: () => false,
    heldWithin: () => false,
    set: () => undefined,
    cappedSeconds: 0,
  };
  const window = new LinkWindow({
    config,
    roundTrip: { latest: () => Promise.reject(new Error("no server")) },
    jsm: () => jsm,
    metrics,
    logger: pino({ level: "silent" }),
    rate,
    ...(signal ? { signal } : {}),
  });
  window.placed({});
  const metric = async (name: string) =>
    (await registry.getSingleMetric(name)?.get())?.values.find((v) => v.labels.link === "a-to-b")?.value ?? 0;
  const deliver = (n: number, held: number) => {
    for (let i = 0; i < n; i++) window.receive(512, 100_000, held);
  };
  return { window, deliver, metric };
}

test("link window: a MaxAckPending update the server refuses is retried with backoff until the server has the window; gauge and status show what the server has", async () => {
  const { server, jsm } = flakyConsumer(3);
  const w = windowWith(jsm);
  w.deliver(1000, 0);
  w.deliver(1000, 100);
  assert.equal(w.window.maxAckPending, 2000, "slow start doubled: a cursor placed now gets 2000");
  assert.equal(server.max, 1000);
  assert.equal(
    await w.metric("relay_pull_window_messages"),
    1000,
    "the gauge shows what the server has, not what was asked",
  );
  assert.equal(w.window.status().messages, 1000);
  // Another doubling while the update fails: the retry asks for the latest window.
  w.deliver(2000, 100);
  assert.equal(w.window.maxAckPending, 4000);
  await check(() => server.max === 4000, {
    name: "the server's max_ack_pending converges to the window",
    timeoutMs: 10_000,
  });
  assert.equal(await w.metric("relay_pull_window_messages"), 4000);
  assert.equal(w.window.status().messages, 4000);
  assert.equal(await w.metric("relay_pull_window_update_failures_total"), 3, "each refusal counted");
  assert.deepEqual(
    server.calls,
    [2000, 4000, 4000, 4000],
    "the first attempt asked for 2000; every retry for the latest window",
  );
});

test("link window: a stopped link stops retrying its MaxAckPending update", async () => {
  const { server, jsm } = flakyConsumer(Infinity);
  const stop = new AbortController();
  const w = windowWith(jsm, stop.signal);
  w.deliver(1000, 0);
  w.deliver(1000, 100);
  await check(() => server.calls.length >= 2, { name: "retried while running", timeoutMs: 5_000 });
  stop.abort();
  const calls = server.calls.length;
  await new Promise((resolve) => setTimeout(resolve, 400));
  assert.ok(
    server.calls.length <= calls + 1,
    `no retries after the stop (${server.calls.length - calls} more)`,
  );
  assert.equal(await w.metric("relay_pull_window_messages"), 1000);
});

test("link window: a consumer that is gone is not updated again: the placement that re-creates it carries the window", async () => {
  const { server, jsm } = flakyConsumer(
    Infinity,
    () => new JetStreamApiError({ code: 404, err_code: 10014, description: "consumer not found" }),
  );
  const w = windowWith(jsm);
  w.deliver(1000, 0);
  w.deliver(1000, 100);
  await check(async () => (await w.metric("relay_pull_window_update_failures_total")) === 1, {
    name: "the refusal counted",
    timeoutMs: 5_000,
  });
  await new Promise((resolve) => setTimeout(resolve, 400));
  assert.deepEqual(server.calls, [2000], "not retried");
  w.window.placed({});
  assert.equal(w.window.status().messages, w.window.maxAckPending, "placed: the cursor carries the window");
});

test("link window: the destination's 429 answers shrink the window at the next poll; a count that starts again (a new pipeline) still counts", async () => {
  const w = windowOf();
  const poll = async (pushedBack: number) => {
    await new Promise((resolve) => setTimeout(resolve, 2)); // the controller needs time to have passed between polls
    w.deliver(100, 10);
    w.window.observe({ held: 10, heldBytes: 5_120, awaitingDestination: 0, sourcePending: 100_000, pushedBack });
  };
  await poll(0); // the first observation only sets the baseline
  assert.equal(w.window.maxAckPending, 1000);
  await poll(3);
  assert.equal(w.window.maxAckPending, 750, "three 429s since the last poll: shrunk by a quarter");
  assert.equal(await w.gauge("relay_window_limit", { link: "a-to-b", limit: "destination" }), 1);
  await poll(1);
  assert.equal(w.window.maxAckPending, 562, "a new pipeline's count (1 after 3) is a new 429");
});
