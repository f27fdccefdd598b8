import { test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, parseConfigText } from "../../src/config/load.js";
import { planReload } from "../../src/config/diff.js";
import { leaseKey } from "../../src/config/lease-key.js";
import type { RelayConfig } from "../../src/config/types.js";

const REGIONS = ["us-east", "us-west", "eu-west", "eu-central", "ap-south", "sa-east"] as const;

function regionsYaml(n: number): string {
  return REGIONS.slice(0, n)
    .map((r, i) => `  ${r}: { servers: ["nats://127.0.0.1:${4300 + i}"] }`)
    .join("\n");
}

/** A 5-region (or `regions`-region) mesh of 3 streams, from one short block. */
function meshYaml(regions = 5, extra = "", links = ""): string {
  return `regions:
${regionsYaml(Math.max(regions, 5))}
${links}meshes:
  - name: global
    regions: [${REGIONS.slice(0, regions).join(", ")}]
    streams: [ORDERS, PAYMENTS, { name: users, in: { ap-south: USERS_AP } }]
    link: { ackWait: 10s, batchSize: 50 }
${extra}`;
}

const parse = (text: string): RelayConfig => parseConfigText(text, "mesh.yaml", {});

function problems(text: string): string[] {
  try {
    parse(text);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return [...err.problems];
  }
  return assert.fail("expected the config to be rejected");
}

test("a 5-region mesh of 3 streams: 60 ordinary links from one short block, named <mesh>_<stream>_<from>-to-<to>", () => {
  const config = parse(meshYaml());
  assert.equal(config.links.length, 60);
  assert.deepEqual(config.meshes, [{ name: "global", links: config.links.map((l) => l.name) }]);
  assert.equal(new Set(config.links.map((l) => l.name)).size, 60);
  const pairs = new Set(config.links.map((l) => `${l.from.region}>${l.to.region}`));
  assert.equal(pairs.size, 20, "every ordered pair of the 5 regions");
  for (const l of config.links) {
    assert.notEqual(l.from.region, l.to.region);
    assert.equal(l.ackWaitMs, 10_000, `${l.name}: the mesh's link settings`);
    assert.equal(l.batchSize, 50);
    assert.equal(l.durableName, `relay-${l.name}`, "the default durable follows the name");
  }
  const orders = config.links.find((l) => l.name === "global_orders_us-east-to-eu-west");
  assert.deepEqual(orders?.from, { region: "us-east", stream: "ORDERS" });
  assert.equal(orders?.to.stream, "ORDERS");
  // A region that names the stream differently.
  const users = config.links.find((l) => l.name === "global_users_ap-south-to-us-west");
  assert.deepEqual(users?.from, { region: "ap-south", stream: "USERS_AP" });
  assert.equal(users?.to.stream, "users");
  assert.equal(
    config.links.find((l) => l.name === "global_users_us-west-to-ap-south")?.to.stream,
    "USERS_AP",
  );
});

test("names, durables and lease keys do not depend on the order or number of the mesh's regions", () => {
  const five = parse(meshYaml(5));
  const reordered = parse(
    meshYaml(5).replace(
      "regions: [us-east, us-west, eu-west, eu-central, ap-south]",
      "regions: [ap-south, eu-central, us-east, eu-west, us-west]",
    ),
  );
  const six = parse(meshYaml(6));
  assert.equal(six.links.length, 90);
  const keyed = (c: RelayConfig) => new Map(c.links.map((l) => [l.name, `${l.durableName} ${leaseKey(l)}`]));
  assert.deepEqual(keyed(reordered), keyed(five));
  const sixKeys = keyed(six);
  for (const [name, key] of keyed(five))
    assert.equal(sixKeys.get(name), key, `${name} keeps its durable and lease key`);
});

test("a sixth region: the reload plan of an existing region adds only the new region's links into it", () => {
  const plan = planReload(parse(meshYaml(5)), parse(meshYaml(6)), "us-east");
  assert.deepEqual([...plan.added.map((u) => u.name)].sort(), [
    "global_orders_sa-east-to-us-east",
    "global_payments_sa-east-to-us-east",
    "global_users_sa-east-to-us-east",
  ]);
  assert.deepEqual(plan.changed, []);
  assert.deepEqual(plan.removed, []);
  assert.equal(
    plan.unchanged.length,
    12,
    "the 4 other regions' links of 3 streams into us-east keep running",
  );
});

test("overrides set keys for one pair (optionally one stream), later over earlier, over the mesh's link", () => {
  const config = parse(
    meshYaml(
      5,
      `    overrides:
      - { from: us-east, to: ap-south, batchSize: 20, maxRate: { messages: 100/s } }
      - { from: us-east, to: ap-south, stream: PAYMENTS, batchSize: 10 }
      - { from: eu-west, to: us-west, durable: kept-position }
`,
    ),
  );
  const link = (n: string) => config.links.find((l) => l.name === n);
  assert.equal(link("global_orders_us-east-to-ap-south")?.batchSize, 20);
  assert.deepEqual(link("global_orders_us-east-to-ap-south")?.maxRate, { messages: 100 });
  assert.equal(link("global_payments_us-east-to-ap-south")?.batchSize, 10);
  assert.equal(
    link("global_orders_ap-south-to-us-east")?.batchSize,
    50,
    "the other direction keeps the mesh's value",
  );
  assert.equal(link("global_orders_eu-west-to-us-west")?.durableName, "kept-position");
});

