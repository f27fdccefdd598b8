/**
 * `to.order: strict` pieces that need no server: the config (refused at load for two links into one
 * stream, or partitions), the sole-writer judgement of a destination stream, the header on the wire,
 * and the PubAck refusal (err_code 10071, as nats-server 2.9.10 writes it).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, parseConfigText } from "../../src/config/load.js";
import type { LinkConfig } from "../../src/config/types.js";
import { ErrorCodes } from "../../src/errors.js";
import { otherWriters } from "../../src/link/sole-writer.js";
import { HeaderBlock } from "../../src/nats/header-block.js";
import { EXPECTED_LAST_SEQ_MAX_LINE, withExpectedLastSeq } from "../../src/nats/expected-last-seq.js";
import { parsePubAck } from "../../src/nats/publisher.js";
import type { StreamFact, StreamFacts } from "../../src/nats/stream-facts.js";

const config = (links: string) => `regions:
  eu: { servers: ["nats://eu:4222"] }
  us: { servers: ["nats://us:4222"] }
  ap: { servers: ["nats://ap:4222"] }
links:
${links}`;

const problems = (text: string): readonly string[] => {
  try {
    parseConfigText(text, "test.yaml");
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  return [];
};

test("config: to.order strict compiles; the default leaves it out", () => {
  const cfg = parseConfigText(
    config(`  - { name: us-to-eu, from: { region: us, stream: ORDERS }, to: { region: eu, stream: ORDERS_US, order: strict } }
  - { name: ap-to-eu, from: { region: ap, stream: ORDERS }, to: { region: eu, stream: ORDERS_AP, order: default } }
`),
    "test.yaml",
  );
  assert.equal(cfg.links[0]?.to.order, "strict");
  assert.equal(cfg.links[1]?.to.order, undefined);
});

test("config: two links into one destination stream, one of them strict: refused at load, naming both", () => {
  const found = problems(
    config(`  - { name: us-to-eu, from: { region: us, stream: ORDERS }, to: { region: eu, stream: ORDERS, order: strict } }
  - { name: ap-to-eu, from: { region: ap, stream: ORDERS }, to: { region: eu, stream: ORDERS } }
`),
  );
  assert.equal(found.length, 1, found.join("\n"));
  assert.match(found[0] ?? "", /links\[0\]\.to\.order: .*only writer.*links\[1\] \("ap-to-eu"\) also writes stream ORDERS in region eu/);
});

test("config: a partitioned strict link is refused at load", () => {
  const found = problems(
    config(`  - name: us-to-eu
    from: { region: us, stream: ORDERS, filter: "orders.*.>" }
    to: { region: eu, stream: ORDERS_US, order: strict }
    partitions: { count: 4, token: 2 }
`),
  );
  assert.equal(found.length, 1, found.join("\n"));
  assert.match(found[0] ?? "", /links\[0\]\.to\.order: .*partitioned/);
});

test("config: an unknown order is refused", () => {
  const found = problems(config(`  - { name: us-to-eu, from: { region: us, stream: ORDERS }, to: { region: eu, stream: ORDERS_US, order: sorted } }\n`));
  assert.equal(found.length, 1, found.join("\n"));
  assert.match(found[0] ?? "", /links\[0\]\.to\.order/);
});

const linkOf = (text: string): LinkConfig[] => [...parseConfigText(text, "test.yaml").links];

const stream = (subjects: string[], extra: Partial<StreamFacts> = {}): StreamFact => ({
  kind: "found",
  stream: { name: "ORDERS_US", subjects, retention: "limits", duplicateWindowMs: 120_000, maxAgeMs: 0, messages: 0, sourced: false, ...extra },
});

test("sole writer: a stream with exactly the link's subjects has no other writer; beyond them, sourced, another link or the dead-letter subject each say why", () => {
  const [link, other] = linkOf(
    config(`  - { name: us-to-eu, from: { region: us, stream: ORDERS }, to: { region: eu, stream: ORDERS_US, order: strict, subject: { addPrefix: "us." } } }
  - { name: ap-to-eu, from: { region: ap, stream: ORDERS }, to: { region: eu, stream: ORDERS_AP } }
`),
  );
  assert.ok(link && other);
  const source = stream(["orders.>"]);
  assert.deepEqual(otherWriters(link, source, stream(["us.orders.>"]), [link, other]), []);
  assert.deepEqual(otherWriters(link, source, stream(["us.orders.eu", "us.orders.us.>"]), [link, other]), [], "narrower subjects, all the link's");
  const beyond = otherWriters(link, source, stream(["us.>"]), [link, other]);
  assert.equal(beyond.length, 1);
  assert.match(beyond[0] ?? "", /binds us\.> beyond the link's subjects \(us\.orders\.>\)/);
  assert.match(otherWriters(link, source, stream(["us.orders.>"], { sourced: true }), [link])[0] ?? "", /sources or mirrors/);
  const intoSame = { ...other, to: { ...other.to, stream: "ORDERS_US" } };
  assert.match(otherWriters(link, source, stream(["us.orders.>"]), [link, intoSame])[0] ?? "", /link ap-to-eu also writes it/);
  const dlq = otherWriters(link, source, stream(["us.orders.>", "relay.>"]), [link]);
  assert.ok(dlq.some((r) => /dead-letter subject/.test(r)), dlq.join("; "));
  assert.deepEqual(otherWriters(link, { kind: "missing" }, stream(["us.orders.>"]), [link]), [], "a source not read yet: judged later");
  assert.match(otherWriters(link, stream([]), stream(["us.orders.>"]), [link])[0] ?? "", /not known/, "a source with no subjects of its own and no filter");
});

test("the header: the block's bytes with Nats-Expected-Last-Sequence added before the closing empty line", () => {
  const block = new HeaderBlock("Nats-Msg-Id: m-1\r\n");
  const out = new TextDecoder().decode(withExpectedLastSeq(block, 41).encode());
  assert.equal(out, "NATS/1.0\r\nNats-Msg-Id: m-1\r\nNats-Expected-Last-Sequence: 41\r\n\r\n");
  assert.equal(new TextDecoder().decode(block.encode()), "NATS/1.0\r\nNats-Msg-Id: m-1\r\n\r\n", "the entry's own block is unchanged");
  const longest = withExpectedLastSeq(block, 18_446_744_073_709_551_615).encode().length - block.encode().length;
  assert.ok(longest <= EXPECTED_LAST_SEQ_MAX_LINE, `${longest} <= ${EXPECTED_LAST_SEQ_MAX_LINE}`);
});

test("a refusal for the expected last sequence (bytes of nats-server 2.9.10) is ORDER_REJECTED, retryable, and names the stream's last sequence", () => {
  const data = new TextEncoder().encode('{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"P","seq":0}');
  const [err, ack] = parsePubAck({ data, headers: undefined }, "orders.1");
  assert.equal(ack, null);
  assert.equal(err?.code, ErrorCodes.ORDER_REJECTED);
  assert.ok(err?.isRetryable());
  assert.match(err?.message ?? "", /wrong last sequence: 5/);
});
