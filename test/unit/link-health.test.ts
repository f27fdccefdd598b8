import { test } from "node:test";
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import pino from "pino";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import { LinkHealth } from "../../src/link/link-health.js";
import { LinkStateMachine } from "../../src/link/link-state.js";
import { createMetrics } from "../../src/observability/metrics.js";

/** A link's health over a real state machine: what the states and relay_recoveries_total say. */
function harness() {
  const metrics = createMetrics(new Registry(), { defaultMetrics: false });
  const state = new LinkStateMachine("a-to-b", metrics, pino({ level: "silent" }));
  const lease: { holder: string | undefined; isEligible: boolean } = { holder: undefined, isEligible: false };
  const ownership = { standby: true, tookOver: false, atWork: () => void (ownership.tookOver = false) };
  const health = new LinkHealth({
    link: "a-to-b",
    inFlight: 100,
    state,
    metrics,
    logger: pino({ level: "silent" }),
    signal: new AbortController().signal,
    lease,
    ownership,
    resync: { running: false, pending: undefined },
    guardLossReason: () => undefined,
    backlog: () => ({ messages: 0, pending: 0, ageSeconds: 0, clockOffsetMs: 0 }) as never,
  });
  const recoveries = async () => (await metrics.recoveries.get()).values.reduce((n, v) => n + v.value, 0);
  const sequence = () => state.history.map((h) => h.state);
  /** The lease was acquired: this relay owns the link. */
  const own = () => {
    ownership.standby = false;
    ownership.tookOver = true;
    health.refresh();
  };
  return { health, lease, ownership, own, recoveries, sequence, state };
}

test("link health: a link placed on another relay at start, then on this one, takes the lease over without a recovery episode", async () => {
  const h = harness();
  h.health.refresh(); // placed elsewhere (this relay did not see its group yet)
  assert.equal(h.state.state, "standby");
  h.lease.isEligible = true; // the group is seen: placed here, nobody holds the lease
  h.health.refresh();
  assert.equal(h.state.state, "standby");
  assert.match(h.state.reason ?? "", /this relay is taking it/);
  h.own();
  h.health.refresh();
  assert.deepEqual(h.sequence(), ["starting", "standby", "catching-up", "live"]);
  assert.equal(await h.recoveries(), 0, "a takeover is not an outage of this relay");
});

test("link health: an owner that loses its lease recovers once; a trouble after it is a second episode", async () => {
  const h = harness();
  h.lease.isEligible = true;
  h.health.refresh();
  assert.equal(h.state.state, "starting", "starting, taking the lease");
  h.own();
  h.health.refresh();
  assert.equal(h.state.state, "live");
  h.ownership.standby = true; // the lease lost (e.g. the ownership bucket unreachable), nobody holds it
  h.health.refresh();
  assert.equal(h.state.state, "recovering");
  assert.equal(h.state.reason, "waiting for the link lease");
  h.own();
  h.health.refresh();
  assert.equal(h.state.state, "live");
  assert.equal(await h.recoveries(), 1);
  h.health.trouble("dest", new RelayError(ErrorCodes.PUBLISH_FAILED, "destination disconnected"));
  assert.equal(h.state.state, "recovering");
  h.health.clear("dest");
  assert.equal(h.state.state, "live");
  assert.equal(await h.recoveries(), 2);
});
