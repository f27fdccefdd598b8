import { test } from "node:test";
import assert from "node:assert/strict";
import { compareKvVersions, formatKvVersion, kvVersionOf, kvVersionProblem, parseKvVersion } from "../../src/protocol/kv-version.js";

const headers = (h: Record<string, string>) => ({ get: (name: string) => h[name] ?? "" });

test("a KV version: carried first, then the writer's, then the store time in the copy's region", () => {
  const carried = kvVersionOf(headers({ "Relay-KV-Version": "1700000000000000001 eu", "KV-Version": "5" }), 9n, "us");
  assert.deepEqual(carried, { ns: 1700000000000000001n, region: "eu" });
  assert.deepEqual(kvVersionOf(headers({ "KV-Version": " 42 " }), 9n, "us"), { ns: 42n, region: "us" });
  assert.deepEqual(kvVersionOf(headers({}), 9n, "us"), { ns: 9n, region: "us" });
  assert.deepEqual(kvVersionOf(undefined, 9n, "us"), { ns: 9n, region: "us" });
});

test("KV versions compare by nanoseconds, then by region name; equal is the same write", () => {
  assert.equal(compareKvVersions({ ns: 1n, region: "z" }, { ns: 2n, region: "a" }), -1);
  assert.equal(compareKvVersions({ ns: 2n, region: "a" }, { ns: 2n, region: "b" }), -1);
  assert.equal(compareKvVersions({ ns: 2n, region: "b" }, { ns: 2n, region: "a" }), 1);
  assert.equal(compareKvVersions({ ns: 2n, region: "a" }, { ns: 2n, region: "a" }), 0);
});

test("a KV version round-trips through its header, and malformed headers say what and which", () => {
  const v = { ns: 1733571234567890123n, region: "eu-west" };
  assert.deepEqual(parseKvVersion(formatKvVersion(v)), v);
  for (const bad of ["", "12", "12 eu extra", "-1 eu", "1.5 eu", "01 eu", "x eu"]) assert.equal(parseKvVersion(bad), undefined, bad);
  assert.match(kvVersionProblem(headers({ "Relay-KV-Version": "nope" })) ?? "", /Relay-KV-Version "nope" is not "<nanoseconds> <region>"/);
  assert.match(kvVersionProblem(headers({ "KV-Version": "1e9" })) ?? "", /KV-Version "1e9" is not a decimal integer/);
  assert.equal(kvVersionProblem(headers({ "Relay-KV-Version": "5 eu", "KV-Version": "junk" })), undefined, "the carried version rules");
  assert.throws(() => kvVersionOf(headers({ "KV-Version": "junk" }), 1n, "us"), /KV-Version "junk"/);
});
