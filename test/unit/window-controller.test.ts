import { test } from "node:test";
import assert from "node:assert/strict";
import { WindowController, startingWindow } from "../../src/link/window-controller.js";
import type { WindowDecision } from "../../src/link/window-controller.js";

const KiB = 1024;
const MiB = 1024 * KiB;

/** The defaults (src/config/compile.ts): batchSize 500, inFlight 1024, inFlightBytes 64 MiB. */
const DEFAULTS = { batchSize: 500, capMessages: 1024, capBytes: 64 * MiB };

interface Path {
  /** The true round trip to the source (what the window must cover). */
  readonly rttMs: number;
  /** What nc.rtt() reports (default: rttMs; null: unknown). */
  readonly pingMs?: number | null;
  /** The most the source delivers per second. */
  readonly sourceMax: number;
  /** A saturated destination: the most it takes per second. */
  readonly destMax?: number;
  /** A far destination: its PubAck latency (the destination takes anything, but each message waits this long). */
  readonly destLatencyMs?: number;
  /** A relay that cannot process more than this per second (guard, CPU). */
  readonly relayMax?: number;
  readonly msgBytes: number;
  /** Messages wait at the source (default true). */
  readonly backlog?: boolean;
}

/**
 * A link in steady state for one second with the controller's window as MaxAckPending (Little's law):
 * window = rate × (RTT + time held in the relay). Whatever of the window is not on the wire is held by the
 * relay: by the destination when the destination binds, inside the relay when the relay does.
 */
class Sim {
  now = 0;
  delivered = 0;
  bytes = 0;
  readonly decisions: WindowDecision[] = [];
  constructor(readonly c: WindowController) {}

  step(p: Path): WindowDecision {
    const w = this.c.window;
    const rtt = p.rttMs / 1000;
    const processing = 0.005; // publish + PubAck of a near destination
    const destLatency = (p.destLatencyMs ?? 0) / 1000;
    const windowRate = w / (rtt + processing + destLatency);
    const rate = Math.min(windowRate, p.sourceMax, p.destMax ?? Infinity, p.relayMax ?? Infinity);
    let held: number;
    let awaiting: number;
    if (p.destMax !== undefined && rate === p.destMax && p.destMax < windowRate) {
      held = w - rate * rtt;
      awaiting = 0.9 * held;
    } else if (p.relayMax !== undefined && rate === p.relayMax && p.relayMax < windowRate) {
      held = w - rate * rtt;
      awaiting = 0.1 * held;
    } else {
      held = rate * (processing + destLatency);
      awaiting = 0.8 * held;
    }
    this.now += 1000;
    this.delivered += Math.round(rate);
    this.bytes += Math.round(rate) * p.msgBytes;
    const d = this.c.observe({
      nowMs: this.now,
      rttMs: p.pingMs === null ? undefined : (p.pingMs ?? p.rttMs),
      delivered: this.delivered,
      deliveredBytes: this.bytes,
      held: Math.round(held),
      heldBytes: Math.round(held) * p.msgBytes,
      awaitingDestination: Math.round(awaiting),
      sourcePending: p.backlog === false ? 0 : 1_000_000,
    });
    this.decisions.push(d);
    return d;
  }

  run(p: Path, n: number): WindowDecision {
    let d: WindowDecision | undefined;
    for (let i = 0; i < n; i++) d = this.step(p);
    assert.ok(d);
    return d;
  }
}

/** Every decision: within [batchSize, cap]; `changed` exactly when the window moved, and then by ≥ 25 % or onto/off a cap or the floor. */
function assertInvariants(sim: Sim, batchSize: number, capMessages: number, start: number): void {
  let prev = start;
  for (const d of sim.decisions) {
    assert.ok(d.window >= batchSize, `window ${d.window} below batchSize ${batchSize}`);
    assert.ok(d.window <= Math.max(batchSize, capMessages), `window ${d.window} above capMessages ${capMessages}`);
    assert.ok(d.window <= d.cap, `window ${d.window} above the cap ${d.cap}`);
    assert.equal(d.changed, d.window !== prev);
    if (d.changed) {
      const big = Math.abs(d.window - prev) >= 0.25 * prev;
      assert.ok(big || d.window === d.cap || prev >= d.cap || d.window === batchSize || prev === batchSize, `small move ${prev} → ${d.window}`);
    }
    prev = d.window;
  }
}

