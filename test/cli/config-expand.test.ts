import { test } from "node:test";
import assert from "node:assert/strict";
import { parse } from "yaml";
import { parseConfigText } from "../../src/config/load.js";
import { RelayProcess, writeConfig } from "../helpers/relays.js";

async function cli(args: string[], env: Record<string, string> = {}) {
  const p = new RelayProcess(args, env);
  const code = await p.exited;
  return { code, out: p.stdout.join(""), err: p.stderr.join("") };
}

const REGIONS = `regions:
  us-east: { servers: ["nats://127.0.0.1:4301"] }
  eu-west: { servers: ["nats://127.0.0.1:4302"] }
  ap-south: { servers: ["nats://127.0.0.1:4303"] }
`;
const MESH = `${REGIONS}links:
  - name: backfill
    from: { region: us-east, stream: ARCHIVE }
    to: { region: eu-west, stream: ARCHIVE }
meshes:
  - name: core
    regions: [us-east, eu-west, ap-south]
    streams: [ORDERS, { name: users, in: { ap-south: USERS_AP } }]
    link:
      ackWait: 10s
      guard: { redis: { url: "redis://127.0.0.1:6390", password: "\${MESH_REDIS_PASSWORD}" } }
    overrides:
      - { from: us-east, to: ap-south, maxRate: { messages: 100/s } }
    exclude:
      - { from: ap-south, to: eu-west, stream: users }
`;
const ENV = { MESH_REDIS_PASSWORD: "s3cret-mesh-pw-123" };

test("config expand prints the links section a mesh expands to: pasted in place of the mesh, it compiles to the same links, and no secret is printed", async () => {
  const path = await writeConfig(MESH);
  const r = await cli(["config", "expand", "--config", path], ENV);
  assert.equal(r.code, 0, r.err);
  assert.ok(!r.out.includes(ENV.MESH_REDIS_PASSWORD), "the environment's secret is not printed");
  assert.match(r.out, /\$\{MESH_REDIS_PASSWORD\}/, "values as written");
  assert.match(r.out, /^# .*: 12 links: 1 written under links, 11 from mesh core$/m);
  const printed = parse(r.out) as { links: { name: string }[] };
  assert.equal(printed.links.length, 12);
  assert.equal(printed.links[0]?.name, "backfill");
  assert.ok(printed.links.some((l) => l.name === "core_users_ap-south-to-us-east"));
  assert.ok(!printed.links.some((l) => l.name === "core_users_ap-south-to-eu-west"), "excluded");
  // What a user pastes: the regions and the printed links, no mesh.
  const original = parseConfigText(MESH, "mesh.yaml", ENV);
  const pasted = parseConfigText(`${REGIONS}${r.out}`, "pasted.yaml", ENV);
  assert.deepEqual(pasted.links, original.links);
  assert.equal(pasted.meshes, undefined);

  const check = await cli(["check", "--config", path], ENV);
  assert.equal(check.code, 0, check.err);
  assert.match(check.out, /is valid: 3 regions, 12 links/);
  assert.match(check.out, /^mesh core: expands to 11 links/m);
  assert.match(
    check.out,
    /^ {2}core_orders_us-east-to-ap-south: us-east\/ORDERS -> ap-south\/ORDERS \(guard redis\)$/m,
  );
});

test("config expand with a bad mesh exits 2 naming the mesh's path; without a subcommand it is a usage error", async () => {
  const path = await writeConfig(
    MESH.replace("regions: [us-east, eu-west, ap-south]", "regions: [us-east, eu-west, mars]"),
  );
  const r = await cli(["config", "expand", "--config", path], ENV);
  assert.equal(r.code, 2);
  assert.match(r.err, /meshes\[0\]\.regions\[2\]: unknown region "mars"/);
  assert.equal(r.out, "", "nothing printed before the config is valid");
  const usage = await cli(["config", "--config", path]);
  assert.equal(usage.code, 2);
  assert.match(usage.err, /config: unknown subcommand/);
  const help = await cli(["config", "--help"]);
  assert.equal(help.code, 0);
  assert.match(help.out, /jetstream-relay config expand --config FILE/);
});
