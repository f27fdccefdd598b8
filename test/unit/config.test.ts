import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { isRelayError, ErrorCodes } from "../../src/errors.js";
import { ConfigError, loadConfig, parseConfigText } from "../../src/config/load.js";
import {
  DEFAULT_STRIP_HEADERS,
  DEFAULTS,
  compileConfig,
  parseFieldSource,
} from "../../src/config/compile.js";
import { formatPath, validateConfig } from "../../src/config/schema.js";
import type { RelayConfig } from "../../src/config/types.js";

const FIXTURES = fileURLToPath(new URL("../fixtures/config/", import.meta.url));
const fixture = (name: string): string => join(FIXTURES, name);

/** Runs `fn`, which must throw a ConfigError, and returns it. */
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    assert.ok(isRelayError(err, ErrorCodes.CONFIG_INVALID));
    return err;
  }
  assert.fail("expected the config to be rejected");
}

async function configErrorAsync(p: Promise<unknown>): Promise<ConfigError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    assert.ok(isRelayError(err, ErrorCodes.CONFIG_INVALID));
    return err;
  }
  assert.fail("expected the config to be rejected");
}

const BASE = `regions:
  us-east:
    servers: ["nats://a1:4222"]
  eu-west:
    servers: ["nats://b1:4222"]
links:
  - name: orders
    from: { region: us-east, stream: ORDERS }
    to: { region: eu-west, stream: ORDERS }
`;

const parse = (text: string, env: Record<string, string> = {}): RelayConfig =>
  parseConfigText(text, "test.yaml", env);

