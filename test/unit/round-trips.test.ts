import { test } from "node:test";
import assert from "node:assert/strict";
import { RoundTripMeter, RoundTrips } from "../../src/nats/round-trips.js";

/** A connection whose PINGs the test answers by hand, counting them. */
function connection() {
  const pings: { resolve(ms: number): void; reject(err: Error): void }[] = [];
  return {
    pings,
    rtt: () => new Promise<number>((resolve, reject) => pings.push({ resolve, reject })),
  };
}

test("round trips: callers of the moment share one PING; a measurement younger than maxAge answers without one; an older one starts a new PING", async () => {
  const nc = connection();
  let now = 0;
  const meter = new RoundTripMeter(nc, 2_000, () => now);
  const waiting = [meter.latest(5_000), meter.latest(5_000), meter.latest(5_000)];
  assert.equal(nc.pings.length, 1, "three links, one PING");
  nc.pings[0]!.resolve(180);
  assert.deepEqual(await Promise.all(waiting), [180, 180, 180]);
  now = 4_999;
  assert.equal(await meter.latest(5_000), 180);
  assert.equal(nc.pings.length, 1, "younger than 5 s: no PING");
  now = 5_000;
  const next = meter.latest(5_000);
  assert.equal(nc.pings.length, 2, "5 s old: a new PING");
  nc.pings[1]!.resolve(20);
  assert.equal(await next, 20);
});

test("round trips: a PING that fails or gets no PONG within the wait rejects its callers, and the next call tries again", async () => {
  const nc = connection();
  const meter = new RoundTripMeter(nc, 30);
  const failed = meter.latest(5_000);
  nc.pings[0]!.reject(new Error("connection closed"));
  await assert.rejects(failed, /connection closed/);
  await assert.rejects(meter.latest(5_000), /round trip: no answer within 30 ms/);
  assert.equal(nc.pings.length, 2);
  const third = meter.latest(5_000);
  assert.equal(nc.pings.length, 3, "nothing was measured: the next caller sends a PING");
  nc.pings[2]!.resolve(1);
  assert.equal(await third, 1);
});

test("round trips: one meter per connection", () => {
  const trips = new RoundTrips(2_000);
  const a = connection();
  const b = connection();
  assert.equal(trips.of(a), trips.of(a));
  assert.notEqual(trips.of(a), trips.of(b));
});