const WAN: Path = { rttMs: 200, sourceMax: 15_000, msgBytes: 1 * KiB };
const BIG = { batchSize: 500, capMessages: 65_536, capBytes: 64 * MiB };

test("starts at 2 × batchSize (or initial), never above the caps nor below batchSize", () => {
  assert.equal(new WindowController(DEFAULTS).window, 1000);
  assert.equal(new WindowController({ ...DEFAULTS, initial: 100 }).window, 500);
  assert.equal(new WindowController({ ...DEFAULTS, initial: 5000 }).window, 1024);
  assert.equal(new WindowController({ ...DEFAULTS, capMessages: 600 }).window, 600);
  // The worst-case size stands in before anything is measured: 64 MiB of 1 MiB messages is 64, so one batch.
  const worst = new WindowController({ ...DEFAULTS, maxMessageBytes: MiB });
  assert.equal(worst.window, 500);
  assert.equal(worst.limit, "bytes cap");
  // A measured prior (the stream's bytes / messages) wins over the worst case.
  assert.equal(new WindowController({ ...DEFAULTS, maxMessageBytes: MiB, avgMessageBytes: KiB }).window, 1000);
  assert.throws(() => new WindowController({ ...DEFAULTS, batchSize: 0 }), RangeError);
});

test("200 ms round trip, 15,000 msgs/s: grows from one batch to rate × RTT within a handful of observations, then holds", () => {
  const c = new WindowController({ ...BIG, initial: 500 });
  const sim = new Sim(c);
  assert.equal(c.window, 500);
  // Before: one batch per round trip, ~2,400 msgs/s.
  const first = sim.step(WAN);
  assert.ok(first.ratePerSec < 2500);
  assert.equal(first.changed, false, "the first sample is only a baseline");
  sim.run(WAN, 5);
  assert.ok(c.window >= 15_000 * 0.2, `window ${c.window} covers 15,000 × 200 ms`);
  assert.ok(c.window <= 2 * 15_000 * 0.2 * 1.25, `window ${c.window} not far past the headroom`);
  const d = sim.step(WAN);
  assert.equal(d.ratePerSec, 15_000, "the link now moves what the source offers");
  assert.equal(d.limit, "rtt");
  assert.equal(d.neededForRtt, 6000);
  const settled = c.window;
  for (let i = 0; i < 20; i++) assert.equal(sim.step(WAN).changed, false);
  assert.equal(c.window, settled);
  const grew = sim.decisions.filter((x) => x.changed).length;
  assert.ok(grew <= 4, `${grew} MaxAckPending updates`);
  assertInvariants(sim, 500, 65_536, 500);
});

test("300 ms round trip with the default start (2 × batch): the same within a handful", () => {
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  sim.run({ ...WAN, rttMs: 300 }, 5);
  assert.ok(c.window >= 15_000 * 0.3);
  assert.equal(sim.step({ ...WAN, rttMs: 300 }).ratePerSec, 15_000);
});

test("stops at the messages cap and says so", () => {
  const c = new WindowController({ ...BIG, capMessages: 2048 });
  const sim = new Sim(c);
  const d = sim.run(WAN, 6);
  assert.equal(d.window, 2048);
  assert.equal(d.limit, "messages cap");
  assert.equal(c.limit, "messages cap");
  assert.ok(d.neededForRtt !== undefined && d.neededForRtt > 2048);
  const capHits = sim.decisions.filter((x) => x.changed && x.window === 2048);
  assert.equal(capHits.length, 1, "reaching the cap is one update, staying there none");
  assertInvariants(sim, 500, 2048, 1000);
});

