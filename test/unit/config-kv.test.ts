import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, parseConfigText } from "../../src/config/load.js";
import type { RelayConfig } from "../../src/config/types.js";

const REGIONS = `regions:
  a: { servers: ["nats://127.0.0.1:4222"] }
  b: { servers: ["nats://127.0.0.1:4223"] }
`;

function parse(link: string): RelayConfig {
  return parseConfigText(`${REGIONS}links:\n  - name: kv\n${link}`, "kv.yaml", {});
}

function problems(link: string): readonly string[] {
  try {
    parse(link);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  return assert.fail("expected the config to be rejected");
}

const KV = `    from: { region: a, bucket: cfg }
    to: { region: b, bucket: cfg2 }
`;

void describe("KV links (from.bucket / to.bucket)", () => {
  void it("compiles a bucket into its stream, the key subjects mapped, the audit off", () => {
    const link = parse(KV).links[0];
    assert.ok(link);
    assert.equal(link.from.stream, "KV_cfg");
    assert.equal(link.from.bucket, "cfg");
    assert.equal(link.to.stream, "KV_cfg2");
    assert.equal(link.to.bucket, "cfg2");
    assert.deepEqual(link.to.transform, { stripPrefix: "$KV.cfg.", addPrefix: "$KV.cfg2." });
    assert.equal(link.audit.enabled, false);
    assert.ok(link.stripHeaders.includes("Nats-Rollup"), "a purge's rollup is set again only where it wins");
  });

  void it("leaves the subjects alone between buckets of one name", () => {
    const link = parse(`    from: { region: a, bucket: cfg }\n    to: { region: b, bucket: cfg }\n`).links[0];
    assert.deepEqual(link?.to.transform, {});
  });

  void it("keeps a stream link as it was", () => {
    const link = parse(`    from: { region: a, stream: S }\n    to: { region: b, stream: D }\n`).links[0];
    assert.equal(link?.from.stream, "S");
    assert.equal(link?.from.bucket, undefined);
    assert.equal(link?.to.bucket, undefined);
    assert.equal(link?.audit.enabled, true);
  });

  void it("wants exactly one of stream and bucket at each end, and buckets at both ends or neither", () => {
    assert.deepEqual(problems(`    from: { region: a, bucket: cfg, stream: S }\n    to: { region: b, bucket: cfg }\n`), [
      'links[0].from.bucket: link "kv": give exactly one of from.stream and from.bucket (a bucket\'s stream is KV_<bucket>)',
    ]);
    assert.deepEqual(problems(`    from: { region: a, bucket: cfg }\n    to: { region: b, stream: D }\n`), [
      'links[0].to.bucket: link "kv": from.bucket needs to.bucket (a KV link relays a bucket into a bucket; both ends are buckets or neither)',
    ]);
    assert.deepEqual(problems(`    from: { region: a }\n    to: { region: b, bucket: cfg }\n`), [
      "links[0].from.stream: is required",
      'links[0].from.bucket: link "kv": to.bucket needs from.bucket (a KV link relays a bucket into a bucket; both ends are buckets or neither)',
    ]);
    assert.match(problems(`    from: { region: a, bucket: "c.f" }\n    to: { region: b, bucket: cfg }\n`).join("\n"), /links\[0\]\.from\.bucket: invalid bucket name "c\.f"/);
  });

  void it("refuses what the KV version supersedes, and the audit", () => {
    const found = problems(`    from: { region: a, bucket: cfg }
    to: { region: b, bucket: cfg, order: strict, subject: { addPrefix: x } }
    audit: { enabled: true }
    onGap: halt
    guard:
      memory: true
      versions: { entity: "header:E", version: "header:V" }
`);
    assert.equal(found.length, 5, found.join("\n"));
    assert.ok(found.some((p) => p.startsWith('links[0].onGap: link "kv" is a KV link')));
    assert.ok(found.some((p) => p.startsWith('links[0].to.order: link "kv" is a KV link: to.order: strict is not for a bucket')));
    assert.ok(found.some((p) => p.startsWith('links[0].to.subject: link "kv" is a KV link')));
    assert.ok(found.some((p) => p.startsWith('links[0].guard.versions: link "kv" is a KV link')));
    assert.ok(found.some((p) => p.startsWith('links[0].audit.enabled: link "kv" is a KV link') && p.includes("verify --kv")));
  });

  void it("takes audit.enabled: false and the audit's other settings (they do nothing)", () => {
    const link = parse(`${KV}    audit: { enabled: false, after: 2s }\n`).links[0];
    assert.equal(link?.audit.enabled, false);
  });
});

void describe("a mesh of buckets", () => {
  const mesh = (extra = "") => `regions:
  a: { servers: ["nats://127.0.0.1:4222"] }
  b: { servers: ["nats://127.0.0.1:4223"] }
  c: { servers: ["nats://127.0.0.1:4224"] }
meshes:
  - name: m
    regions: [a, b, c]
    streams: [ORDERS]
    buckets: [cfg, { name: flags, in: { c: flags_c } }]
${extra}`;

  void it("generates a KV link per bucket and ordered pair, beside the streams' links", () => {
    const links = parseConfigText(mesh(), "mesh.yaml", {}).links;
    assert.equal(links.length, 18);
    const kv = links.filter((l) => l.to.bucket !== undefined);
    assert.equal(kv.length, 12);
    const ab = links.find((l) => l.name === "m_cfg_a-to-b");
    assert.equal(ab?.from.bucket, "cfg");
    assert.equal(ab?.to.stream, "KV_cfg");
    assert.equal(ab?.audit.enabled, false);
    const toC = links.find((l) => l.name === "m_flags_a-to-c");
    assert.equal(toC?.to.bucket, "flags_c");
    assert.deepEqual(toC?.to.transform, { stripPrefix: "$KV.flags.", addPrefix: "$KV.flags_c." });
    assert.equal(links.find((l) => l.name === "m_orders_a-to-b")?.from.bucket, undefined);
  });

  void it("excludes and overrides by bucket, and a stream's filter leaves the buckets alone", () => {
    const links = parseConfigText(
      mesh(`    exclude: [{ from: a, to: b, bucket: cfg }, { from: b, to: a, stream: ORDERS }]
    overrides: [{ from: a, to: c, bucket: flags, batchSize: 7 }]
`),
      "mesh.yaml",
      {},
    ).links;
    const names = links.map((l) => l.name);
    assert.ok(!names.includes("m_cfg_a-to-b"));
    assert.ok(names.includes("m_orders_a-to-b") && names.includes("m_flags_a-to-b") && names.includes("m_cfg_b-to-a"));
    assert.ok(!names.includes("m_orders_b-to-a"));
    assert.equal(links.find((l) => l.name === "m_flags_a-to-c")?.batchSize, 7);
    assert.notEqual(links.find((l) => l.name === "m_cfg_a-to-c")?.batchSize, 7);
  });

  void it("reports a bucket's mistakes at its mesh", () => {
    const found = (() => {
      try {
        parseConfigText(mesh(`    exclude: [{ bucket: nope }]
    link: { audit: { enabled: true } }
`).replace("buckets: [cfg,", 'buckets: ["c.fg", cfg, cfg,'), "mesh.yaml", {});
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        return [...err.problems];
      }
      return assert.fail("expected problems");
    })();
    assert.ok(found.some((p) => p.startsWith('meshes[0].buckets[0]: invalid bucket name "c.fg"')), found.join("\n"));
    assert.ok(found.some((p) => p === 'meshes[0].buckets[2]: bucket "cfg" is listed twice (also buckets[1])'), found.join("\n"));
    assert.ok(found.some((p) => p === 'meshes[0].exclude[0].bucket: bucket "nope" is not in this mesh\'s buckets'), found.join("\n"));
    assert.ok(found.includes('meshes[0].link.audit.enabled: generated links "m_cfg_a-to-b", "m_cfg_a-to-c", "m_cfg_b-to-a" and 9 more: the link is a KV link: the continuous audit judges every source message, and a bucket keeps only the winning writes: check a KV link with `jetstream-relay verify --kv`; set audit.enabled: false or remove it'), found.join("\n"));
  });

  void it("wants streams or buckets", () => {
    try {
      parseConfigText(mesh().replace("    streams: [ORDERS]\n", "").replace(/    buckets: .*\n/, ""), "mesh.yaml", {});
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.deepEqual([...err.problems], ["links: must list at least one link", "meshes[0].streams: is required (or buckets)"]);
      return;
    }
    assert.fail("expected a problem");
  });
});
