import { test } from "node:test";
import assert from "node:assert/strict";
import { headers } from "@nats-io/nats-core";
import { HeaderBlock } from "../../src/nats/header-block.js";
import { parsePubAck, readPlainPubAck } from "../../src/nats/publisher.js";
import { GapDetector } from "../../src/link/gap.js";
import { formatNanos, parseNanos } from "../../src/protocol/headers.js";
import { directRoutesFor } from "../../src/config/routes.js";
import { identify, route, transformSubject } from "../../src/link/identity.js";
import { parseConfigText } from "../../src/config/load.js";
import { Backoff } from "../../src/lifecycle/backoff.js";

const enc = new TextEncoder();
const config = parseConfigText(
  `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
  c: { servers: ["nats://127.0.0.1:3"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S, subject: { stripPrefix: "in.", addPrefix: "a." } }, maxHops: 2 }
  - { name: c-to-b, from: { region: c, stream: S }, to: { region: b, stream: S } }
  - { name: a-to-c, from: { region: a, stream: S }, to: { region: c, stream: S } }
  - name: v
    from: { region: c, stream: V }
    to: { region: a, stream: V }
    guard: { memory: true, versions: { entity: "subject-token:1", version: "header:Ver" } }
`,
  "unit",
);
const [aToB, cToB, , versioned] = config.links as [(typeof config.links)[number], (typeof config.links)[number], unknown, (typeof config.links)[number]];

function hdrs(h: Record<string, string>) {
  const m = headers();
  for (const [k, v] of Object.entries(h)) m.set(k, v);
  return m;
}

test("identity: Nats-Msg-Id, else a deterministic <origin>:<stream>:<seq>", () => {
  const withId = identify({ subject: "in.x", headers: hdrs({ "Nats-Msg-Id": "order-7" }), streamSequence: 9 }, aToB);
  assert.deepEqual(withId, { ok: true, identity: { id: "order-7", origin: "a", path: ["a"] } });
  const without = identify({ subject: "in.x", headers: undefined, streamSequence: 9 }, aToB);
  assert.equal(without.ok && without.identity.id, "a:S:9");
  assert.deepEqual(identify({ subject: "in.x", headers: undefined, streamSequence: 9 }, aToB), without, "same on every call");
});

test("versions: header or subject token; missing or malformed is a bad message, never a guess", () => {
  const ok = identify({ subject: "users.u17.presence", headers: hdrs({ Ver: "82" }), streamSequence: 1 }, versioned);
  assert.deepEqual(ok.ok && [ok.identity.entity, ok.identity.version], ["u17", 82]);
  for (const bad of ["-1", "1.5", "1e3", "08", "7a", "abc", "99999999999999999"]) {
    const r = identify({ subject: "users.u17", headers: hdrs({ Ver: bad }), streamSequence: 1 }, versioned);
    assert.equal(r.ok, false, `version ${JSON.stringify(bad)} is refused`);
  }
  const missing = identify({ subject: "users.u17", headers: undefined, streamSequence: 1 }, versioned);
  assert.deepEqual(missing.ok ? undefined : missing.reason, "missing version (header Ver)");
  const noEntity = identify({ subject: "users", headers: hdrs({ Ver: "1" }), streamSequence: 1 }, versioned);
  assert.match(noEntity.ok ? "" : noEntity.reason, /missing entity \(subject token 1\)/);
});

test("routing: loops, max hops, and redundant mesh paths are not forwarded", () => {
  const direct = directRoutesFor(cToB, config.links);
  assert.deepEqual([...direct].sort(), ["a", "c"]);
  const base = { id: "x", entity: undefined, version: undefined };
  assert.deepEqual(route({ ...base, origin: "a", path: ["a"] }, aToB, direct), { forward: true });
  assert.equal(route({ ...base, origin: "b", path: ["b", "a"] }, aToB, direct).forward, false, "originated in the destination");
  assert.equal(route({ ...base, origin: "c", path: ["c", "b", "a"] }, aToB, direct).forward, false, "passed through the destination");
  assert.equal(route({ ...base, origin: "c", path: ["c", "a"] }, aToB, direct).forward, false, "c has a direct link to b");
  assert.equal(route({ ...base, origin: "d", path: ["d", "e", "a"] }, aToB, new Set(["a"])).forward, false, "more than maxHops");
  assert.equal(route({ ...base, origin: "d", path: ["d", "a"] }, aToB, new Set(["a"])).forward, true);
});

