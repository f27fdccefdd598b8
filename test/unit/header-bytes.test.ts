import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import type { LinkConfig } from "../../src/config/types.js";
import { buildHeaders, entryContext, headerLines, newEntry } from "../../src/link/entry.js";
import type { MessageIdentity } from "../../src/link/identity.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";

function link(extra = ""): LinkConfig {
  const config = parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: SRC }, to: { region: b, stream: DST${extra} }, stripHeaders: [X-Secret] }
`,
    "unit",
  );
  const l = config.links[0];
  assert.ok(l);
  return l;
}

function delivery(seq: number, nanos: string, headerText: string | undefined): Delivery {
  return {
    subject: "src.x",
    reply: `$JS.ACK.SRC.d.1.${seq}.${seq}.${nanos}.0`,
    streamSequence: seq,
    consumerSequence: seq,
    deliveryCount: 1,
    pending: 0,
    timestampNanos: nanos,
    headers: headerText === undefined ? undefined : new WireHeaders(headerText),
    data: new Uint8Array(0),
  };
}

const firstHop: MessageIdentity = { id: "order-7", origin: "a", path: ["a"] };
const secondHop: MessageIdentity = { id: "order-8", origin: "c", path: ["c", "a"] };

test("relayed header blocks written as bytes are the bytes of the text form, in every shape; non-ASCII parts take the text form", () => {
  const cases: { name: string; link: LinkConfig; msg: Delivery; identity: MessageIdentity; bytes: boolean }[] = [
    { name: "first hop, nothing copied", link: link(), msg: delivery(1, "1796600332123456789", "NATS/1.0\r\nNats-Msg-Id: order-7\r\n\r\n"), identity: firstHop, bytes: true },
    { name: "second hop", link: link(), msg: delivery(2, "1796600332000000001", undefined), identity: secondHop, bytes: true },
    {
      name: "copied lines, stripped and rewritten ones left out",
      link: link(),
      msg: delivery(9_007_199_254_740_991, "1796600332999999999", "NATS/1.0\r\nX-A: 1\r\nX-Secret: s\r\nRelay-Origin: z\r\nNats-Expected-Stream: Q\r\nX-B:  two words \r\n\r\n"),
      identity: firstHop,
      bytes: true,
    },
    { name: "expectStream", link: link(", expectStream: true"), msg: delivery(10, "1796600333000000000", undefined), identity: firstHop, bytes: true },
    { name: "a non-ASCII id", link: link(), msg: delivery(3, "1796600332123456789", undefined), identity: { ...firstHop, id: "bestellung-ü" }, bytes: false },
    { name: "a non-ASCII copied value", link: link(), msg: delivery(4, "1796600332123456789", "NATS/1.0\r\nX-City: Zürich\r\n\r\n"), identity: firstHop, bytes: false },
    { name: "a non-ASCII origin", link: link(), msg: delivery(5, "1796600332123456789", undefined), identity: { ...secondHop, origin: "ç" }, bytes: false },
    { name: "a time of fewer than ten digits", link: link(), msg: delivery(6, "5", undefined), identity: firstHop, bytes: false },
  ];
  for (const c of cases) {
    const ctx = entryContext(c.link);
    const block = buildHeaders(c.msg, c.identity, ctx);
    const hop = c.identity === firstHop || c.identity.path.length === 1 ? undefined : `Relay-Origin: ${c.identity.origin}\r\nRelay-Path: ${c.identity.path.join(",")}\r\n`;
    const copied = c.msg.headers instanceof WireHeaders ? c.msg.headers.linesExcept(ctx.strip) : "";
    const text = `NATS/1.0\r\n${headerLines(copied, c.identity.id, hop, c.msg, ctx)}\r\n`;
    assert.equal(Buffer.from(block.encode()).toString("utf8"), text, c.name);
    assert.deepEqual(Buffer.from(block.encode()), Buffer.from(text, "utf8"), c.name);
    const written = ctx.bytes.write(copied, c.identity.id, hop, c.msg.streamSequence, c.msg.timestampNanos, ctx.time);
    assert.equal(written !== undefined, c.bytes, `${c.name}: ${c.bytes ? "written as bytes" : "built as text"}`);
    assert.equal(block.get("Relay-Link"), "a-to-b", `${c.name}: readable back`);
  }
  const shown = buildHeaders(delivery(2, "1796600332000000001", undefined), secondHop, entryContext(link()));
  assert.equal(
    Buffer.from(shown.encode()).toString(),
    "NATS/1.0\r\nNats-Msg-Id: order-8\r\nRelay-Origin: c\r\nRelay-Path: c,a\r\nRelay-Source: a SRC 2\r\nRelay-Source-Time: 2026-12-06T23:38:52.000000001Z\r\nRelay-Link: a-to-b\r\n\r\n",
  );
});

test("the source time's second is cached per second and read without slicing: each second gets its own", () => {
  const ctx = entryContext(link());
  const at = (nanos: string) => Buffer.from(buildHeaders(delivery(1, nanos, undefined), firstHop, ctx).encode()).toString();
  assert.match(at("1796600332999999999"), /Relay-Source-Time: 2026-12-06T23:38:52\.999999999Z/);
  assert.match(at("1796600333000000000"), /Relay-Source-Time: 2026-12-06T23:38:53\.000000000Z/);
  assert.match(at("1796600332000000005"), /Relay-Source-Time: 2026-12-06T23:38:52\.000000005Z/);
  assert.match(at("0000000001"), /Relay-Source-Time: 1970-01-01T00:00:00\.000000001Z/);
});

test("an entry's source time in ms is read from the nanoseconds' digits (0 for fewer than seven)", () => {
  const ctx = entryContext(link());
  assert.equal(newEntry(delivery(1, "1796600332123456789", undefined), firstHop, ctx).sourceMs, 1_796_600_332_123);
  assert.equal(newEntry(delivery(1, "1234567", undefined), firstHop, ctx).sourceMs, 1);
  assert.equal(newEntry(delivery(1, "5", undefined), firstHop, ctx).sourceMs, 0);
});
