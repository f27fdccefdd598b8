import { describe, mock, test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { Registry } from "prom-client";
import { ConfigError, parseConfigText } from "../../src/config/load.js";
import { planReload } from "../../src/config/diff.js";
import { linkUnits } from "../../src/config/partitions.js";
import type { MaxRate, RelayConfig } from "../../src/config/types.js";
import { RateCap, TokenBucket, burstOf } from "../../src/link/rate-cap.js";
import { checkWindow } from "../../src/preflight/checks.js";
import { WindowController, rateCapWindow, startingWindow } from "../../src/link/window-controller.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { createMetrics } from "../../src/observability/metrics.js";

// ---------------------------------------------------------------------------------------------
// The token bucket

describe("token bucket", () => {
  test("starts full, admits its burst, then its rate", () => {
    const b = new TokenBucket(100, 100, 0);
    let taken = 0;
    while (b.take(1, 0)) taken++;
    assert.equal(taken, 100, "one second of the rate at once");
    assert.equal(b.take(1, 5), false, "half a token after 5 ms");
    assert.equal(b.take(1, 10), true, "one token after 10 ms");
    // Over 2 s, exactly 200 more (the rate), whatever the turns.
    let later = 0;
    for (let t = 11; t <= 2_010; t += 7) while (b.take(1, t)) later++;
    assert.ok(later >= 198 && later <= 200, `~200 over 2 s, took ${later}`);
  });

  test("never holds more than its capacity, however long it waited", () => {
    const b = new TokenBucket(10, 50, 0);
    assert.equal(b.available(60_000), 50);
  });

  test("a cost larger than the capacity passes on a full bucket and leaves a debt repaid at the rate", () => {
    const b = new TokenBucket(1_000, 1_000, 0);
    assert.equal(b.take(5_000, 0), true, "a full bucket lets one large message through");
    assert.equal(b.available(0), -4_000);
    assert.equal(b.take(1, 4_000), false, "the debt is repaid first");
    assert.equal(b.waitMs(1, 4_000), 1);
    assert.equal(b.take(1, 4_001), true);
  });

  test("waitMs says when a cost can be taken", () => {
    const b = new TokenBucket(200, 200, 0);
    assert.equal(b.take(200, 0), true);
    assert.equal(b.waitMs(1, 0), 5);
    assert.equal(b.waitMs(1, 5), 0);
  });

  test("a new rate keeps the tokens up to the new capacity", () => {
    const b = new TokenBucket(1_000, 1_000, 0);
    b.set(10, 10, 0);
    assert.equal(b.available(0), 10);
    assert.equal(b.ratePerSec, 10);
    assert.throws(() => b.set(0, 10, 0), /rate and a capacity > 0/);
    assert.throws(() => new TokenBucket(1, 0, 0), /rate and a capacity > 0/);
  });

  test("burst: one second of the rate, or one batch if that is larger", () => {
    assert.equal(burstOf(2_000, 500), 2_000);
    assert.equal(burstOf(10, 500), 500);
  });
});

// ---------------------------------------------------------------------------------------------
// The gate

let seq = 0;
const delivery = (bytes = 10): Delivery => {
  seq++;
  return {
    subject: "s",
    reply: `$JS.ACK.S.D.1.${seq}.${seq}.0.0`,
    streamSequence: seq,
    deliveryCount: 1,
    consumerSequence: seq,
    pending: 0,
    timestampNanos: "0",
    headers: undefined,
    data: new Uint8Array(bytes),
  };
};

function gate(maxRate: MaxRate | undefined, over: { batchSize?: number; ackWaitMs?: number; mayAdmit?: () => boolean } = {}) {
  let now = 0;
  const admitted: number[] = [];
  const working: string[] = [];
  const metrics = createMetrics(new Registry(), { defaultMetrics: false });
  const cap = new RateCap({
    link: "l",
    batchSize: over.batchSize ?? 10,
    ackWaitMs: over.ackWaitMs ?? 30_000,
    maxRate,
    metrics,
    logger: pino({ level: "silent" }),
    admit: (d) => admitted.push(d.streamSequence),
    mayAdmit: over.mayAdmit ?? (() => true),
    working: (reply) => working.push(reply),
    now: () => now,
  });
  const advance = (ms: number): void => {
    for (let i = 0; i < ms; i++) {
      now++;
      mock.timers.tick(1);
    }
  };
  const metric = async (name: string, labels: Record<string, string>): Promise<number | undefined> => {
    const m = (await metrics.registry.getSingleMetric(name)?.get())?.values.find((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val));
    return m?.value;
  };
  return { cap, admitted, working, advance, metric };
}

describe("rate cap gate", () => {
  test("without a cap every delivery goes straight in", () => {
    const { cap, admitted } = gate(undefined);
    for (let i = 0; i < 1_000; i++) cap.offer(delivery());
    assert.equal(admitted.length, 1_000);
    assert.equal(cap.holding, false);
  });

  test("admits the burst, holds the rest in order, and admits it at the rate", async () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, admitted, advance, metric } = gate({ messages: 100 });
      const first = seq + 1;
      for (let i = 0; i < 300; i++) cap.offer(delivery());
      assert.equal(admitted.length, 100, "one second of the rate (100 > a batch of 10)");
      assert.equal(cap.size, 200);
      assert.equal(cap.holding, true);
      advance(1_000);
      assert.ok(admitted.length >= 198 && admitted.length <= 200, `~100 more in a second, got ${admitted.length}`);
      advance(1_000);
      assert.equal(admitted.length, 300);
      assert.deepEqual(admitted, Array.from({ length: 300 }, (_, i) => first + i), "in arrival order");
      assert.equal(cap.holding, false);
      const held = (await metric("relay_link_rate_capped_seconds_total", { link: "l" })) ?? 0;
      assert.ok(held >= 1.9 && held <= 2.1, `held about 2 s, counted ${held}`);
      assert.equal(await metric("relay_link_max_rate", { link: "l", unit: "messages" }), 100);
      assert.equal(await metric("relay_link_max_rate", { link: "l", unit: "bytes" }), undefined);
    } finally {
      mock.timers.reset();
    }
  });

  test("a bytes cap admits by payload size", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, admitted, advance } = gate({ bytes: 1_000 });
      for (let i = 0; i < 30; i++) cap.offer(delivery(100));
      assert.equal(admitted.length, 10, "one second of bytes");
      advance(1_000);
      assert.equal(admitted.length, 20);
    } finally {
      mock.timers.reset();
    }
  });

  test("a delivery behind held ones waits its turn even when tokens came meanwhile", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, admitted } = gate({ messages: 10 });
      for (let i = 0; i < 12; i++) cap.offer(delivery());
      assert.equal(admitted.length, 10);
      const last = seq;
      cap.offer(delivery());
      assert.ok(!admitted.includes(last + 1));
    } finally {
      mock.timers.reset();
    }
  });

  test("a new cap applies at once; removing it lets everything held in, in order", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, admitted, advance } = gate({ messages: 10 });
      for (let i = 0; i < 50; i++) cap.offer(delivery());
      assert.equal(admitted.length, 10);
      cap.set({ messages: 1_000 });
      advance(40);
      assert.equal(admitted.length, 50, "40 ms at 1,000/s");
      for (let i = 0; i < 2_000; i++) cap.offer(delivery());
      cap.set(undefined);
      assert.equal(admitted.length, 2_050);
      assert.equal(cap.maxRate, undefined);
      assert.deepEqual(admitted, [...admitted].sort((a, b) => a - b));
    } finally {
      mock.timers.reset();
    }
  });

  test("clear drops what is held (it stays unacked); a link that may not admit drops it too", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, admitted, advance } = gate({ messages: 10 });
      for (let i = 0; i < 30; i++) cap.offer(delivery());
      cap.clear();
      assert.equal(cap.size, 0);
      assert.equal(cap.bytes, 0);
      advance(3_000);
      assert.equal(admitted.length, 10);
      let owns = true;
      const other = gate({ messages: 10 }, { mayAdmit: () => owns });
      for (let i = 0; i < 30; i++) other.cap.offer(delivery());
      owns = false;
      other.advance(100);
      assert.equal(other.cap.size, 0, "the lease lost: nothing more goes in");
      assert.equal(other.admitted.length, 10);
    } finally {
      mock.timers.reset();
    }
  });

  test("what waits past half the ack wait gets an in-progress ack", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, working, advance } = gate({ messages: 1 }, { batchSize: 1, ackWaitMs: 4_000 });
      for (let i = 0; i < 10; i++) cap.offer(delivery());
      assert.equal(working.length, 0);
      advance(2_100);
      assert.ok(working.length >= 1, "held past 2 s: in progress");
    } finally {
      mock.timers.reset();
    }
  });

  test("heldSince tells the window whether the cap held the link", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { cap, advance } = gate({ messages: 10 });
      assert.equal(cap.heldSince(-Infinity), false, "never held");
      for (let i = 0; i < 11; i++) cap.offer(delivery());
      assert.equal(cap.heldSince(0), true);
      advance(500);
      assert.equal(cap.holding, false);
      assert.equal(cap.heldWithin(1_000), true);
      advance(2_000);
      assert.equal(cap.heldWithin(1_000), false);
    } finally {
      mock.timers.reset();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The window sees the cap as its limit

describe("window controller with a rate cap", () => {
  const opts = { capMessages: 8_192, capBytes: 64 * 1024 * 1024, batchSize: 500 };

  test("the cap is a ceiling: one second of the rate, or what the rate needs over the round trip", () => {
    assert.equal(rateCapWindow(undefined, 100, 10), Infinity);
    assert.equal(rateCapWindow({ messages: 2_000 }, undefined, 20), 2_000);
    assert.equal(rateCapWindow({ messages: 2_000 }, undefined, 1_000), 4_000, "RTT × 2 when that is longer than 1 s");
    assert.equal(rateCapWindow({ bytes: 1024 * 1024 }, 1024, 10), 1024);
    assert.equal(rateCapWindow({ bytes: 1024 * 1024 }, undefined, 10), Infinity, "no size known yet");
    const start = startingWindow({ ...opts, initial: 4_096, maxRate: { messages: 2_000 }, rttMs: 300 });
    assert.deepEqual({ window: start.window, cap: start.cap, limit: start.limit }, { window: 2_000, cap: 2_000, limit: "rate cap" });
    assert.equal(startingWindow({ ...opts, maxRate: { messages: 10 } }).cap, 500, "never below one batch");
  });

  test("a window held by the cap says so and does not grow; a new cap moves the ceiling", () => {
    const c = new WindowController({ ...opts, initial: 1_000, maxRate: { messages: 2_000 } });
    const sample = { rttMs: undefined, deliveredBytes: 0, held: 0, heldBytes: 0, awaitingDestination: 0, sourcePending: 100_000 };
    c.observe({ ...sample, nowMs: 0, delivered: 0 });
    const held = c.observe({ ...sample, nowMs: 1_000, delivered: 2_000, rateCapped: true });
    assert.equal(held.limit, "rate cap");
    assert.equal(held.window, 1_000, "no growth while the cap holds the link");
    const free = c.observe({ ...sample, nowMs: 2_000, delivered: 3_000 });
    assert.equal(free.window, 2_000, "not held: grows, up to the cap's ceiling");
    assert.equal(free.limit, "rate cap");
    assert.equal(c.setMaxRate({ messages: 600 }), 600, "a lower cap lowers the window at once");
    assert.equal(c.limit, "rate cap");
    assert.equal(c.setMaxRate(undefined), 600, "no cap: kept, free to grow again");
    const grown = c.observe({ ...sample, nowMs: 3_000, delivered: 4_000 });
    assert.ok(grown.window > 600 && grown.limit !== "rate cap", JSON.stringify(grown));
  });
});

// ---------------------------------------------------------------------------------------------
// Config

const BASE = `regions:
  us-east: { servers: ["nats://a1:4222"] }
  eu-west: { servers: ["nats://b1:4222"] }
links:
  - name: orders
    from: { region: us-east, stream: ORDERS }
    to: { region: eu-west, stream: ORDERS }
`;
const parse = (text: string): RelayConfig => parseConfigText(text, "test.yaml", {});
const problems = (maxRate: string): readonly string[] => {
  try {
    parse(`${BASE}    maxRate: ${maxRate}\n`);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  return assert.fail(`maxRate ${maxRate} was accepted`);
};

describe("maxRate config", () => {
  test("messages and bytes per second, either or both; sizes as inFlightBytes takes them", () => {
    const rate = (text: string): MaxRate | undefined => parse(`${BASE}    maxRate: ${text}\n`).links[0]?.maxRate;
    assert.deepEqual(rate('{ messages: "2000/s", bytes: "2MiB/s" }'), { messages: 2_000, bytes: 2 * 1024 * 1024 });
    assert.deepEqual(rate("{ messages: 500 }"), { messages: 500 });
    assert.deepEqual(rate('{ messages: "0.5/s" }'), { messages: 0.5 });
    assert.deepEqual(rate('{ bytes: "512KiB/s" }'), { bytes: 512 * 1024 });
    assert.deepEqual(rate("{ bytes: 4096 }"), { bytes: 4096 });
    assert.equal(parse(BASE).links[0]?.maxRate, undefined, "no cap by default");
  });

  test("a rate of 0, a unit it does not know, or an empty cap is an error at its path", () => {
    assert.deepEqual(problems("{ messages: 0 }"), ["links[0].maxRate.messages: must be > 0 (got 0): leave maxRate out for no cap"]);
    assert.deepEqual(problems('{ messages: "0/s" }'), ['links[0].maxRate.messages: must be > 0 (got "0/s"): leave maxRate out for no cap']);
    assert.deepEqual(problems('{ bytes: "0MiB/s" }'), ['links[0].maxRate.bytes: must be > 0 (got "0MiB/s"): leave maxRate out for no cap']);
    assert.deepEqual(problems('{ messages: "2000/min" }'), ['links[0].maxRate.messages: must be a rate per second such as "2000/s" (got "2000/min")']);
    assert.deepEqual(problems('{ bytes: "2MB/s" }'), ['links[0].maxRate.bytes: must be a rate per second such as "2MiB/s", "512KiB/s" or a number of bytes (got "2MB/s")']);
    assert.deepEqual(problems('{ bytes: "2MiB" }'), ['links[0].maxRate.bytes: must be a rate per second such as "2MiB/s", "512KiB/s" or a number of bytes (got "2MiB")']);
    assert.deepEqual(problems("{ messages: -5 }"), ["links[0].maxRate.messages: must be > 0 (got -5): leave maxRate out for no cap"]);
    assert.deepEqual(problems("{}"), ['links[0].maxRate: must set messages, bytes or both, e.g. { messages: "2000/s", bytes: "2MiB/s" }']);
    assert.deepEqual(problems("{ msgs: 5 }"), ['links[0].maxRate.msgs: unknown key (allowed: messages, bytes)']);
  });

  test("a partitioned link's cap is shared by its partitions", () => {
    const link = parse(`${BASE.replace("stream: ORDERS }\n    to", 'stream: ORDERS, filter: "orders.*.>" }\n    to')}    partitions: { count: 4, token: 2 }\n    maxRate: { messages: 2000, bytes: "4MiB/s" }\n`).links[0];
    assert.ok(link);
    assert.deepEqual(linkUnits(link).map((u) => u.maxRate), Array(4).fill({ messages: 500, bytes: 1024 * 1024 }));
  });

  test("a reload that changes only maxRate applies in place; anything more restarts the link", () => {
    const before = parse(`${BASE}    maxRate: { messages: 2000 }\n`);
    const only = planReload(before, parse(`${BASE}    maxRate: { messages: 500 }\n`), "eu-west");
    assert.deepEqual(only.retuned.map((u) => [u.name, u.maxRate]), [["orders", { messages: 500 }]]);
    assert.deepEqual(only.changed, []);
    assert.deepEqual(only.unchanged, []);
    const removed = planReload(before, parse(BASE), "eu-west");
    assert.deepEqual(removed.retuned.map((u) => [u.name, u.maxRate]), [["orders", undefined]]);
    const more = planReload(before, parse(`${BASE}    maxRate: { messages: 500 }\n    batchSize: 100\n`), "eu-west");
    assert.deepEqual(more.retuned, []);
    assert.deepEqual(more.changed.map((u) => u.name), ["orders"]);
    assert.deepEqual(planReload(before, before, "eu-west").unchanged, ["orders"]);
  });
});

test("maxRate as the README writes it, unquoted in a flow mapping", () => {
  assert.deepEqual(parse(`${BASE}    maxRate: { messages: 2000/s, bytes: 2MiB/s }\n`).links[0]?.maxRate, { messages: 2_000, bytes: 2 * 1024 * 1024 });
});

describe("check --live: the pull window row shows the cap", () => {
  const link = (extra: string) => {
    const l = parse(`${BASE}${extra}`).links[0];
    assert.ok(l);
    return l;
  };
  const region = (rttMs: number) => ({ ok: true as const, server: "a-1", rttMs });
  const stream = (messages: number, spanMs?: number) => ({ kind: "found" as const, stream: { name: "ORDERS", subjects: ["orders.>"], retention: "limits", duplicateWindowMs: 120_000, maxAgeMs: 0, messages, bytes: messages * 512, sourced: false, ...(spanMs !== undefined ? { spanMs } : {}) } });

  test("the cap beside the window; below what the window allows, the window is not what limits across a WAN", () => {
    const capped = checkWindow(link("    inFlight: 1000\n    maxRate: { messages: 1000/s, bytes: 1MiB/s }\n"), stream(1_000), region(300));
    assert.equal(capped.level, "ok", JSON.stringify(capped));
    assert.match(capped.detail, /; rate cap 1000 msgs\/s, 1 MiB\/s: the window stops at ~1000$/);
    assert.equal(checkWindow(link("    inFlight: 1000\n"), stream(1_000), region(300)).level, "warning", "without the cap the same window warns");
  });

  test("a cap below the source's average rate over what it holds warns", () => {
    // 100,000 messages over 10 s: 10,000 msgs/s at the source, capped at 2,000.
    const slow = checkWindow(link("    maxRate: { messages: 2000/s }\n"), stream(100_000, 10_000), region(1));
    assert.equal(slow.level, "warning");
    assert.match(slow.detail, /the cap is below the source's average rate over what it holds \(~10000 msgs\/s, 4\.9 MiB\/s\)/);
    assert.match(slow.fix ?? "", /raise links\[orders\]\.maxRate/);
    assert.equal(checkWindow(link("    maxRate: { messages: 20000/s }\n"), stream(100_000, 10_000), region(1)).level, "ok");
    assert.equal(checkWindow(link("    maxRate: { messages: 2000/s }\n"), stream(100_000), region(1)).level, "ok", "no span: nothing to judge by");
  });
});
