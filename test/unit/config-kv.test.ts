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
