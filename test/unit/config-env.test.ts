import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { expandEnvString, interpolateEnv } from "../../src/config/env.js";

void describe("expandEnvString", () => {
  const env = { A: "alpha", EMPTY: "", B_2: "b" };

  void it("substitutes ${NAME}, several times and mid-string", () => {
    assert.deepEqual(expandEnvString("x-${A}-${B_2}-${A}", env), { value: "x-alpha-b-alpha", errors: [] });
  });

  void it("uses ${NAME:-default} when the variable is unset or empty", () => {
    assert.equal(expandEnvString("${NOPE:-d1}", env).value, "d1");
    assert.equal(expandEnvString("${EMPTY:-d2}", env).value, "d2");
    assert.equal(expandEnvString("${A:-d3}", env).value, "alpha");
    assert.equal(expandEnvString("${NOPE:-}", env).value, "");
    assert.equal(expandEnvString("${NOPE:-a:b-c d}", env).value, "a:b-c d");
  });

  void it("keeps an empty (set) variable without a default", () => {
    assert.deepEqual(expandEnvString("<${EMPTY}>", env), { value: "<>", errors: [] });
  });

  void it("treats $${ as a literal ${ and leaves other $ alone", () => {
    assert.equal(expandEnvString("$${A}", env).value, "${A}");
    assert.equal(expandEnvString("cost $5 $A $", env).value, "cost $5 $A $");
    assert.equal(expandEnvString("$$", env).value, "$$");
  });

  void it("reports an unset variable by name", () => {
    assert.deepEqual(expandEnvString("${MISSING}", env).errors, ["environment variable MISSING is not set"]);
  });

  void it("reports malformed references without echoing them", () => {
    const r1 = expandEnvString("ab${1X}", env);
    assert.match(r1.errors[0] ?? "", /^invalid variable reference at character 3/);
    assert.ok(!r1.errors[0]?.includes("1X"));
    assert.match(expandEnvString("x${A", env).errors[0] ?? "", /^unterminated "\$\{" at character 2/);
    assert.match(expandEnvString("${}", env).errors[0] ?? "", /^invalid variable reference/);
    assert.match(expandEnvString("${A:-${B}}", env).errors[0] ?? "", /nested references/);
  });
});

void describe("interpolateEnv", () => {
  void it("walks the tree, expanding string values only, and reports problems at their paths", () => {
    const tree = {
      regions: {
        "us-east": { servers: ["nats://${HOST}:4222"], auth: { user: "relay", password: "${US_PASSWORD}" } },
      },
      "${KEY}": 1,
      n: 5,
      b: true,
      z: null,
    };
    const r = interpolateEnv(tree, { HOST: "h1" });
    assert.deepEqual(r.value, {
      regions: {
        "us-east": { servers: ["nats://h1:4222"], auth: { user: "relay", password: "${US_PASSWORD}" } },
      },
      "${KEY}": 1,
      n: 5,
      b: true,
      z: null,
    });
    assert.deepEqual(r.problems, [
      {
        path: ["regions", "us-east", "auth", "password"],
        message: "environment variable US_PASSWORD is not set",
      },
    ]);
    assert.deepEqual(r.failedPaths, [["regions", "us-east", "auth", "password"]]);
    // The input is not modified.
    assert.equal(tree.regions["us-east"].servers[0], "nats://${HOST}:4222");
  });
});
