import { test } from "node:test";
import assert from "node:assert/strict";
import { canonicalJson, configHash } from "../../src/config/compile.js";
import { planReload, unitKeys } from "../../src/config/diff.js";
import { parseConfigText } from "../../src/config/load.js";
import type { RelayConfig } from "../../src/config/types.js";
import { ErrorCodes, isRelayError } from "../../src/errors.js";

const parse = (text: string): RelayConfig => parseConfigText(text, "test.yaml", { PW: "s3cret-password" });

/** Region b's relay runs a-to-b and c-to-b; b-to-a belongs to region a's relays. */
const BASE = {
  regions: `regions:
  a: { servers: ["nats://a1:4222"] }
  b: { servers: ["nats://b1:4222"] }
  c: { servers: ["nats://c1:4222"] }
`,
  links: [
    `  - name: a-to-b
    from: { region: a, stream: ORDERS }
    to: { region: b, stream: ORDERS }`,
    `  - name: c-to-b
    from: { region: c, stream: PAYMENTS }
    to: { region: b, stream: PAYMENTS }`,
    `  - name: b-to-a
    from: { region: b, stream: ORDERS }
    to: { region: a, stream: ORDERS_COPY }`,
  ],
  rest: "",
};

function yaml(over: Partial<typeof BASE> = {}): string {
  const { regions, links, rest } = { ...BASE, ...over };
  return `${regions}links:\n${links.join("\n")}\n${rest}`;
}

const units = (plan: ReturnType<typeof planReload>) => ({
  added: plan.added.map((u) => u.name),
  removed: [...plan.removed],
  changed: plan.changed.map((u) => u.name),
  unchanged: [...plan.unchanged],
});

test("the same file: every link unchanged, nothing needs a restart, same hash", () => {
  const plan = planReload(parse(yaml()), parse(yaml()), "b");
  assert.deepEqual(units(plan), { added: [], removed: [], changed: [], unchanged: ["a-to-b", "c-to-b"] });
  assert.deepEqual(plan.needsRestart, []);
  assert.deepEqual(plan.reconnect, []);
  assert.equal(configHash(parse(yaml())), configHash(parse(yaml())));
});

test("links added, removed and changed are told apart by name; links of other regions do not count", () => {
  const next = yaml({
    links: [
      BASE.links[0] ?? "",
      `  - name: c-to-b
    from: { region: c, stream: PAYMENTS }
    to: { region: b, stream: PAYMENTS, subject: { addPrefix: "c." } }`,
      `  - name: a2-to-b
    from: { region: a, stream: INVOICES }
    to: { region: b, stream: INVOICES }`,
    ],
  });
  // b-to-a was removed too, but it is not region b's.
  const plan = planReload(parse(yaml()), parse(next), "b");
  assert.deepEqual(units(plan), {
    added: ["a2-to-b"],
    removed: [],
    changed: ["c-to-b"],
    unchanged: ["a-to-b"],
  });
  const removed = planReload(parse(next), parse(yaml()), "b");
  assert.deepEqual(units(removed), {
    added: [],
    removed: ["a2-to-b"],
    changed: ["c-to-b"],
    unchanged: ["a-to-b"],
  });
});

test("a value spelled differently but meaning the same is no change (the compiled config is compared)", () => {
  const before = yaml({ links: [`${BASE.links[0] ?? ""}\n    ackWait: 30s`, ...BASE.links.slice(1)] });
  const after = yaml({
    links: [`${BASE.links[0] ?? ""}\n    ackWait: 30000ms\n    batchSize: 500`, ...BASE.links.slice(1)],
  });
  const plan = planReload(parse(before), parse(after), "b");
  assert.deepEqual(units(plan).unchanged, ["a-to-b", "c-to-b"]);
});

test("a partitioned link is compared by partition: more partitions add units and change the others", () => {
  const partitioned = (count: number) =>
    yaml({
      links: [
        `  - name: a-to-b
    from: { region: a, stream: ORDERS, filter: "orders.*.>" }
    to: { region: b, stream: ORDERS }
    partitions: { count: ${count}, token: 2 }`,
        ...BASE.links.slice(1),
      ],
    });
  const plan = planReload(parse(partitioned(2)), parse(partitioned(3)), "b");
  assert.deepEqual(units(plan), {
    added: ["a-to-b/p2"],
    removed: [],
    changed: ["a-to-b/p0", "a-to-b/p1"],
    unchanged: ["c-to-b"],
  });
  const fewer = planReload(parse(partitioned(3)), parse(partitioned(2)), "b");
  assert.deepEqual(fewer.removed, ["a-to-b/p2"]);
  assert.deepEqual(
    unitKeys(parse(partitioned(2)), "b"),
    new Set(["a.ORDERS.relay-a-to-b-p0", "a.ORDERS.relay-a-to-b-p1", "c.PAYMENTS.relay-c-to-b"]),
  );
});

test("a new direct route into a link's destination stream leaves that link running (it reads the routes of the running config)", () => {
  const next = yaml({
    links: [
      ...BASE.links,
      `  - name: c-to-b-orders
    from: { region: c, stream: ORDERS }
    to: { region: b, stream: ORDERS }
    durable: c-orders`,
    ],
  });
  const plan = planReload(parse(yaml()), parse(next), "b");
  assert.deepEqual(units(plan), {
    added: ["c-to-b-orders"],
    removed: [],
    changed: [],
    unchanged: ["a-to-b", "c-to-b"],
  });
});