test("stops at the bytes cap (measured average size, large messages) and says so", () => {
  // 1 GiB over 1 MiB messages: 1024, though 65,536 messages are allowed.
  const c = new WindowController({ batchSize: 100, capMessages: 65_536, capBytes: 1024 * MiB });
  const sim = new Sim(c);
  const d = sim.run({ rttMs: 200, sourceMax: 15_000, msgBytes: MiB }, 6);
  assert.equal(d.window, 1024);
  assert.equal(d.limit, "bytes cap");
  assert.equal(d.avgMessageBytes, MiB);
  assertInvariants(sim, 100, 65_536, 200);

  // The average, not the worst case: a 1 MiB max_payload but 2 KiB messages grows past 64 MiB / 1 MiB.
  const avg = new WindowController({ ...DEFAULTS, capMessages: 65_536, maxMessageBytes: MiB });
  assert.equal(avg.window, 500);
  const sim2 = new Sim(avg);
  sim2.run({ ...WAN, msgBytes: 2 * KiB }, 6);
  assert.ok(avg.window >= 3000, `window ${avg.window}`);

  // Messages get larger: the window comes down to the new byte budget at once.
  const before = avg.window;
  const down = sim2.run({ ...WAN, msgBytes: 64 * KiB }, 1);
  assert.equal(down.changed, true);
  assert.equal(down.limit, "bytes cap");
  assert.ok(down.window < before && down.window === down.cap);
  sim2.run({ ...WAN, msgBytes: 64 * KiB }, 5);
  assert.ok(avg.window >= 1024 && avg.window <= 1024 * 1.1, `window ${avg.window}: 64 MiB / 64 KiB, within the bytes cap's 10 % step`);
  assert.ok(sim2.decisions.slice(-6).filter((x) => x.changed).length <= 4, "the converging average moves it in a few steps");
  sim2.run({ ...WAN, msgBytes: 64 * KiB }, 10);
  assert.ok(sim2.decisions.slice(-5).every((x) => !x.changed), "then not at all");
  assert.equal(avg.limit, "bytes cap");
  assertInvariants(sim2, 500, 65_536, 500);
});

test("a saturated destination: no growth, a gentle shrink after a few observations; grows back when it clears", () => {
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  sim.run(WAN, 6);
  const open = c.window;
  assert.ok(open >= 3000);
  const slow: Path = { ...WAN, destMax: 3000 };
  // A larger window is tried once, moves no more, and is undone.
  const probe = sim.step(slow);
  assert.deepEqual([probe.limit, probe.probe, probe.window], ["destination", "started", Math.ceil(open * 1.5)]);
  const undone = sim.step(slow);
  assert.deepEqual([undone.limit, undone.probe, undone.window], ["destination", "undone", open]);
  const early = sim.step(slow);
  assert.equal(early.limit, "destination");
  assert.equal(c.window, open, "no shrink judged on the undo's own observation");
  const third = sim.step(slow);
  assert.equal(third.changed, true);
  assert.equal(third.window, Math.floor(open * 0.75));
  sim.run(slow, 30);
  const held = c.window;
  assert.ok(held < open * 0.5, `shrank to ${held}`);
  assert.ok(held >= 1200, "not below rate × RTT × 2: the wire still carries the destination's rate");
  assert.equal(c.limit, "destination");
  for (let i = 0; i < 10; i++) assert.equal(sim.step(slow).changed, false, "settles: no sawtooth of updates");
  assert.equal(sim.step(slow).ratePerSec, 3000, "the destination still gets all it takes");
  // Cleared: back to the round trip's window.
  sim.run(WAN, 4);
  assert.ok(c.window >= 6000, `grew back to ${c.window}: rate × RTT × 2 again`);
  assert.equal(sim.step(WAN).ratePerSec, 15_000);
  assert.equal(c.limit, "rtt");
  assertInvariants(sim, 500, 65_536, 1000);
});