test("exclude leaves out one direction, every link from or to a region, or one stream's", () => {
  const config = parse(
    meshYaml(
      5,
      `    exclude:
      - { from: us-east, to: us-west }
      - { to: ap-south, stream: PAYMENTS }
      - { from: eu-central, stream: users }
`,
    ),
  );
  const names = new Set(config.links.map((l) => l.name));
  assert.ok(!names.has("global_orders_us-east-to-us-west"));
  assert.ok(names.has("global_orders_us-west-to-us-east"), "only that direction");
  for (const from of ["us-east", "us-west", "eu-west", "eu-central"])
    assert.ok(!names.has(`global_payments_${from}-to-ap-south`));
  assert.ok(names.has("global_orders_us-east-to-ap-south"));
  // 60 - 3 (us-east→us-west, each stream) - 4 (PAYMENTS into ap-south) - 4 (users from eu-central)
  assert.equal(config.links.length, 60 - 3 - 4 - 4);
  assert.equal(config.meshes?.[0]?.links.length, 49);
});

test("a generated name that a hand-written link has already: an error at the mesh naming both", () => {
  const found = problems(
    meshYaml(
      5,
      "",
      `links:
  - name: global_orders_us-east-to-us-west
    from: { region: us-east, stream: ORDERS }
    to: { region: us-west, stream: ORDERS }
`,
    ),
  );
  assert.deepEqual(found, [
    'meshes[0].streams[0]: generated link "global_orders_us-east-to-us-west" has the same name as links[0]: rename one, or exclude the pair',
  ]);
});

test("a mesh's mistakes are reported at their path; a generated link's problem names the mesh's path and the links", () => {
  const found = problems(`regions:
${regionsYaml(5)}
meshes:
  - name: global
    regions: [us-east, us-west, mars]
    streams: [ORDERS, "bad name", { name: users, in: { venus: U } }, { nme: x }]
    link: { ackWait: 10, bogus: 1, durable: shared }
    overrides:
      - { from: us-east, to: us-west, inFlight: 10, batchSize: 20 }
      - { from: us-east, to: ap-south }
    exclude:
      - { form: us-east }
  - name: Global
    regions: [us-east]
    streams: []
`);
  assert.deepEqual(found, [
    'meshes[0].regions[2]: unknown region "mars" (known: us-east, us-west, eu-west, eu-central, ap-south)',
    'meshes[0].streams[1]: invalid stream name "bad name": must not contain whitespace, ".", "*", ">", "/" or "\\"',
    'meshes[0].streams[2].in.venus: region "venus" is not in this mesh (regions: us-east, us-west)',
    "meshes[0].streams[3].name: is required",
    'meshes[0].streams[3].nme: unknown key (did you mean "name"?)',
    'meshes[0].link.ackWait: must be a duration with a unit, e.g. "10s" (got 10)',
    "meshes[0].link.bogus: unknown key (allowed: batchSize, inFlight, inFlightBytes, ackWait, sourceAcks, publishTimeout, stripHeaders, maxHops, onBadMessage, onGap, maxReplayAge, stallAfter, guard, partitions, startAt, audit, maxRate)",
    "meshes[0].link.durable: unknown key (allowed: batchSize, inFlight, inFlightBytes, ackWait, sourceAcks, publishTimeout, stripHeaders, maxHops, onBadMessage, onGap, maxReplayAge, stallAfter, guard, partitions, startAt, audit, maxRate)",
    'meshes[0].overrides[0].batchSize: generated links "global_orders_us-east-to-us-west", "global_users_us-east-to-us-west": must not be larger than inFlight (10)',
    'meshes[0].overrides[1].to: region "ap-south" is not in this mesh (regions: us-east, us-west)',
    "meshes[0].exclude[0].form: unknown key (allowed: from, to, stream, bucket)",
    'meshes[1].name: invalid mesh name "Global": use lowercase letters, digits and "-", starting with a letter or digit',
    "meshes[1].regions: a mesh needs at least two regions",
    "meshes[1].streams: must list at least one stream",
  ]);
});

test("a stream name that cannot be part of a link name must be given a name for the links", () => {
  const found = problems(meshYaml(5).replace("streams: [ORDERS,", "streams: [ORDERS+EU,"));
  assert.deepEqual(found, [
    'meshes[0].streams[0]: stream "ORDERS+EU" cannot be part of a link name (letters, digits, "-" and "_"): write it as { name: <label>, in: { <region>: ORDERS+EU, ... } }',
  ]);
});