void describe("valid configs", () => {
  void it("compiles the full fixture with every value as written", async () => {
    const c = await loadConfig(fixture("good-full.yaml"), {});
    assert.deepEqual([...c.regions.keys()], ["us-east", "eu-west", "ap-south", "sa-east"]);

    assert.deepEqual(c.regions.get("us-east"), {
      name: "us-east",
      servers: ["nats://a1:4222", "nats://a2:4222", "tls://a3:4222"],
      auth: { kind: "token", token: "us-token-default" },
      tls: {
        caFile: "/etc/relay/us-ca.pem",
        certFile: "/etc/relay/us-cert.pem",
        keyFile: "/etc/relay/us-key.pem",
      },
      domain: "us",
    });
    assert.deepEqual(c.regions.get("eu-west")?.auth, {
      kind: "user",
      user: "relay",
      password: "eu-password-default",
    });
    assert.deepEqual(c.regions.get("ap-south")?.auth, { kind: "creds", credsFile: "/etc/relay/ap.creds" });
    assert.deepEqual(c.regions.get("sa-east")?.auth, { kind: "nkey", seedFile: "/etc/relay/sa.nk" });

    const l0 = c.links[0];
    assert.ok(l0);
    assert.deepEqual(l0, {
      name: "orders-us-to-eu",
      from: { region: "us-east", stream: "ORDERS", filterSubject: "orders.>" },
      to: {
        region: "eu-west",
        stream: "ORDERS",
        transform: { stripPrefix: "orders.", addPrefix: "us.orders." },
      },
      batchSize: 250,
      inFlight: 2048,
      inFlightBytes: 8 * 1024 * 1024,
      ackWaitMs: 60_000,
      sourceAcks: "cumulative",
      publishTimeoutMs: 2_500,
      stripHeaders: [...DEFAULT_STRIP_HEADERS, "X-Internal"],
      maxHops: 3,
      durableName: "relay-orders-custom",
      guard: {
        store: { kind: "redis", url: "redis://:redis-password-default@redis:6379/0", waitReplicas: 1, waitTimeoutMs: 500 },
        idTtlMs: 7_200_000,
        claimTtlMs: 90_000,
        versions: {
          entity: { kind: "header", name: "Entity-Id" },
          version: { kind: "subject-token", index: 2 },
        },
        strict: true,
      },
      badMessage: { action: "dead-letter", subject: "relay.dlq.orders" },
      onGap: "resync",
      maxReplayAgeMs: 21_600_000,
      stallAfterMs: 30_000,
      startAt: "earliest",
      audit: { enabled: true, afterMs: 120_000, sweepEveryMs: 43_200_000, repair: "auto", maxReadRate: 5_000 },
    });

    const payments = c.links[2];
    assert.equal(payments?.badMessage.action, "halt");
    assert.equal(payments?.onGap, "halt");
    assert.deepEqual(payments?.guard, {
      store: { kind: "memory" },
      idTtlMs: 3_600_000,
      claimTtlMs: 60_000,
      strict: false,
    });

    assert.deepEqual(c.links[3]?.guard?.store, {
      kind: "redis",
      sentinel: { name: "relay-master", nodes: ["s1:26379", "s2:26379"], username: "sentinel-user", password: "sentinel-password-default" },
      username: "relay",
      password: "redis-password-default",
      tls: { caFile: "/etc/relay/redis-ca.pem" },
      waitReplicas: 0,
      waitTimeoutMs: 1_000,
    });
    assert.deepEqual(c.links[4]?.guard?.store, {
      kind: "redis",
      cluster: { nodes: ["r1:6379", "r2:6379", "r3:6379"] },
      waitReplicas: 0,
      waitTimeoutMs: 1_000,
    });

    assert.deepEqual(c.http, { host: "127.0.0.1", port: 9999, protectMetrics: false });
    assert.deepEqual(c.log, { level: "debug", progressIntervalMs: 5_000 });
    assert.equal(c.shutdownGraceMs, 10_000);
    assert.deepEqual(c.group, { bucket: "eu_relays", leaseMs: 8_000, renewMs: 2_000 });
  });

  void it("fills every default", async () => {
    const c = await loadConfig(fixture("good-minimal.yaml"), {});
    assert.deepEqual(c.regions.get("us-east"), { name: "us-east", servers: ["nats://localhost:4222"] });
    assert.deepEqual(c.links, [
      {
        name: "orders",
        from: { region: "us-east", stream: "ORDERS" },
        to: { region: "eu-west", stream: "ORDERS", transform: {} },
        batchSize: 500,
        inFlight: 16384,
        inFlightBytes: 32 * 1024 * 1024,
        ackWaitMs: 30_000,
        sourceAcks: "cumulative",
        publishTimeoutMs: 5_000,
        stripHeaders: [
          "Nats-Expected-Stream",
          "Nats-Expected-Last-Msg-Id",
          "Nats-Expected-Last-Sequence",
          "Nats-Expected-Last-Subject-Sequence",
          "Nats-Rollup",
          "Nats-Stream-Source",
        ],
        maxHops: 8,
        durableName: "relay-orders",
        badMessage: { action: "dead-letter", subject: "relay.dlq.orders" },
        onGap: "continue",
        stallAfterMs: 10_000,
        startAt: "earliest",
        audit: { enabled: true, afterMs: 60_000, sweepEveryMs: 21_600_000, repair: "report", maxReadRate: 3_000 },
      },
    ]);
    assert.deepEqual(c.http, { host: "127.0.0.1", port: 9464, protectMetrics: false });
    assert.deepEqual(c.log, { level: "info", progressIntervalMs: 10_000 });
    assert.equal(c.shutdownGraceMs, 30_000);
    assert.deepEqual(c.group, { bucket: "relay_leases", leaseMs: 5_000, renewMs: 1_000 });
  });

  void it("defaults the claim TTL to twice the ack wait, and the id TTL to 1h", () => {
    const c = parse(BASE + "    ackWait: 45s\n    guard:\n      memory: true\n");
    assert.equal(c.links[0]?.guard?.claimTtlMs, 90_000);
    assert.equal(c.links[0]?.guard?.idTtlMs, DEFAULTS.idTtlMs);
  });

  void it("caps an unguarded link's self-sizing window at 16384 and a guarded one's at 2048; an explicit inFlight wins", () => {
    assert.equal(parse(BASE).links[0]?.inFlight, 16384);
    assert.equal(parse(BASE + "    guard:\n      memory: true\n").links[0]?.inFlight, 2048);
    assert.equal(parse(BASE + "    inFlight: 600\n    guard:\n      memory: true\n").links[0]?.inFlight, 600);
    // batchSize is checked against the window the link will have.
    assert.equal(parse(BASE + "    batchSize: 1500\n    guard:\n      memory: true\n").links[0]?.batchSize, 1500);
  });

  void it("is deeply frozen, and its region map is read-only", () => {
    const c = parse(BASE);
    assert.ok(Object.isFrozen(c));
    assert.ok(Object.isFrozen(c.links));
    assert.ok(Object.isFrozen(c.links[0]?.from));
    assert.ok(Object.isFrozen(c.links[0]?.stripHeaders));
    assert.ok(Object.isFrozen(c.regions.get("us-east")?.servers));
    const regions = c.regions as Map<string, unknown>;
    assert.throws(() => regions.set("x", {}), TypeError);
    assert.throws(() => regions.delete("us-east"), TypeError);
    assert.throws(() => regions.clear(), TypeError);
    assert.equal(c.regions.size, 2);
  });

  void it("does not repeat a default header listed again in stripHeaders", () => {
    const c = parse(BASE + "    stripHeaders: [Nats-Rollup, X-A, X-A, Nats-TTL]\n");
    // Nats-TTL is no default (the header policy keeps it for a destination that allows TTLs); listed, it is stripped always.
    assert.deepEqual(c.links[0]?.stripHeaders, [...DEFAULT_STRIP_HEADERS, "X-A", "Nats-TTL"]);
  });

  void it("accepts numbers and booleans given as strings (as they are after ${VAR} substitution)", () => {
    const c = parse(
      BASE + "    batchSize: ${BATCH}\n    inFlight: ${IN_FLIGHT:-2000}\n    guard:\n      memory: ${MEM}\n",
      { BATCH: "100", MEM: "true" },
    );
    assert.equal(c.links[0]?.batchSize, 100);
    assert.equal(c.links[0]?.inFlight, 2000);
    assert.deepEqual(c.links[0]?.guard?.store, { kind: "memory" });
  });

  void it("takes the log level in any case, and IPv6 listen addresses", () => {
    const c = parse(BASE + 'log: { level: WARN }\nhttp: { listen: "[::1]:0" }\n');
    assert.equal(c.log.level, "warn");
    assert.deepEqual(c.http, { host: "::1", port: 0, protectMetrics: false });
  });

  void it("supports YAML anchors and merge keys", () => {
    const c = parse(
      BASE.replace(
        "    to: { region: eu-west, stream: ORDERS }\n",
        "    to: { region: eu-west, stream: ORDERS }\n    guard: &g { memory: true, idTtl: 2h }\n",
      ) +
        "  - name: b\n    from: { region: eu-west, stream: B }\n    to: { region: us-east, stream: B }\n    guard:\n      <<: *g\n      idTtl: 3h\n",
    );
    assert.equal(c.links[0]?.guard?.idTtlMs, 7_200_000);
    assert.equal(c.links[1]?.guard?.idTtlMs, 10_800_000);
    assert.deepEqual(c.links[1]?.guard?.store, { kind: "memory" });
  });

  void it("substitutes a value verbatim: it cannot inject YAML", () => {
    const c = parse(
      BASE.replace(
        'servers: ["nats://a1:4222"]',
        'servers: ["nats://a1:4222"]\n    auth:\n      token: ${T}',
      ),
      {
        T: "abc\nlinks: []\nx: {y: 1}",
      },
    );
    assert.deepEqual(c.regions.get("us-east")?.auth, { kind: "token", token: "abc\nlinks: []\nx: {y: 1}" });
    assert.equal(c.links.length, 1);
  });

  void it("compileConfig can be used on validateConfig's output directly", () => {
    const r = validateConfig({
      regions: { a: { servers: ["a:4222"] }, b: { servers: ["b:4222"] } },
      links: [{ name: "l", from: { region: "a", stream: "S" }, to: { region: "b", stream: "S" } }],
    });
    assert.ok(r.ok);
    assert.equal(compileConfig(r.config).links[0]?.durableName, "relay-l");
  });
});