test("a destination that is far, not saturated: the window grows until it carries the source's rate, and a shrink that costs throughput is undone", () => {
  // Each message holds its place for 200 ms on the wire and 400 ms waiting for its PubAck: the relay
  // holds most of the window, which looks like the destination, but a larger window moves more.
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  const far: Path = { ...WAN, destLatencyMs: 400 };
  sim.run(far, 20);
  assert.ok(sim.decisions.some((d) => d.probe === "kept"), "a probe was kept");
  assert.equal(sim.step(far).ratePerSec, 15_000, "the source's whole rate");
  assert.ok(c.window >= 15_000 * 0.605, `window ${c.window} covers rate × (RTT + PubAck wait)`);
  // Held there (no probe that moves nothing keeps it): a handful of updates, then none.
  const settled = sim.run(far, 10);
  assert.ok(sim.decisions.slice(-8).every((d) => !d.changed), "settles");
  assert.equal(settled.ratePerSec, 15_000);
  assertInvariants(sim, 500, 65_536, 1000);
});

test("a far destination the window cannot reach: no downward spiral below what it carries", () => {
  // 64 KiB messages: the bytes cap (64 MiB) holds 1,024, and the relay holds most of them: no probe
  // can go above the cap, and a shrink that costs throughput is undone.
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  const far: Path = { ...WAN, destLatencyMs: 400, msgBytes: 64 * KiB };
  sim.run(far, 20);
  assert.equal(c.limit, "destination");
  assert.ok(Math.min(...sim.decisions.slice(2).map((d) => d.window)) >= 750, "one probe of ×0.75 at most");
  assertInvariants(sim, 500, 65_536, 1000);
});

test("the relay itself the bottleneck: limit relay, no growth", () => {
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  const guarded: Path = { ...WAN, relayMax: 5000 };
  sim.run(guarded, 6);
  const w = c.window;
  const d = sim.run(guarded, 10);
  assert.equal(d.limit, "relay");
  assert.equal(c.window, w);
  assert.ok(sim.decisions.slice(-10).every((x) => !x.changed));
  assert.ok(w < 4000, `window ${w}: grew only while the round trip held it`);
});

test("a relay whose event loop is busy 90 % of the time is the limit, however little it holds: no growth on a PING that read the queue", () => {
  // Loopback under a backlog: the relay holds 100 of 1,000, the rest waits unread in the socket
  // buffers, and a PING behind it reads 40 ms: rate × 40 ms × 2 would grow the window to 2,400.
  const sample = (nowMs: number, delivered: number, busy: number) => ({ nowMs, rttMs: 40, delivered, deliveredBytes: delivered * 512, held: 100, heldBytes: 51_200, awaitingDestination: 0, sourcePending: 100_000, busy });
  const busy = new WindowController({ ...BIG, initial: 1000 });
  busy.observe(sample(0, 0, 0.97));
  const d = busy.observe(sample(1000, 30_000, 0.97));
  assert.deepEqual([d.limit, d.window, d.changed], ["relay", 1000, false]);
  const idle = new WindowController({ ...BIG, initial: 1000 });
  idle.observe(sample(0, 0, 0.5));
  const g = idle.observe(sample(1000, 30_000, 0.5));
  assert.deepEqual([g.limit, g.window, g.changed], ["rtt", 2000, true], "half busy: the round trip limits, it grows");
});

test("idle or caught up: the window stays, limit idle", () => {
  const c = new WindowController(BIG);
  const sim = new Sim(c);
  const d = sim.run({ ...WAN, sourceMax: 50, backlog: false }, 20);
  assert.equal(d.limit, "idle");
  assert.equal(c.window, 1000);
  assert.ok(sim.decisions.every((x) => !x.changed));

  // After growing: a quiet spell does not take the window away.
  sim.run(WAN, 6);
  const open = c.window;
  sim.run({ ...WAN, sourceMax: 0, backlog: false }, 30);
  assert.equal(c.window, open);
  assert.equal(c.limit, "idle");
});

