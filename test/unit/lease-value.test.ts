import { test } from "node:test";
import assert from "node:assert/strict";
import { encodeLeaseValue, readLeaseValue } from "../../src/group/lease-value.js";

const opts = { owner: "m1", leaseMs: 5_000, renewMs: 1_000 };
/** A KV entry holding `text`, as far as readLeaseValue reads one. */
const entry = (text: string) => ({ json: <T>() => JSON.parse(text) as T });

test("a lease value stores the lease revision under the JSON key `epoch`, which relays of every version read", () => {
  const stored = JSON.parse(encodeLeaseValue(opts, 7)) as Record<string, unknown>;
  assert.equal(stored["epoch"], 7, "the wire key stays `epoch`");
  assert.equal("leaseRevision" in stored, false, "no new key: relays of other versions would not read it");
  assert.deepEqual(Object.keys(stored).sort(), ["epoch", "leaseMs", "owner", "renewMs", "renewedAt"]);
  assert.deepEqual(readLeaseValue(entry(JSON.stringify(stored))), { owner: "m1", leaseRevision: 7, renewedAt: stored["renewedAt"], leaseMs: 5_000, renewMs: 1_000 });
});

test("the acquiring write has no lease revision; a value of an older relay reads the same", () => {
  const acquiring = JSON.parse(encodeLeaseValue(opts)) as Record<string, unknown>;
  assert.equal("epoch" in acquiring, false);
  assert.equal(readLeaseValue(entry(JSON.stringify(acquiring)))?.leaseRevision, undefined);
  // As a relay before the rename (and before leaseMs) wrote it.
  const older = readLeaseValue(entry('{"owner":"m0","epoch":42,"renewedAt":"2026-01-01T00:00:00.000Z"}'));
  assert.deepEqual(older, { owner: "m0", leaseRevision: 42, renewedAt: "2026-01-01T00:00:00.000Z" });
  assert.equal(readLeaseValue(entry('{"epoch":1}')), undefined, "no owner: not a lease value");
  assert.equal(readLeaseValue(entry("not json")), undefined);
});
