import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { parsePubAck, readPlainPubAck } from "../../src/nats/publisher.js";
import type { PubAck } from "../../src/nats/publisher.js";

// PubAcks exactly as a real nats-server 2.9.10 wrote them (raw `nc.request` replies, stream ORD-ers_1;
// the domain-* ones from a server whose JetStream has `domain: hub`). The integration test
// test/integration/puback-fast-path.test.ts checks the same forms against a live server.
const dir = new URL("../fixtures/puback/", import.meta.url);
const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(new URL(name, dir)));
const enc = new TextEncoder();
const bytes = (text: string): Uint8Array => enc.encode(text);

/** What the slow path makes of a reply that JSON.parse reads as a stored message, else undefined. */
function viaJsonParse(data: Uint8Array): PubAck | undefined {
  let body: { stream?: unknown; seq?: unknown; duplicate?: unknown; error?: unknown };
  try {
    body = JSON.parse(new TextDecoder().decode(data)) as typeof body;
  } catch {
    return undefined;
  }
  if (body.error || typeof body.stream !== "string" || typeof body.seq !== "number") return undefined;
  return { stream: body.stream, seq: body.seq, duplicate: body.duplicate === true };
}

/** Where the fast path answers, it answers what JSON.parse would. */
function assertEquivalent(data: Uint8Array, known?: string): void {
  const fast = readPlainPubAck(data, known);
  if (fast) assert.deepEqual(fast, viaJsonParse(data), Buffer.from(data).toString("latin1"));
}

test("the captured nats-server 2.9.10 PubAcks: stored and duplicate take the fast path", () => {
  assert.equal(Buffer.from(fixture("nats-2.9.10-stored.txt")).toString(), '{"stream":"ORD-ers_1", "seq":1}');
  assert.equal(Buffer.from(fixture("nats-2.9.10-duplicate.txt")).toString(), '{"stream":"ORD-ers_1", "seq":1,"duplicate": true}');
  assert.deepEqual(readPlainPubAck(fixture("nats-2.9.10-stored.txt")), { stream: "ORD-ers_1", seq: 1, duplicate: false });
  assert.deepEqual(readPlainPubAck(fixture("nats-2.9.10-duplicate.txt")), { stream: "ORD-ers_1", seq: 1, duplicate: true });
  assert.deepEqual(readPlainPubAck(fixture("nats-2.9.10-stored.txt"), "ORD-ers_1"), { stream: "ORD-ers_1", seq: 1, duplicate: false });
});

test("the captured domain and error PubAcks fall back to JSON.parse and parse as before", () => {
  for (const name of ["nats-2.9.10-domain-stored.txt", "nats-2.9.10-domain-duplicate.txt", "nats-2.9.10-error-10060.txt", "nats-2.9.10-domain-error-10060.txt"]) {
    assert.equal(readPlainPubAck(fixture(name)), undefined, name);
  }
  const reply = (name: string) => ({ data: fixture(name), headers: undefined });
  assert.deepEqual(parsePubAck(reply("nats-2.9.10-domain-stored.txt"), "s"), [null, { stream: "ORD-ers_1", seq: 1, duplicate: false }]);
  assert.deepEqual(parsePubAck(reply("nats-2.9.10-domain-duplicate.txt"), "s"), [null, { stream: "ORD-ers_1", seq: 1, duplicate: true }]);
  assert.equal(parsePubAck(reply("nats-2.9.10-error-10060.txt"), "s")[0]?.code, "DESTINATION_MISMATCH");
});

test("every fixture: the fast path's answer is JSON.parse's answer", () => {
  const names = readdirSync(dir).filter((n) => n.endsWith(".txt"));
  assert.ok(names.length >= 6, names.join(", "));
  for (const name of names) {
    assertEquivalent(fixture(name));
    assertEquivalent(fixture(name), "ORD-ers_1");
    const [err, ack] = parsePubAck({ data: fixture(name), headers: undefined }, "s");
    const slow = viaJsonParse(fixture(name));
    assert.deepEqual(ack, slow ?? null, name);
    assert.equal(err === null, slow !== undefined, name);
  }
});