test("a round trip jumping between 20 and 400 ms never drives the window below batchSize or above the caps", () => {
  let seed = 7;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (const caps of [BIG, DEFAULTS, { batchSize: 100, capMessages: 4096, capBytes: 8 * MiB }]) {
    const c = new WindowController(caps);
    const sim = new Sim(c);
    for (let i = 0; i < 400; i++) {
      const rttMs = random() < 0.5 ? 20 : 400;
      const pingMs = random() < 0.1 ? null : random() < 0.8 ? rttMs : 420 - rttMs;
      const r = random();
      const path: Path = {
        rttMs,
        pingMs,
        sourceMax: random() < 0.2 ? 100 : 20_000,
        msgBytes: random() < 0.1 ? 256 * KiB : 2 * KiB,
        backlog: random() < 0.85,
        ...(r < 0.15 ? { destMax: 2000 } : r < 0.25 ? { relayMax: 3000 } : r < 0.3 ? { destLatencyMs: 300 } : {}),
      };
      sim.step(path);
    }
    assertInvariants(sim, caps.batchSize, caps.capMessages, sim.decisions[0]?.window ?? 0);
    assert.ok(new Set(sim.decisions.map((d) => d.window)).size > 1, "it did move");
  }
});

test("the rate comes from the cumulative counters; a counter that goes back is a new baseline", () => {
  const c = new WindowController(BIG);
  const base = { rttMs: 200, held: 10, heldBytes: 10 * KiB, awaitingDestination: 8, sourcePending: 1000 };
  assert.equal(c.observe({ ...base, nowMs: 1000, delivered: 1000, deliveredBytes: 1000 * KiB }).ratePerSec, 0);
  const d = c.observe({ ...base, nowMs: 3000, delivered: 11_000, deliveredBytes: 11_000 * KiB });
  assert.equal(d.ratePerSec, 5000);
  assert.equal(d.neededForRtt, 2000);
  assert.equal(d.window, 2000, "doubled: 1000 on the wire at 5,000/s over 200 ms is the whole window");
  const reset = c.observe({ ...base, nowMs: 4000, delivered: 10, deliveredBytes: 10 * KiB });
  assert.equal(reset.changed, false);
  assert.equal(reset.ratePerSec, 0);
  // Without any RTT: grows on the backlog signal alone, up to the cap.
  const blind = new WindowController({ ...DEFAULTS, capMessages: 4096 });
  const sim = new Sim(blind);
  sim.run({ ...WAN, pingMs: null }, 6);
  assert.equal(blind.window, 4096);
  assert.equal(blind.limit, "messages cap");
  assert.equal(sim.decisions.at(-1)?.neededForRtt, undefined);
});

test("startingWindow: the defaults at 0, 40, 200 and 300 ms (reference 10,000 msgs/s, needed = rate × RTT × 2)", () => {
  assert.deepEqual(startingWindow({ ...DEFAULTS, rttMs: 0 }), { window: 1000, limit: "rtt", neededForRtt: 0, cap: 1024 });
  assert.deepEqual(startingWindow({ ...DEFAULTS, rttMs: 40 }), { window: 1000, limit: "rtt", neededForRtt: 800, cap: 1024 });
  assert.deepEqual(startingWindow({ ...DEFAULTS, rttMs: 200 }), { window: 1000, limit: "messages cap", neededForRtt: 4000, cap: 1024 });
  assert.deepEqual(startingWindow({ ...DEFAULTS, rttMs: 300 }), { window: 1000, limit: "messages cap", neededForRtt: 6000, cap: 1024 });
  // Sized by the worst case (1 MiB max_payload, no average known): one batch, held by the bytes.
  assert.deepEqual(startingWindow({ ...DEFAULTS, rttMs: 40, maxMessageBytes: MiB }), { window: 500, limit: "bytes cap", neededForRtt: 800, cap: 500 });
  // 1 KiB messages on average and a messages cap of 65,536: nothing holds it at 300 ms.
  assert.deepEqual(startingWindow({ ...BIG, rttMs: 300, avgMessageBytes: KiB }), { window: 1000, limit: "rtt", neededForRtt: 6000, cap: 65_536 });
  // 16 KiB on average: 64 MiB holds 4096, below the 6,000 that 300 ms needs.
  assert.deepEqual(startingWindow({ ...BIG, rttMs: 300, avgMessageBytes: 16 * KiB }), { window: 1000, limit: "bytes cap", neededForRtt: 6000, cap: 4096 });
  // No round trip measured.
  assert.deepEqual(startingWindow(DEFAULTS), { window: 1000, limit: "rtt", cap: 1024 });
  // It is where the controller starts.
  assert.equal(new WindowController(DEFAULTS).window, startingWindow(DEFAULTS).window);
});

