import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { parseConfigText } from "../../src/config/load.js";
import { isRelayError } from "../../src/errors.js";
import { controlKey, describePause, formatControlValue, parseControlValue } from "../../src/group/link-control.js";
import { LinkHealth } from "../../src/link/link-health.js";
import { OperatorPause } from "../../src/link/operator-pause.js";
import type { LinkState } from "../../src/observability/metrics.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { createLogger } from "../../src/observability/logger.js";
import { parseLinkArgs, selectLinkUnits } from "../../src/cli/link-command.js";
import { formatPauses } from "../../src/cli/status-command.js";
import type { RelayStatus } from "../../src/relay/relay.js";
import { Registry } from "prom-client";

const silent = () => createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, cb) => cb() }), secrets: [] });

const CONFIG = `regions:
  us-east:
    servers: ["nats://a1:4222"]
  eu-west:
    servers: ["nats://b1:4222"]
links:
  - name: orders
    from: { region: us-east, stream: ORDERS, filter: "orders.*.>" }
    to: { region: eu-west, stream: ORDERS }
    partitions: { count: 3, token: 2 }
  - name: back
    from: { region: eu-west, stream: BACK }
    to: { region: us-east, stream: BACK }
`;

const usageError = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (err: unknown) => isRelayError(err) && err.code === "USAGE" && pattern.test(err.message));

test("control value: parsed from the key's JSON; anything else is not a control value", () => {
  const v = { paused: true, reason: "maintenance", by: "ops@host", at: "2025-01-01T00:00:00.000Z" };
  assert.deepEqual(parseControlValue(formatControlValue(v)), v);
  assert.deepEqual(parseControlValue('{"paused":false}'), { paused: false, reason: "", by: "", at: "" });
  assert.equal(parseControlValue("not json"), undefined);
  assert.equal(parseControlValue('"paused"'), undefined);
  assert.equal(parseControlValue("null"), undefined);
  assert.equal(parseControlValue('{"paused":"yes"}'), undefined);
  assert.equal(parseControlValue('{"reason":"no paused field"}'), undefined);
  assert.equal(controlKey("us-east.ORDERS.relay-orders-p0"), "_control.us-east.ORDERS.relay-orders-p0");
  assert.equal(describePause(v), "paused by ops@host at 2025-01-01T00:00:00.000Z: maintenance");
});

test("link CLI args: pause needs a link and --reason; status takes an optional link; mistakes are USAGE errors", () => {
  assert.deepEqual(parseLinkArgs(["pause", "orders", "--config", "c.yaml", "--region", "eu-west", "--reason", "why", "--by", "me"]), {
    sub: "pause",
    link: "orders",
    config: "c.yaml",
    region: "eu-west",
    reason: "why",
    by: "me",
    json: false,
    help: false,
  });
  // Options before the link name too.
  assert.equal(parseLinkArgs(["resume", "--config", "c.yaml", "orders/p1"]).link, "orders/p1");
  assert.equal(parseLinkArgs(["status", "--config", "c.yaml", "--json"]).link, undefined);
  usageError(() => parseLinkArgs(["pause", "orders", "--config", "c.yaml"]), /--reason is required/);
  usageError(() => parseLinkArgs(["pause", "--config", "c.yaml", "--reason", "x"]), /name the link/);
  usageError(() => parseLinkArgs(["resume", "orders"]), /--config is required/);
  usageError(() => parseLinkArgs(["stop", "orders", "--config", "c.yaml"]), /unknown subcommand "stop"/);
  usageError(() => parseLinkArgs([]), /give a subcommand/);
  usageError(() => parseLinkArgs(["pause", "a", "b", "--config", "c.yaml", "--reason", "x"]), /one link at a time/);
  usageError(() => parseLinkArgs(["pause", "a", "--config", "c.yaml", "--reason", "x", "--force"]), /--force/);
  usageError(() => parseLinkArgs(["status", "--config", "c.yaml", "--reason", "x"]), /belong to pause and resume/);
});

