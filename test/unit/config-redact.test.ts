import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../../src/config/load.js";
import {
  REDACTED,
  collectSecrets,
  redactConfig,
  redactUrl,
  scrubSecrets,
  secretsOf,
  urlSecrets,
} from "../../src/config/redact.js";

const FULL = fileURLToPath(new URL("../fixtures/config/good-full.yaml", import.meta.url));

void describe("redactUrl", () => {
  void it("hides passwords and lone-user tokens, keeps the rest", () => {
    assert.equal(redactUrl("redis://:pw@redis:6379/0"), "redis://:[redacted]@redis:6379/0");
    assert.equal(redactUrl("redis://user:pw@redis:6379"), "redis://user:[redacted]@redis:6379");
    assert.equal(redactUrl("nats://s3cr3t@a1:4222"), "nats://[redacted]@a1:4222");
    assert.equal(redactUrl("relay:pw@a1:4222"), "relay:[redacted]@a1:4222");
    assert.equal(redactUrl("nats://a1:4222"), "nats://a1:4222");
    // An unencoded "/" in the password does not fool it.
    assert.equal(redactUrl("redis://:pa/ss@redis:6379"), "redis://:[redacted]@redis:6379");
  });

  void it("lists URL secrets raw and decoded", () => {
    assert.deepEqual(urlSecrets("redis://:p%40ss@r:1"), ["p%40ss", "p@ss"]);
    assert.deepEqual(urlSecrets("nats://tok@a:1"), ["tok", "tok"]);
    assert.deepEqual(urlSecrets("nats://a:1"), []);
  });
});

void describe("redactConfig / secretsOf", () => {
  const env = {
    RELAY_FIXTURE_US_TOKEN: "us-token-4c1d",
    RELAY_FIXTURE_EU_PASSWORD: "eu-pass-77aa",
    RELAY_FIXTURE_REDIS_PASSWORD: "redis-pass-0b9e",
    RELAY_FIXTURE_SENTINEL_PASSWORD: "sentinel-pass-e2f0",
  };

  void it("lists every secret", async () => {
    const c = await loadConfig(FULL, env);
    assert.deepEqual(new Set(secretsOf(c)), new Set(Object.values(env)));
  });

  void it("produces JSON with no secret in it, and everything else intact", async () => {
    const c = await loadConfig(FULL, env);
    const view = redactConfig(c);
    const json = JSON.stringify(view);
    for (const secret of Object.values(env)) assert.ok(!json.includes(secret), secret);
    assert.deepEqual(JSON.parse(json), view);
    const v = view as {
      regions: Record<string, { auth?: unknown }>;
      links: { guard?: { store: unknown }; ackWaitMs: number }[];
    };
    assert.deepEqual(v.regions["us-east"]?.auth, { kind: "token", token: REDACTED });
    assert.deepEqual(v.regions["eu-west"]?.auth, { kind: "user", user: "relay", password: REDACTED });
    assert.deepEqual(v.regions["ap-south"]?.auth, { kind: "creds", credsFile: "/etc/relay/ap.creds" });
    assert.deepEqual(v.links[0]?.guard?.store, { kind: "redis", url: "redis://:[redacted]@redis:6379/0" });
    assert.equal(v.links[0]?.ackWaitMs, 60_000);
    assert.equal((v.links[3]?.guard?.store as { password?: string }).password, REDACTED);
  });
});

void describe("collectSecrets / scrubSecrets", () => {
  void it("finds token and password values and URL credentials in a raw tree", () => {
    const tree = { a: { token: "t-1234", password: "p-5678", user: "u" }, s: ["nats://x:y-pass@h:1"], n: 1 };
    assert.deepEqual(new Set(collectSecrets(tree)), new Set(["t-1234", "p-5678", "y-pass"]));
  });

  void it("scrubs long secrets anywhere, short ones only when quoted", () => {
    assert.equal(scrubSecrets('a "t-1234" b t-1234', ["t-1234"]), 'a "[redacted]" b [redacted]');
    assert.equal(scrubSecrets('ab "ab"', ["ab"]), 'ab "[redacted]"');
  });
});