test("slow start: a round that found the relay holding little, with a backlog beyond the window, doubles it at once, up to the cap", () => {
  const c = new WindowController({ ...BIG, capMessages: 8192, initial: 4096 });
  assert.equal(c.roundTrip(4096, 50_000), undefined, "the relay held all of the window at every delivery: the relay limits, not the round trip");
  assert.equal(c.roundTrip(2048, 50_000), undefined, "held half of it throughout: no growth");
  assert.equal(c.roundTrip(100, 4000), undefined, "less than a window waits at the source: a larger window would carry nothing more");
  const d = c.roundTrip(100, 50_000);
  assert.deepEqual([d?.window, d?.changed, d?.limit], [8192, true, "messages cap"]);
  assert.equal(c.roundTrip(0, 50_000), undefined, "at the cap");
  // Held by the destination (an observation said so): the round trip is not what limits.
  const held = new WindowController({ ...BIG, initial: 4096 });
  const base = { rttMs: 300, heldBytes: 0, sourcePending: 50_000 };
  held.observe({ ...base, nowMs: 0, delivered: 0, deliveredBytes: 0, held: 0, awaitingDestination: 0 });
  held.observe({ ...base, nowMs: 1000, delivered: 4000, deliveredBytes: 4000 * KiB, held: 4000, minHeld: 3000, awaitingDestination: 3500 });
  assert.equal(held.limit, "destination");
  assert.equal(held.roundTrip(0, 50_000), undefined);
});

test("slow start: a round paced slower than the path's round trip does not grow the window; within a region it stops at 4096", () => {
  // Loopback, 0.9 ms: a round of 1,000 deliveries in 30 ms was paced by the relay or the servers.
  const lan = new WindowController({ ...BIG, initial: 1000 });
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 30), undefined, "30 ms for a round over 0.9 ms: not the round trip's pace");
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 6.9), undefined, "just over 2 round trips and 5 ms");
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 6.7)?.window, 2000, "within 2 round trips and 5 ms: the round trip held it");
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 1)?.window, 4000);
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 1)?.window, 4096, "not past 4096 within a region (a doubling that would pass it stops there)");
  assert.equal(lan.roundTrip(100, 50_000, 0.9, 1), undefined);
  // Across 300 ms a round comes in about one round trip.
  const wan = new WindowController({ ...BIG, initial: 4096 });
  assert.equal(wan.roundTrip(100, 50_000, 300, 320)?.window, 8192, "a round in about one round trip: the window limits");
  assert.equal(wan.roundTrip(100, 50_000, 300, 700), undefined, "over two round trips: something else paced it");
  assert.equal(wan.roundTrip(100, 50_000, 300)?.window, 16_384, "no round time known: judged as before");
});