test("link units: a partitioned link by its name is all its partitions, NAME/p<i> one; unknown links and regions are named", () => {
  const config = parseConfigText(CONFIG, "test.yaml");
  assert.deepEqual(selectLinkUnits(config, "orders", undefined).map((u) => u.name), ["orders/p0", "orders/p1", "orders/p2"]);
  assert.deepEqual(selectLinkUnits(config, "orders/p1", "eu-west").map((u) => u.name), ["orders/p1"]);
  assert.deepEqual(selectLinkUnits(config, undefined, "us-east").map((u) => u.name), ["back"]);
  usageError(() => selectLinkUnits(config, "nope", undefined), /unknown link "nope" \(links in the config: orders, back\)/);
  usageError(() => selectLinkUnits(config, "orders", "us-east"), /relayed into region eu-west, not us-east/);
  usageError(() => selectLinkUnits(config, "orders", "mars"), /--region mars is not in the config/);
});

function pauseHarness(awaitControl: boolean) {
  const metrics = createMetrics(new Registry(), { defaultMetrics: false });
  const events: string[] = [];
  const pause = new OperatorPause({
    link: "a-to-b",
    metrics,
    logger: silent(),
    awaitControl,
    events: { paused: (reason) => events.push(`paused ${reason}`), resumed: () => events.push("resumed") },
  });
  const gauge = async () => (await metrics.linkPaused.get()).values.find((v) => v.labels["link"] === "a-to-b")?.value;
  return { pause, events, gauge };
}

test("operator pause: holds until the control value is known, pauses and resumes once per change, wakes the consume loop", async () => {
  const h = pauseHarness(true);
  assert.equal(h.pause.holding, true, "nothing is pulled before the control key is read");
  assert.equal(h.pause.paused, false);
  assert.equal(await h.gauge(), 0);
  let woke = h.pause.changed(AbortSignal.timeout(5_000));
  h.pause.set(undefined);
  await woke;
  assert.equal(h.pause.holding, false, "known, nobody paused it: it pulls");
  assert.deepEqual(h.events, []);

  const value = { paused: true, reason: "maintenance", by: "ops@host", at: "2025-01-01T00:00:00.000Z" };
  h.pause.set(value);
  h.pause.set(value); // the same value read again: no second change
  assert.equal(h.pause.holding, true);
  assert.deepEqual(h.pause.pause, value);
  assert.equal(await h.gauge(), 1);
  assert.deepEqual(h.events, ["paused paused by ops@host at 2025-01-01T00:00:00.000Z: maintenance (jetstream-relay link resume to go on)"]);

  woke = h.pause.changed(AbortSignal.timeout(5_000));
  h.pause.set({ ...value, paused: false, at: "2025-01-01T01:00:00.000Z" });
  await woke;
  assert.equal(h.pause.holding, false);
  assert.equal(h.pause.pause, undefined);
  assert.equal(await h.gauge(), 0);
  assert.deepEqual(h.events.slice(1), ["resumed"]);
  // Not awaiting control (a link outside a relay): it pulls from the start.
  assert.equal(pauseHarness(false).pause.holding, false);
});

test("link health: an operator's pause is `paused` with who/when/why, never `stalled`, and holds the stall watch off", () => {
  let current: LinkState = "live";
  const health = new LinkHealth({
    link: "a-to-b",
    inFlight: 100,
    state: { get state() { return current; }, set: (s: LinkState) => void (current = s) },
    metrics: createMetrics(new Registry(), { defaultMetrics: false }),
    logger: silent(),
    signal: new AbortController().signal,
    lease: { holder: undefined, isEligible: true },
    ownership: { standby: false, tookOver: false, atWork: () => undefined },
    resync: { running: false, pending: undefined },
    guardLossReason: () => undefined,
    backlog: () => ({ messages: 0, pending: 0, ageSeconds: 0, clockOffsetMs: 0 }) as never,
  });
  health.stalled("no delivery for 10 s");
  assert.equal(current, "stalled");
  health.operatorPaused("paused by ops at t: maintenance");
  assert.equal(current, "paused");
  assert.equal(health.nothingButStalled(), false, "a paused link is not eligible for a stall");
  health.stallEnded();
  health.operatorResumed();
  assert.equal(current, "live");
});

test("status table: links an operator paused are listed with who, when and why", () => {
  const status = {
    links: [
      { name: "a", state: "paused", operatorPause: { paused: true, by: "ops@h", at: "T", reason: "maintenance" } },
      { name: "b", state: "live" },
    ],
  } as unknown as RelayStatus;
  assert.equal(formatPauses(status), "paused by an operator (jetstream-relay link resume LINK to go on):\n  a: paused by ops@h at T: maintenance");
  assert.equal(formatPauses({ links: [] } as unknown as RelayStatus), "");
});