void describe("bad config fixtures", () => {
  const expected = JSON.parse(readFileSync(fixture("expected-errors.json"), "utf8")) as Record<
    string,
    string
  >;
  const files = readdirSync(FIXTURES).filter((f) => f.startsWith("bad-") && f.endsWith(".yaml"));

  void it("every bad-*.yaml fixture has an expected error, and every expected error a fixture", () => {
    assert.deepEqual(Object.keys(expected).sort(), [...files].sort());
    assert.ok(files.length >= 10);
  });

  // The CLI tests load the same fixtures with RELAY_FIXTURE_PASSWORD set; fixtures that carry a
  // secret read it with a default, so the expected line is the same either way.
  const SECRET_ENV = { RELAY_FIXTURE_PASSWORD: "s3cret-fixture-pw" };
  for (const file of files.sort()) {
    void it(`${file} is rejected with exactly its one problem`, async () => {
      const path = fixture(file);
      const line = expected[file];
      assert.ok(line !== undefined);
      for (const env of [{}, SECRET_ENV]) {
        const err = await configErrorAsync(loadConfig(path, env));
        assert.ok(err.message.startsWith(`config ${path} is invalid:\n  `), err.message);
        assert.deepEqual(err.problems, [line], err.message);
        assert.equal(err.message, `config ${path} is invalid:\n  ${line}`);
        assert.ok(
          !err.message.includes("s3cret-fixture-pw") && !err.message.includes("fixture-"),
          err.message,
        );
      }
    });
  }

  void it("bad-yaml-syntax.yaml reports a line and a column", async () => {
    const err = await configErrorAsync(loadConfig(fixture("bad-yaml-syntax.yaml"), {}));
    assert.match(err.problems[0] ?? "", /^line \d+, column \d+: /);
  });
});