test("subject transform strips then adds a prefix", () => {
  assert.equal(transformSubject("in.orders.1", aToB), "a.orders.1");
  assert.equal(transformSubject("other.1", aToB), "a.other.1");
  assert.equal(transformSubject("x.y", cToB), "x.y");
});

test("PubAck parsing: stored, duplicate, not stored, errors by class, no responders", () => {
  const msg = (body: string) => ({ data: enc.encode(body), headers: undefined });
  assert.deepEqual(parsePubAck(msg('{"stream":"S","seq":4}'), "s"), [null, { stream: "S", seq: 4, duplicate: false }]);
  assert.deepEqual(parsePubAck(msg('{"stream":"S","seq":4,"duplicate":true}'), "s")[1]?.duplicate, true);
  assert.equal(parsePubAck(msg('{"stream":"S","seq":0,"duplicate":true}'), "s")[0]?.code, "PUBLISH_NOT_STORED");
  assert.equal(parsePubAck(msg('{"error":{"code":503,"err_code":10008,"description":"no leader"}}'), "s")[0]?.code, "PUBLISH_FAILED");
  assert.equal(parsePubAck(msg('{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}'), "s")[0]?.code, "MESSAGE_TOO_LARGE");
  assert.equal(parsePubAck(msg('{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'), "s")[0]?.code, "DESTINATION_FULL");
  assert.equal(parsePubAck(msg('{"error":{"code":400,"err_code":10999,"description":"some other refusal"}}'), "s")[0]?.code, "PUBLISH_REJECTED");
  assert.equal(parsePubAck({ data: new Uint8Array(), headers: { code: 503 } } as never, "s")[0]?.code, "PUBLISH_FAILED");
  assert.equal(parsePubAck(msg("not json"), "s")[0]?.code, "PUBLISH_FAILED");
});

test("PubAck fast path: the plain forms are read without JSON.parse, every other form falls back to it", () => {
  const bytes = (body: string) => enc.encode(body);
  assert.deepEqual(readPlainPubAck(bytes('{"stream":"DST","seq":123456}')), { stream: "DST", seq: 123456, duplicate: false });
  assert.deepEqual(readPlainPubAck(bytes('{"stream":"DST","seq":7,"duplicate":true}')), { stream: "DST", seq: 7, duplicate: true });
  const known = "ORDERS";
  assert.equal(readPlainPubAck(bytes('{"stream":"ORDERS","seq":1}'), known)?.stream, known, "the known name is reused");
  assert.equal(readPlainPubAck(bytes('{"stream":"ORDERZ","seq":1}'), known)?.stream, "ORDERZ");
  assert.equal(readPlainPubAck(bytes('{"stream":"Übersee","seq":1}'), "x")?.stream, "Übersee");
  for (const other of [
    '{"stream":"DST","domain":"hub","seq":5}',
    '{"stream":"D\\"ST","seq":5}',
    '{"stream":"DST","seq":0,"duplicate":true}',
    '{"stream":"DST","seq":5,"val":"1"}',
    '{"stream":"DST","seq":5} ',
    '{"stream":"DST","seq":}',
    '{"stream":"","seq":5}',
    '{"error":{"code":503,"err_code":10008,"description":"no leader"}}',
    '{"stream":"DST","seq":12345678901234567}',
  ]) {
    assert.equal(readPlainPubAck(bytes(other)), undefined, other);
  }
  // What falls back still parses as before.
  const msg = (body: string) => ({ data: enc.encode(body), headers: undefined });
  assert.deepEqual(parsePubAck(msg('{"stream":"DST","domain":"hub","seq":5}'), "s"), [null, { stream: "DST", seq: 5, duplicate: false }]);
  assert.deepEqual(parsePubAck(msg('{"stream":"DST","seq":5,"val":"1"}'), "s"), [null, { stream: "DST", seq: 5, duplicate: false }]);
});

test("HeaderBlock encodes the NATS wire form, edits on the dead-letter path, refuses CR/LF", () => {
  const h = new HeaderBlock().append("Nats-Msg-Id", "m-1").append("X-A", "1").append("X-A", "2");
  assert.equal(new TextDecoder().decode(h.encode()), "NATS/1.0\r\nNats-Msg-Id: m-1\r\nX-A: 1\r\nX-A: 2\r\n\r\n");
  h.set("x-a", "3");
  assert.equal(h.get("X-A"), "3");
  h.delete("Nats-Msg-Id");
  assert.equal(new TextDecoder().decode(h.encode()), "NATS/1.0\r\nx-a: 3\r\n\r\n");
  assert.throws(() => h.append("X-Bad", "a\r\nInjected: 1"), /CR or LF/);
});