test("a source region's new servers or credentials: its links change and its connection is replaced", () => {
  const next = yaml({
    regions: `regions:
  a: { servers: ["nats://a1:4222"] }
  b: { servers: ["nats://b1:4222"] }
  c: { servers: ["nats://c2:4222"], auth: { user: relay, password: "\${PW}" } }
`,
  });
  const plan = planReload(parse(yaml()), parse(next), "b");
  assert.deepEqual(units(plan), { added: [], removed: [], changed: ["c-to-b"], unchanged: ["a-to-b"] });
  assert.deepEqual(plan.reconnect, ["c"]);
  assert.deepEqual(plan.needsRestart, []);
});

test("the relay's own region, group and http.listen need a restart: the running values are kept", () => {
  const next = yaml({
    regions: `regions:
  a: { servers: ["nats://a1:4222"] }
  b: { servers: ["nats://b2:4222"], domain: hub }
  c: { servers: ["nats://c1:4222"] }
`,
    rest: `group: { lease: 10s, renew: 2s }\nhttp: { listen: "0.0.0.0:9999", token: "0123456789abcdef" }\nlog: { level: debug }\nshutdown: { grace: 5s }\nreload: { watch: true }\n`,
  });
  const current = parse(yaml());
  const plan = planReload(current, parse(next), "b");
  assert.deepEqual(plan.needsRestart, [
    "regions.b.servers",
    "regions.b.domain",
    "group.lease",
    "group.renew",
    "http.listen",
  ]);
  assert.deepEqual(
    units(plan).unchanged,
    ["a-to-b", "c-to-b"],
    "the links keep running: their region stays as it runs",
  );
  assert.deepEqual(plan.effective.regions.get("b"), current.regions.get("b"));
  assert.deepEqual(plan.effective.group, current.group);
  assert.deepEqual(
    [plan.effective.http.host, plan.effective.http.port],
    [current.http.host, current.http.port],
  );
  // What applies live comes through.
  assert.equal(plan.effective.http.token, "0123456789abcdef");
  assert.equal(plan.effective.log.level, "debug");
  assert.equal(plan.effective.shutdownGraceMs, 5_000);
  assert.equal(plan.effective.reload.watch, true);
});

test("a config without the relay's region is refused (--region is fixed)", () => {
  const next = yaml({
    regions: `regions:
  a: { servers: ["nats://a1:4222"] }
  c: { servers: ["nats://c1:4222"] }
`,
    links: [BASE.links[2]?.replace("region: b", "region: c") ?? ""],
  });
  assert.throws(
    () => planReload(parse(yaml()), parse(next), "b"),
    (err: unknown) =>
      isRelayError(err, ErrorCodes.CONFIG_INVALID) &&
      /region "b" \(--region\) is not in the new config/.test(String(err)),
  );
});

test("reload.watch defaults to false; the hash ignores key order and leaves secrets out", () => {
  assert.equal(parse(yaml()).reload.watch, false);
  assert.equal(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }] }), canonicalJson({ a: [{ c: 3, d: 2 }], b: 1 }));
  const withSecret = (pw: string) =>
    parseConfigText(
      yaml({
        regions: `regions:
  a: { servers: ["nats://relay:${pw}@a1:4222"] }
  b: { servers: ["nats://b1:4222"], auth: { token: "${pw}" } }
  c: { servers: ["nats://c1:4222"] }
`,
      }),
      "test.yaml",
      {},
    );
  assert.equal(configHash(withSecret("first-secret")), configHash(withSecret("other-secret")));
  assert.notEqual(configHash(parse(yaml())), configHash(parse(yaml({ rest: "log: { level: debug }\n" }))));
  assert.match(configHash(parse(yaml())), /^[0-9a-f]{16}$/);
  // The links compare with their secrets: a new password restarts the links of its region.
  const plan = planReload(withSecret("first-secret"), withSecret("other-secret"), "b");
  assert.deepEqual(units(plan).changed, ["a-to-b"]);
  assert.deepEqual(plan.needsRestart, ["regions.b.auth"]);
});

test("jetstream-relay status: the header names the config's hash, a failed last reload and what waits for a restart", async () => {
  const { configHeader } = await import("../../src/cli/status-command.js");
  const base = { region: "b", startedAt: "2026-12-01T00:00:00.000Z", links: [] };
  assert.equal(configHeader(base), "");
  const config = { hash: "0123456789abcdef", loadedAt: "2026-12-01T00:01:00.000Z" };
  assert.equal(
    configHeader({ ...base, config }),
    ", config 0123456789abcdef loaded 2026-12-01T00:01:00.000Z",
  );
  const failed = {
    at: "2026-12-01T00:02:00.000Z",
    trigger: "SIGHUP",
    result: "failure" as const,
    error: "config x is invalid",
  };
  assert.match(
    configHeader({ ...base, config: { ...config, lastReload: failed, needsRestart: ["group.lease"] } }),
    /\(last reload at 2026-12-01T00:02:00.000Z failed\) \(needs a restart: group.lease\)$/,
  );
  const partial = {
    at: "2026-12-01T00:03:00.000Z",
    trigger: "SIGHUP",
    result: "partial" as const,
    notStarted: [{ link: "two", reason: "link two: durable d filters x" }],
  };
  assert.match(configHeader({ ...base, config: { ...config, lastReload: partial } }), /\(last reload at 2026-12-01T00:03:00.000Z: not started: two\)$/);
});