test("accepted forms: with and without the spaces, duplicates, large sequences, names with - and _", () => {
  const cases: [string, PubAck][] = [
    ['{"stream":"DST", "seq":5}', { stream: "DST", seq: 5, duplicate: false }],
    ['{"stream":"DST","seq":5}', { stream: "DST", seq: 5, duplicate: false }],
    ['{"stream":"DST", "seq":5,"duplicate": true}', { stream: "DST", seq: 5, duplicate: true }],
    ['{"stream":"DST","seq":5,"duplicate":true}', { stream: "DST", seq: 5, duplicate: true }],
    ['{"stream":"DST", "seq":5,"duplicate":true}', { stream: "DST", seq: 5, duplicate: true }],
    ['{"stream":"DST","seq":5,"duplicate": true}', { stream: "DST", seq: 5, duplicate: true }],
    ['{"stream":"us-east_1-ORDERS_v2", "seq":42}', { stream: "us-east_1-ORDERS_v2", seq: 42, duplicate: false }],
    ['{"stream":"D", "seq":1234567890123}', { stream: "D", seq: 1234567890123, duplicate: false }],
    ['{"stream":"D", "seq":123456789012345}', { stream: "D", seq: 123456789012345, duplicate: false }],
    ['{"stream":"D", "seq":9007199254740991}', { stream: "D", seq: Number.MAX_SAFE_INTEGER, duplicate: false }],
    ['{"stream":"D", "seq":9007199254740991,"duplicate": true}', { stream: "D", seq: Number.MAX_SAFE_INTEGER, duplicate: true }],
    ['{"stream":"D", "seq":1000000000000000}', { stream: "D", seq: 1e15, duplicate: false }],
    ['{"stream":"Übersee", "seq":3}', { stream: "Übersee", seq: 3, duplicate: false }],
  ];
  for (const [text, expected] of cases) {
    assert.deepEqual(readPlainPubAck(bytes(text)), expected, text);
    assert.deepEqual(readPlainPubAck(bytes(text), expected.stream), expected, text);
    assert.deepEqual(readPlainPubAck(bytes(text), "OTHER"), expected, text);
    assert.deepEqual(readPlainPubAck(bytes(text)), viaJsonParse(bytes(text)), `${text}: same as JSON.parse`);
    assert.deepEqual(parsePubAck({ data: bytes(text), headers: undefined }, "s"), [null, expected], text);
  }
  const known = "us-east_1-ORDERS_v2";
  assert.equal(readPlainPubAck(bytes('{"stream":"us-east_1-ORDERS_v2", "seq":42}'), known)?.stream, known, "the known name is reused");
});

test("everything else returns undefined (and JSON.parse decides)", () => {
  for (const other of [
    '{"error":{"code":503,"err_code":10008,"description":"no leader"}}',
    '{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"D","seq":0}',
    '{"stream":"DST", "domain":"hub", "seq":5}',
    '{"stream":"DST","domain":"hub","seq":5}',
    '{"stream":"DST", "seq":5,"val":"1"}',
    '{"stream":"DST", "seq":5, "duplicate": true}',
    '{"stream":"DST",  "seq":5}',
    '{"stream":"DST",\t"seq":5}',
    '{"stream":"DST", "seq": 5}',
    '{"stream":"DST", "seq":5 }',
    '{"stream":"DST", "seq":5} ',
    '{"stream":"DST", "seq":5,"duplicate":  true}',
    '{"stream":"DST", "seq":5,"duplicate": false}',
    '{"stream":"DST", "seq":5,"duplicate": true} ',
    '{"stream":"DST", "seq":0}',
    '{"stream":"DST", "seq":0,"duplicate": true}',
    '{"stream":"DST", "seq":05}',
    '{"stream":"DST", "seq":-5}',
    '{"stream":"DST", "seq":5.0}',
    '{"stream":"DST", "seq":5e3}',
    '{"stream":"DST", "seq":}',
    '{"stream":"DST", "seq":9007199254740992}',
    '{"stream":"DST", "seq":12345678901234567}',
    '{"stream":"", "seq":5}',
    '{"stream":"D\\"ST", "seq":5}',
    '{"stream":"D\\u0041", "seq":5}',
    '{"stream":"D\tST", "seq":5}',
    '{"stream":"DST" "seq":5}',
    '{"stream":"DST", "seq":5',
    '{"stream":"DST", "seq":5,"duplicate": true',
    '{"stream":"DST"',
    '{"stream":"DST',
    '{ "stream":"DST", "seq":5}',
    "",
    "not json",
  ]) {
    assert.equal(readPlainPubAck(bytes(other)), undefined, other);
    assert.equal(readPlainPubAck(bytes(other), "DST"), undefined, other);
  }
});

test("equivalence with JSON.parse over mutations of the real forms", () => {
  const bases = [fixture("nats-2.9.10-stored.txt"), fixture("nats-2.9.10-duplicate.txt"), bytes('{"stream":"D","seq":9007199254740991,"duplicate":true}')];
  const alphabet = [...bytes(' ",:{}0159-_\\tx'), 0x00, 0x09, 0x80, 0xc3, 0xef, 0xff];
  let answered = 0;
  for (const base of bases) {
    for (let at = 0; at < base.length; at++) {
      for (const b of alphabet) {
        const replaced = Uint8Array.from(base);
        replaced[at] = b;
        const inserted = Uint8Array.from([...base.subarray(0, at), b, ...base.subarray(at)]);
        const removed = Uint8Array.from([...base.subarray(0, at), ...base.subarray(at + 1)]);
        for (const data of [replaced, inserted, removed]) {
          assertEquivalent(data);
          assertEquivalent(data, "ORD-ers_1");
          if (readPlainPubAck(data)) answered++;
        }
      }
    }
  }
  assert.ok(answered > 100, `the fast path answered ${answered} mutations`);
});