test("HeaderBlock keeps only its bytes once encoded; reads and edits after that see the same headers, non-ASCII values included", () => {
  const h = new HeaderBlock("Nats-Msg-Id: m-ü\r\n").append("X-City", "Zürich");
  const first = h.encode();
  assert.equal(new TextDecoder().decode(first), "NATS/1.0\r\nNats-Msg-Id: m-ü\r\nX-City: Zürich\r\n\r\n");
  assert.equal(h.encode(), first, "encoded once: the same bytes until an edit");
  assert.equal(h.get("x-city"), "Zürich");
  assert.equal(h.lines, "Nats-Msg-Id: m-ü\r\nX-City: Zürich\r\n");
  h.append("X-More", "1");
  assert.equal(new TextDecoder().decode(h.encode()), "NATS/1.0\r\nNats-Msg-Id: m-ü\r\nX-City: Zürich\r\nX-More: 1\r\n\r\n");
});

test("RFC 3339 nanosecond timestamps round-trip", () => {
  const nanos = 1_796_000_000_123_456_789n;
  const text = formatNanos(nanos);
  assert.match(text, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.123456789Z$/);
  assert.equal(parseNanos(text), nanos);
  assert.equal(parseNanos("yesterday"), undefined);
});

test("gap detector reports each lost range once, exact only without a filter", () => {
  const d = new GapDetector(false);
  assert.equal(d.check({ ackFloor: 100, highestSeen: 0, streamFirstSeq: 101, streamMessages: 5 }), undefined);
  const gap = d.check({ ackFloor: 100, highestSeen: 0, streamFirstSeq: 151, streamMessages: 5 });
  assert.deepEqual(gap && [gap.fromSeq, gap.toSeq, gap.count, gap.exact], [101, 150, 50, true]);
  assert.equal(d.check({ ackFloor: 100, highestSeen: 0, streamFirstSeq: 151, streamMessages: 5 }), undefined, "not twice");
  assert.equal(d.check({ ackFloor: 100, highestSeen: 160, streamFirstSeq: 161, streamMessages: 5 }), undefined, "delivered to us: not lost");
  const filtered = new GapDetector(true).check({ ackFloor: 0, highestSeen: 10, streamFirstSeq: 20, streamMessages: 1 });
  assert.deepEqual(filtered && [filtered.fromSeq, filtered.toSeq, filtered.exact], [11, 19, false]);
});

test("gap detector: a first delivery that jumps past the frontier is a gap; redeliveries, filters and an unknown frontier are not", () => {
  const d = new GapDetector(false);
  assert.equal(d.delivered(5, true), undefined, "no frontier yet (a consumer from the start of the stream): the first delivery sets it");
  assert.equal(d.delivered(6, true), undefined);
  const gap = d.delivered(10, true);
  assert.deepEqual(gap && [gap.fromSeq, gap.toSeq, gap.count, gap.exact], [7, 9, 3, true]);
  assert.equal(d.delivered(8, false), undefined, "a redelivery below the frontier");
  assert.equal(d.delivered(9, true), undefined, "a new consumer leader delivering again from an earlier point");
  assert.equal(d.delivered(11, true), undefined, "the frontier stayed at 10");
  // The periodic check and the deliveries never report the same sequences twice.
  const seen = d.check({ ackFloor: 11, highestSeen: 11, streamFirstSeq: 21, streamMessages: 5 });
  assert.deepEqual(seen && [seen.fromSeq, seen.toSeq], [12, 20]);
  assert.equal(d.delivered(21, true), undefined, "12-20 reported already");
  d.placed(30); // the cursor placed after 30 (ordered recovery, a resync)
  const after = d.delivered(33, true);
  assert.deepEqual(after && [after.fromSeq, after.toSeq], [31, 32]);
  d.skipTo(50);
  assert.equal(d.delivered(51, true), undefined, "a resync moved the cursor after 50");
  const filtered = new GapDetector(true);
  filtered.placed(0);
  assert.equal(filtered.delivered(40, true), undefined, "under a filter, jumps are other subjects' messages");
});

test("backoff grows with full jitter up to its cap and resets", () => {
  const b = new Backoff(100, 1_000, () => 1);
  assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next()], [100, 200, 400, 800, 1_000]);
  b.reset();
  assert.equal(new Backoff(100, 1_000, () => 0).next(), 50);
  assert.equal(b.next(), 100);
});