void describe("error reporting", () => {
  void it("collects every problem, one line each, top of the file first", () => {
    const err = configError(() =>
      parse(`regions:
  us-east:
    servers: ["nats://a1:4222", "ftp://x"]
    auth: { token: x, user: y }
    colour: blue
  eu-west:
    servers: "nats://b1:4222"
links:
  - name: Orders
    from: { region: us-east, stream: ORDERS, filter: "a..b" }
    to: { region: eu-wst, stream: ORDERS }
    ackWait: 5
    guard: {}
  - from: { region: us-east }
    to: { region: us-east, stream: X }
log: { level: loud }
`),
    );
    assert.deepEqual(err.problems, [
      'regions.us-east.servers[1]: invalid server "ftp://x": use nats://host:port, tls://host:port or host:port',
      "regions.us-east.auth: give exactly one of token, user + password, creds or nkey (found token and user)",
      "regions.us-east.colour: unknown key (allowed: servers, auth, tls, domain)",
      "regions.eu-west.servers: must be a list (got a string)",
      'links[0].name: invalid link name "Orders": use lowercase letters, digits, "-" and "_", starting with a letter or digit',
      'links[0].from.filter: invalid subject filter "a..b": has an empty token (".." or a leading or trailing ".")',
      'links[0].to.region: unknown region "eu-wst" (known: us-east, eu-west)',
      'links[0].ackWait: must be a duration with a unit, e.g. "5s" (got 5)',
      "links[0].guard: give exactly one store: redis or memory: true (found none)",
      "links[1].name: is required",
      "links[1].from.stream: is required",
      'links[1].to.region: must differ from from.region (both are "us-east")',
      'log.level: must be one of trace, debug, info, warn, error, fatal, silent (got "loud")',
    ]);
    assert.equal(
      err.message,
      `config test.yaml is invalid:\n${err.problems.map((p) => `  ${p}`).join("\n")}`,
    );
  });

  void it("never shows a password, token or URL credential from the environment", () => {
    const password = "pa55-from-env-7f3a";
    const token = "tok-from-env-91c2";
    const text = `regions:
  us-east:
    servers: ["nats://relay:\${PW}@a1:99999"]
    auth:
      user: relay
      password: \${PW}
      token: \${TOKEN}
  eu-west:
    servers: ["nats://b1:4222"]
    auth: { token: "\${TOKEN}", bogus: "\${TOKEN}" }
links:
  - name: orders
    from: { region: us-east, stream: "orders.\${PW}" }
    to: { region: eu-west, stream: ORDERS }
    durable: "\${TOKEN}.x"
    guard:
      redis: { url: "redis//:\${PW}@redis:6379", password: 5 }
`;
    const err = configError(() => parse(text, { PW: password, TOKEN: token }));
    assert.ok(err.problems.length >= 5, err.message);
    for (const secret of [password, token, "pa55", "tok-from"]) {
      assert.ok(!err.message.includes(secret), `secret ${secret} leaked:\n${err.message}`);
      assert.ok(!String(err.stack).includes(secret));
    }
    assert.match(err.message, /\[redacted\]/);
  });

  void it("never echoes YAML source text in a syntax error", () => {
    const err = configError(() =>
      parse('a: 1\nb: [1, 2\nc: "literal-secret-5e1"\nd: { e: "literal-secret-5e1" }\n'),
    );
    assert.ok(!err.message.includes("literal-secret-5e1"), err.message);
    assert.match(err.problems[0] ?? "", /^line 2, column 4: .*noticed at line 3\)$/);
    assert.ok(err.problems.length <= 4);
  });

  void it("reports an unset variable once, at its path, and does not pile other errors on it", () => {
    const err = configError(() => parse(BASE + "    ackWait: ${ACK_WAIT}\n"));
    assert.deepEqual(err.problems, ["links[0].ackWait: environment variable ACK_WAIT is not set"]);
  });

  void it("suggests the key that was probably meant, or lists the allowed ones", () => {
    const err = configError(() => parse(BASE + "    batchsize: 5\n    ackwait: 5s\n    zzz: 1\n"));
    assert.deepEqual(err.problems, [
      'links[0].batchsize: unknown key (did you mean "batchSize"?)',
      'links[0].ackwait: unknown key (did you mean "ackWait"?)',
      "links[0].zzz: unknown key (allowed: name, from, to, batchSize, inFlight, inFlightBytes, ackWait, sourceAcks, publishTimeout, stripHeaders, maxHops, durable, onBadMessage, onGap, maxReplayAge, stallAfter, guard, partitions, startAt, audit, maxRate)",
    ]);
  });

  void it("rejects __proto__ like any other unknown key", () => {
    const err = configError(() => parse(BASE + "__proto__: { polluted: true }\n"));
    assert.deepEqual(err.problems, ["__proto__: unknown key (allowed: regions, links, meshes, http, log, shutdown, group, reload)"]);
    assert.equal((Object.prototype as Record<string, unknown>).polluted, undefined);
  });

  void it("rejects a document that is not a mapping", () => {
    const err = configError(() => parse("- a\n- b\n"));
    assert.deepEqual(err.problems, ["(root): must be a mapping (got a list)"]);
  });

  void it("rejects a user without a password and a password without a user", () => {
    const withAuth = (auth: string): string =>
      BASE.replace('servers: ["nats://a1:4222"]', `servers: ["nats://a1:4222"]\n    auth: ${auth}`);
    assert.deepEqual(configError(() => parse(withAuth("{ user: relay }"))).problems, [
      "regions.us-east.auth: user requires password",
    ]);
    assert.deepEqual(configError(() => parse(withAuth("{ password: x }"))).problems, [
      "regions.us-east.auth: password requires user",
    ]);
    assert.deepEqual(configError(() => parse(withAuth("{}"))).problems, [
      "regions.us-east.auth: give exactly one of token, user + password, creds or nkey (found none)",
    ]);
  });

  void it("rejects a default durable that collides with another link's on the same stream", () => {
    const err = configError(() =>
      parse(
        BASE +
          "  - name: other\n    from: { region: us-east, stream: ORDERS }\n    to: { region: eu-west, stream: O2 }\n    durable: relay-orders\n",
      ),
    );
    assert.deepEqual(err.problems, [
      'links[1].durable: durable "relay-orders" is already used by links[0] on the same source stream (stream ORDERS in us-east)',
    ]);
    // The same durable on another stream is fine.
    parse(
      BASE +
        "  - name: other\n    from: { region: us-east, stream: OTHER }\n    to: { region: eu-west, stream: O2 }\n    durable: relay-orders\n",
    );
  });

  void it("rejects a Redis password given both in the URL and in password", () => {
    const err = configError(() =>
      parse(BASE + '    guard:\n      redis: { url: "redis://:a-secret@r:6379", password: a-secret }\n'),
    );
    assert.deepEqual(err.problems, [
      "links[0].guard.redis: give the password either in url or in password, not both",
    ]);
  });

  void it("reports a missing file with the OS error", async () => {
    const err = await configErrorAsync(loadConfig("/nonexistent/relay.yaml", {}));
    assert.match(err.message, /^config \/nonexistent\/relay\.yaml: cannot read: ENOENT/);
  });
});