test("who limits is judged by what the relay held throughout, not at the moment of the sample: a burst just delivered is the round trip's", () => {
  const observe = (minHeld: number | undefined) => {
    const c = new WindowController({ ...BIG, initial: 4096 });
    const base = { rttMs: 300, heldBytes: 0, sourcePending: 50_000, awaitingDestination: 500 };
    c.observe({ ...base, nowMs: 0, delivered: 0, deliveredBytes: 0, held: 0 });
    // 3,000 held at the sample (a window's burst just arrived), 8,000 msgs/s over 300 ms.
    return c.observe({ ...base, nowMs: 1000, delivered: 8000, deliveredBytes: 8000 * KiB, held: 3000, ...(minHeld === undefined ? {} : { minHeld }) });
  };
  assert.equal(observe(undefined).limit, "relay", "a sample alone: the relay seems to hold most of the window");
  assert.equal(observe(2500).limit, "relay", "it held most of it all the time");
  const d = observe(200);
  assert.equal(d.limit, "rtt", "between bursts it held little: the round trip limits");
  assert.ok(d.changed && d.window > 4096, `the window grows: ${d.window}`);
});

test("a window that filled at its peaks grows though the round trip is short and nothing waits at the moment (a loaded machine's long cycles)", () => {
  // Loopback, 5,000 msgs/s: the PING reads 5 ms (needed 50), but PubAcks of a loaded R3 destination and
  // a relay waiting for a CPU stretch a message's cycle to 200 ms at its peaks: the 1,000 window filled.
  const sample = (nowMs: number, delivered: number, maxHeld: number, sourcePending = 0, busy = 0.6) => ({ nowMs, rttMs: 5, delivered, deliveredBytes: delivered * 512, held: 300, minHeld: 1, maxHeld, heldBytes: 300 * 512, awaitingDestination: 250, sourcePending, busy });
  const c = new WindowController({ ...DEFAULTS, capMessages: 16_384, initial: 1000 });
  c.observe(sample(0, 0, 0));
  const quiet = c.observe(sample(1000, 5000, 600));
  assert.deepEqual([quiet.limit, quiet.window], ["idle", 1000], "below the fill line: nothing changes");
  const full = c.observe(sample(2000, 10_000, 1000));
  assert.deepEqual([full.limit, full.window, full.changed], ["rtt", 2000, true], "filled, nothing waiting now: doubled");
  c.observe(sample(3000, 15_000, 2000, 700));
  assert.equal(c.window, 4000);
  const lan = c.observe(sample(4000, 20_000, 4000, 700));
  assert.equal(lan.window, 4000, "within a region it stops below 4096 (a move of less than a quarter is not taken)");
  const busy = new WindowController({ ...DEFAULTS, capMessages: 16_384, initial: 1000 });
  busy.observe(sample(0, 0, 0, 0, 0.95));
  assert.equal(busy.observe(sample(1000, 5000, 1000, 700, 0.95)).window, 1000, "a relay at its CPU limit: a larger window only holds more");
});

test("a failed probe is the ceiling while the relay keeps holding most of the window, for a minute; leaving that state forgets it", () => {
  // A guard-bound relay: it holds most of the window, little of it awaits the destination, and a
  // larger window moves no more.
  const c = new WindowController({ ...BIG, initial: 2000 });
  let now = 0;
  let delivered = 0;
  const step = (held: number, rate = 5000, sourcePending = 100_000) => {
    now += 1000;
    delivered += rate;
    return c.observe({ nowMs: now, rttMs: 200, delivered, deliveredBytes: delivered * 512, held, minHeld: held, heldBytes: held * 512, awaitingDestination: 0, sourcePending, busy: 0.5 });
  };
  step(1500);
  const started = step(1500);
  assert.deepEqual([started.limit, started.probe, started.window], ["relay", "started", 3000]);
  const undone = step(2500);
  assert.deepEqual([undone.probe, undone.window], ["undone", 2000]);
  for (let i = 0; i < 59; i++) assert.equal(step(1500).probe, undefined, `no probe at observation ${i} of the ceiling's minute`);
  assert.equal(step(1500).probe, "started", "tried again after a minute");
  step(2500); // undone again
  step(100, 5000, 0); // caught up: the relay holds little
  assert.equal(step(1500).probe, "started", "the ceiling is forgotten once the relay held little");
});
