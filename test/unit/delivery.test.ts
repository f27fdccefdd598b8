import { test } from "node:test";
import assert from "node:assert/strict";
import { parseAckSubject } from "../../src/nats/delivery.js";
import { HeaderBlock } from "../../src/nats/header-block.js";
import { HeaderNames } from "../../src/nats/header-names.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";
import { NanosFormatter, formatNanos } from "../../src/protocol/headers.js";

test("ack subjects: the 9-token form, the domain form and the form with a trailing token", () => {
  const old = parseAckSubject("$JS.ACK.ORDERS.relay-a.2.1234.1230.1764460800123456789.17");
  assert.deepEqual(old, { deliveryCount: 2, streamSequence: 1234, consumerSequence: 1230, timestampNanos: "1764460800123456789", pending: 17 });
  const withDomain = parseAckSubject("$JS.ACK.hub.ACCHASH.ORDERS.relay-a.1.99.98.1764460800000000001.0");
  assert.deepEqual(withDomain, { deliveryCount: 1, streamSequence: 99, consumerSequence: 98, timestampNanos: "1764460800000000001", pending: 0 });
  const withToken = parseAckSubject("$JS.ACK._.ACCHASH.ORDERS.relay-a.1.5.5.1764460800000000001.3.xyz");
  assert.equal(withToken.streamSequence, 5);
  assert.equal(withToken.pending, 3);
  assert.throws(() => parseAckSubject("_INBOX.abc.1"), /not a JetStream delivery/);
  assert.throws(() => parseAckSubject("$JS.ACK.S.C.1.2.3.notanumber.0"), /without a timestamp/);
});

test("nanosecond timestamps from digits equal those from a bigint, across second boundaries", () => {
  const f = new NanosFormatter();
  for (const n of [1764460800123456789n, 1764460800999999999n, 1764460801000000000n, 5n, 0n]) {
    assert.equal(f.formatDigits(n.toString()), formatNanos(n), n.toString());
  }
});

test("wire headers: lines are copied as on the wire, stripped keys compared case-insensitively", () => {
  const text = "NATS/1.0\r\nNats-Msg-Id: m1\r\nX-Keep: a b\r\nnats-rollup: sub\r\nX-Keep: second\r\nno-colon-line\r\n\r\n";
  const h = new WireHeaders(text);
  assert.equal(h.get("Nats-Msg-Id"), "m1");
  assert.equal(h.get("X-Keep"), "a b");
  assert.equal(h.get("Missing"), "");
  const kept = h.linesExcept(new HeaderNames(["Nats-Msg-Id", "nats-rollup"]));
  assert.equal(kept, "X-Keep: a b\r\nX-Keep: second\r\n");
  const out = new HeaderBlock().appendLines(kept).append("Nats-Msg-Id", "m1");
  assert.equal(new TextDecoder().decode(out.encode()), "NATS/1.0\r\nX-Keep: a b\r\nX-Keep: second\r\nNats-Msg-Id: m1\r\n\r\n");
  assert.equal(new WireHeaders("NATS/1.0\r\n\r\n").linesExcept(new HeaderNames([])), "");
});

test("the guard needs Redis 6.2 or later (SET ... GET)", async () => {
  const { supportsGuard } = await import("../../src/guard/redis-connection.js");
  for (const ok of ["6.2.0", "6.2.14", "7.0.15", "7.4.1", "10.0.0"]) assert.ok(supportsGuard(ok), ok);
  for (const old of ["6.0.20", "5.0.14", "6.1.9"]) assert.ok(!supportsGuard(old), old);
});

test("header names match a key where it stands in the text: case-insensitively, spaces ignored, by prefix, non-ASCII keys as toLowerCase does", () => {
  const names = new HeaderNames(["Nats-Msg-Id", "X-Secret", "Äpfel-Key"], "Nats-Expected-");
  const at = (line: string) => names.matches(line, 0, line.indexOf(":"));
  assert.equal(at("nats-msg-id: 1"), true);
  assert.equal(at("NATS-MSG-ID: 1"), true);
  assert.equal(at(" X-Secret : s"), true, "spaces around the key");
  assert.equal(at("X-Secrets: s"), false, "longer");
  assert.equal(at("X-Secreu: s"), false, "same length, another name");
  assert.equal(at("Nats-Expected-Last-Sequence: 4"), true, "by prefix");
  assert.equal(at("nats-expected: 4"), false, "shorter than the prefix");
  assert.equal(at("äPFEL-key: x"), true, "non-ASCII: lower-cased as toLowerCase does");
  const edge = new HeaderNames(["`-b", "{-b"]);
  assert.deepEqual(["@-B", "[-B", "`-B", "{-B"].map((k) => edge.matches(k, 0, 3)), [false, false, true, true], "only A-Z are folded");
  assert.equal(names.has("x-SECRET"), true);
  assert.equal(names.has("nats-expected-stream"), true);
  assert.equal(names.has("Other"), false);
  const line = "NATS/1.0\r\nX-A: 1\r\nx-secret: s\r\nÄpfel-key: x\r\nNats-Expected-Stream: S\r\nX-B: 2\r\n\r\n";
  assert.equal(new WireHeaders(line).linesExcept(names), "X-A: 1\r\nX-B: 2\r\n");
});