void describe("parseFieldSource", () => {
  void it("parses header and subject-token sources", () => {
    assert.deepEqual(parseFieldSource("header:Entity-Id"), { kind: "header", name: "Entity-Id" });
    assert.deepEqual(parseFieldSource("subject-token:0"), { kind: "subject-token", index: 0 });
    assert.deepEqual(parseFieldSource("subject-token:12"), { kind: "subject-token", index: 12 });
  });

  void it("rejects anything else", () => {
    for (const bad of [
      "header:",
      "header:a b",
      "subject-token:",
      "subject-token:-1",
      "subject-token:1.5",
      "token:2",
      "Entity-Id",
    ]) {
      assert.throws(() => parseFieldSource(bad), /invalid field source/, bad);
    }
  });
});

void describe("formatPath", () => {
  void it("writes paths the way the messages do", () => {
    assert.equal(formatPath(["links", 1, "to", "region"]), "links[1].to.region");
    assert.equal(formatPath(["regions", "us-east", "servers", 0]), "regions.us-east.servers[0]");
    assert.equal(formatPath(["regions", "a b"]), 'regions["a b"]');
    assert.equal(formatPath([]), "(root)");
  });
});

void describe("partitioned links", () => {
  const partitioned = (filter: string | undefined, token: number) => `regions:
  us-east:
    servers: ["nats://a1:4222"]
  eu-west:
    servers: ["nats://b1:4222"]
links:
  - name: orders
    from: { region: us-east, stream: ORDERS${filter === undefined ? "" : `, filter: "${filter}"`} }
    to: { region: eu-west, stream: ORDERS }
    partitions: { count: 3, token: ${token} }
`;

  void it("expands into one unit per partition: its own name, durable and filter with the token fixed", async () => {
    const { linkUnits } = await import("../../src/config/partitions.js");
    const link = parse(partitioned("orders.*.>", 2)).links[0];
    assert.ok(link);
    assert.deepEqual(link.partitions, { count: 3, token: 2 });
    const units = linkUnits(link);
    assert.deepEqual(
      units.map((u) => [u.name, u.durableName, u.from.filterSubject, u.partition?.index]),
      [
        ["orders/p0", "relay-orders-p0", "orders.0.>", 0],
        ["orders/p1", "relay-orders-p1", "orders.1.>", 1],
        ["orders/p2", "relay-orders-p2", "orders.2.>", 2],
      ],
    );
    assert.deepEqual(linkUnits(parse(BASE).links[0]!).map((u) => u.name), ["orders"], "an unpartitioned link is its own unit");
  });

  void it("needs a filter with * at the partition token, and says where", () => {
    assert.deepEqual(configError(() => parse(partitioned(undefined, 2))).problems, [
      "links[0].partitions: needs from.filter with a * at the partition token (e.g. filter: orders.*.> with token: 2)",
    ]);
    assert.deepEqual(configError(() => parse(partitioned("orders.*.>", 1))).problems, [
      'links[0].partitions.token: from.filter "orders.*.>" must have * as token 1 (the partition number)',
    ]);
  });
});

void describe("http", () => {
  void it("a token protects /status; it is a secret: redacted and scrubbed", async () => {
    const { redactConfig, secretsOf } = await import("../../src/config/redact.js");
    const c = parse(BASE + 'http: { listen: "0.0.0.0:9464", token: "${TOKEN}", protectMetrics: true }\n', { TOKEN: "a-very-long-http-token-1234" });
    assert.deepEqual(c.http, { host: "0.0.0.0", port: 9464, token: "a-very-long-http-token-1234", protectMetrics: true });
    assert.ok(secretsOf(c).includes("a-very-long-http-token-1234"));
    assert.ok(!JSON.stringify(redactConfig(c)).includes("a-very-long-http-token-1234"));
    assert.deepEqual(configError(() => parse(BASE + 'http: { token: "short" }\n')).problems, [
      "http.token: must be at least 16 characters (use a random secret, e.g. from ${RELAY_HTTP_TOKEN})",
    ]);
  });
});
