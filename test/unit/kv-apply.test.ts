import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { HeaderBlock } from "../../src/nats/header-block.js";
import { prepareKvWrite } from "../../src/link/stages/kv-apply.js";
import type { Entry } from "../../src/link/entry.js";
import type { LinkConfig } from "../../src/config/types.js";
import { withExpectedLastSubjectSeq, withExpectedLastSeq } from "../../src/nats/expected-last-seq.js";

const link = { from: { region: "eu" } } as unknown as LinkConfig;

function write(headers: Record<string, string>, ns = "1700000000123456789") {
  const entry = { headers: new HeaderBlock(), kvVersion: undefined } as unknown as Entry;
  const msg = { headers: { get: (n: string) => headers[n] ?? "" }, timestampNanos: ns } as never;
  return { entry, problem: prepareKvWrite(entry, msg, link) };
}

void describe("prepareKvWrite (a KV link's intake)", () => {
  void it("a first hop gets its store time and region as its version", () => {
    const { entry, problem } = write({});
    assert.equal(problem, undefined);
    assert.deepEqual(entry.kvVersion, { ns: 1700000000123456789n, region: "eu" });
    assert.equal(entry.headers.get("Relay-KV-Version"), "1700000000123456789 eu");
    assert.equal(entry.headers.get("Nats-Rollup"), undefined);
  });

  void it("a writer's KV-Version takes precedence; a carried Relay-KV-Version is kept as it is", () => {
    assert.deepEqual(write({ "KV-Version": "42" }).entry.kvVersion, { ns: 42n, region: "eu" });
    const carried = write({ "Relay-KV-Version": "7 us" });
    assert.deepEqual(carried.entry.kvVersion, { ns: 7n, region: "us" });
    assert.equal(carried.entry.headers.get("Relay-KV-Version"), undefined, "not written again (the copied header carries it)");
  });

  void it("a purge carries its rollup; a delete does not", () => {
    assert.equal(write({ "KV-Operation": "PURGE" }).entry.headers.get("Nats-Rollup"), "sub");
    assert.equal(write({ "KV-Operation": "DEL" }).entry.headers.get("Nats-Rollup"), undefined);
  });

  void it("an unreadable version is a bad message, with the reason", () => {
    assert.match(write({ "KV-Version": "soon" }).problem ?? "", /KV version unreadable: KV-Version "soon" is not a decimal integer/);
    assert.match(write({ "Relay-KV-Version": "1" }).problem ?? "", /Relay-KV-Version "1" is not/);
  });
});

void describe("withExpectedLastSubjectSeq", () => {
  void it("adds its line before the end of the block, as the stream variant does", () => {
    const block = new HeaderBlock().append("A", "b");
    const text = (h: { encode(): Uint8Array }) => Buffer.from(h.encode()).toString("latin1");
    assert.equal(text(withExpectedLastSubjectSeq(block, 0)), "NATS/1.0\r\nA: b\r\nNats-Expected-Last-Subject-Sequence: 0\r\n\r\n");
    assert.equal(text(withExpectedLastSeq(block, 1234)), "NATS/1.0\r\nA: b\r\nNats-Expected-Last-Sequence: 1234\r\n\r\n");
  });
});
