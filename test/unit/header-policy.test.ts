/**
 * The header policy for nats-server 2.11–2.14 (issue 39), from byte fixtures of each version's messages
 * (test/fixtures/headers/nats-messages.json: which source file and tag each comes from): what a relayed
 * message keeps, `Nats-TTL` by the destination's `allow_msg_ttl`, subject delete markers by
 * `to.deleteMarkers`, counter streams refused as destinations, and the docs' table is the code's.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { parseConfigText } from "../../src/config/load.js";
import type { LinkConfig } from "../../src/config/types.js";
import { ErrorCodes } from "../../src/errors.js";
import { allowsMsgTtl, counterStreamError } from "../../src/link/destination.js";
import { entryContext, newEntry } from "../../src/link/entry.js";
import type { DestinationFacts } from "../../src/link/pipeline.js";
import type { Delivery } from "../../src/nats/delivery.js";
import type { HeaderBlock } from "../../src/nats/header-block.js";
import type { JetStreamPublisher } from "../../src/nats/publisher.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { HEADER_POLICY } from "../../src/protocol/header-policy.js";
import { check } from "../helpers/check.js";
import { testPipeline } from "../helpers/test-pipeline.js";

interface Fixture {
  readonly name: string;
  readonly server: string;
  readonly from: string;
  readonly subject: string;
  readonly header: string;
  readonly payload: string;
}

const fixtures = (JSON.parse(readFileSync(new URL("../fixtures/headers/nats-messages.json", import.meta.url), "utf8")) as { messages: Fixture[] }).messages;
const fixture = (name: string): Fixture => {
  const f = fixtures.find((m) => m.name === name);
  assert.ok(f, name);
  return f;
};

function linkWith(to = ""): LinkConfig {
  const config = parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D${to} }, sourceAcks: each }
`,
    "unit",
  );
  const l = config.links[0];
  assert.ok(l);
  return l;
}

function delivery(f: Fixture, seq = 1): Delivery {
  return {
    subject: f.subject,
    reply: `$JS.ACK.S.relay-a-to-b.1.${seq}.${seq}.1764460800000000000.0`,
    streamSequence: seq,
    consumerSequence: seq,
    deliveryCount: 1,
    pending: 0,
    timestampNanos: "1764460800000000000",
    headers: new WireHeaders(f.header),
    data: new TextEncoder().encode(f.payload),
  };
}

/** The header names of a block's lines (as written, in order). */
const namesOf = (block: HeaderBlock): string[] =>
  Buffer.from(block.encode())
    .toString()
    .split("\r\n")
    .slice(1)
    .filter((l) => l !== "")
    .map((l) => l.slice(0, l.indexOf(":")));

test("every fixture: what the policy strips always never leaves, the rest is copied", () => {
  const ctx = entryContext(linkWith());
  const expected: Record<string, { kept: string[]; ttl: boolean }> = {
    ttl: { kept: ["Nats-TTL", "X-App"], ttl: true },
    // 2.11.0's marker carries Nats-Expected-Last-Subject-Sequence(-Subject): never copied.
    "delete-marker-2.11": { kept: ["Nats-Marker-Reason", "Nats-TTL"], ttl: true },
    // Nats-Rollup is in the default strip list: the copy does not roll the destination's subject up.
    "delete-marker-2.12": { kept: ["Nats-Marker-Reason", "Nats-TTL"], ttl: true },
    "atomic-batch": { kept: ["X-App"], ttl: false },
    counter: { kept: [], ttl: false },
    schedule: { kept: [], ttl: false },
    "plain-2.9": { kept: ["X-App"], ttl: false },
  };
  assert.deepEqual(fixtures.map((f) => f.name).sort(), Object.keys(expected).sort());
  for (const f of fixtures) {
    assert.ok(f.server && f.from, `${f.name} says where it comes from`);
    const entry = newEntry(delivery(f), { id: "m1", origin: "a", path: ["a"] }, ctx);
    const relay = ["Nats-Msg-Id", "Relay-Origin", "Relay-Path", "Relay-Source", "Relay-Source-Time", "Relay-Link"];
    assert.deepEqual(
      namesOf(entry.headers).filter((n) => !relay.includes(n)),
      expected[f.name]?.kept,
      `${f.name} (nats-server ${f.server})`,
    );
    assert.equal(entry.ttl, expected[f.name]?.ttl, `${f.name}: carries Nats-TTL`);
  }
});

test("a Nats-TTL in another case is not the server's header: copied, and not flagged (the server matches the name exactly)", () => {
  const ctx = entryContext(linkWith());
  const f = { ...fixture("ttl"), header: "NATS/1.0\r\nnats-ttl: 1h\r\n\r\n" };
  const entry = newEntry(delivery(f), { id: "m1", origin: "a", path: ["a"] }, ctx);
  assert.equal(entry.ttl, false);
});

test("stripHeaders: [Nats-TTL] strips it always; keepTtl: false (repair) too", () => {
  const f = fixture("ttl");
  const listed = newEntry(delivery(f), { id: "m1", origin: "a", path: ["a"] }, entryContext({ ...linkWith(), stripHeaders: [...linkWith().stripHeaders, "Nats-TTL"] }));
  assert.ok(!namesOf(listed.headers).includes("Nats-TTL"));
  assert.equal(listed.ttl, false);
  const repair = newEntry(delivery(f), { id: "m1", origin: "a", path: ["a"] }, entryContext(linkWith(), { keepTtl: false }));
  assert.ok(!namesOf(repair.headers).includes("Nats-TTL"));
});

/** A pipeline of the a-to-b link whose publisher keeps what it was given; `acked`: the source acks. */
function pipelineFor(link: LinkConfig, dest: DestinationFacts) {
  const published: { subject: string; headers: string[] }[] = [];
  const { pipeline, metrics, acked } = testPipeline(link);
  let destSeq = 0;
  const publisher = {
    inFlight: 0,
    publish(subject: string, _data: Uint8Array, headers: HeaderBlock, cb: (err: null, ack: { stream: string; seq: number; duplicate: boolean }) => void) {
      published.push({ subject, headers: namesOf(headers) });
      const seq = ++destSeq;
      setImmediate(() => cb(null, { stream: dest.stream, seq, duplicate: false }));
    },
  } as unknown as JetStreamPublisher;
  pipeline.setDestination(dest);
  pipeline.setPublisher(publisher);
  return { pipeline, metrics, acked, published };
}

const stripped = async (metrics: ReturnType<typeof createMetrics>): Promise<number> =>
  (await metrics.headersStripped.get()).values.find((v) => v.labels.header === "Nats-TTL")?.value ?? 0;

test("Nats-TTL (2.11+): kept for a destination with allow_msg_ttl, stripped and counted for one without", async () => {
  for (const allowMsgTtl of [true, false]) {
    const { pipeline, metrics, acked, published } = pipelineFor(linkWith(), { stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000, allowMsgTtl });
    pipeline.push(delivery(fixture("ttl"), 1));
    pipeline.push(delivery(fixture("plain-2.9"), 2));
    await check(() => acked.length === 2, { name: `both relayed (allowMsgTtl ${allowMsgTtl})`, timeoutMs: 5_000 });
    assert.equal(published[0]?.headers.includes("Nats-TTL"), allowMsgTtl, `allowMsgTtl ${allowMsgTtl}`);
    assert.ok(published[0]?.headers.includes("X-App"));
    assert.equal(await stripped(metrics), allowMsgTtl ? 0 : 1, "one stripped, counted once");
  }
});

test("a destination whose facts do not say (2.9, 2.10: no allow_msg_ttl) gets no Nats-TTL", async () => {
  const { pipeline, metrics, acked, published } = pipelineFor(linkWith(), { stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
  pipeline.push(delivery(fixture("ttl"), 1));
  await check(() => acked.length === 1, { name: "relayed", timeoutMs: 5_000 });
  assert.ok(!published[0]?.headers.includes("Nats-TTL"));
  assert.equal(await stripped(metrics), 1);
});

test("subject delete markers: relayed by default; with to.deleteMarkers: drop, acked, counted once, never published", async () => {
  for (const name of ["delete-marker-2.11", "delete-marker-2.12"]) {
    const relayed = pipelineFor(linkWith(), { stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000, allowMsgTtl: true });
    relayed.pipeline.push(delivery(fixture(name), 1));
    await check(() => relayed.acked.length === 1, { name: `${name} relayed`, timeoutMs: 5_000 });
    assert.deepEqual(relayed.published[0]?.headers.slice(0, 2), ["Nats-Marker-Reason", "Nats-TTL"]);

    const link = linkWith(", deleteMarkers: drop");
    assert.equal(link.to.deleteMarkers, "drop");
    const dropped = pipelineFor(link, { stream: "D", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
    dropped.pipeline.push(delivery(fixture(name), 1));
    dropped.pipeline.push(delivery(fixture(name), 1)); // its ack was lost: delivered again
    dropped.pipeline.push(delivery(fixture("plain-2.9"), 2));
    await check(() => dropped.acked.length === 3, { name: `${name} dropped and acked`, timeoutMs: 5_000 });
    assert.deepEqual(dropped.published.map((p) => p.headers.includes("X-App")), [true], "only the ordinary message is published");
    const count = (await dropped.metrics.deleteMarkersDropped.get()).values[0]?.value;
    assert.equal(count, 1, "counted once per marker");
    assert.equal(dropped.pipeline.size, 0);
  }
  assert.equal(linkWith().to.deleteMarkers, undefined, "relay is the default");
  assert.throws(() => linkWith(", deleteMarkers: keep"), /deleteMarkers/);
});

test("a dead-letter record never keeps Nats-TTL, whatever the destination allows", async () => {
  const link = linkWith();
  const ctx = entryContext(link);
  const entry = newEntry(delivery(fixture("ttl")), { id: "m1", origin: "a", path: ["a"] }, ctx);
  const { HeaderRules } = await import("../../src/link/stages/header-rules.js");
  const rules = new HeaderRules({ link, metrics: createMetrics(undefined, { defaultMetrics: false }) });
  entry.deadLetterReason = "bad";
  rules.beforePublish(entry, { allowMsgTtl: true });
  assert.ok(!namesOf(entry.headers).includes("Nats-TTL"));
  assert.equal(entry.ttl, false);
});

test("stream info: allow_msg_ttl (2.11+) read; a counter stream (allow_msg_counter, 2.12+) is refused with a pointer to server sourcing", () => {
  // StreamConfig fields as nats-server writes them (server/stream.go: `allow_msg_ttl`, `allow_msg_counter,omitempty`).
  const v29 = { config: { name: "D", retention: "limits" } } as never;
  const v211 = { config: { name: "D", retention: "limits", allow_msg_ttl: true } } as never;
  const v212counter = { config: { name: "D", retention: "limits", allow_msg_ttl: false, allow_msg_counter: true } } as never;
  assert.equal(allowsMsgTtl(v29), false);
  assert.equal(allowsMsgTtl(v211), true);
  assert.equal(counterStreamError(v29, "link x: destination stream D"), undefined);
  assert.equal(counterStreamError(v211, "link x: destination stream D"), undefined);
  const err = counterStreamError(v212counter, "link x: destination stream D");
  assert.equal(err?.code, ErrorCodes.DESTINATION_UNSUPPORTED);
  assert.match(err?.message ?? "", /link x: destination stream D is a counter stream \(allow_msg_counter\)/);
  assert.match(err?.message ?? "", /server sourcing/);
  assert.equal(err?.isRetryable(), false);
});

test("docs/data-path.md's header policy table is the code's table", () => {
  const page = readFileSync(new URL("../../docs/data-path.md", import.meta.url), "utf8");
  const section = page.slice(page.indexOf("## Header policy"));
  assert.ok(section.startsWith("## Header policy"), "docs/data-path.md has a ## Header policy section");
  const rows = section
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .map((l) => l.split("|").map((c) => c.trim()));
  assert.deepEqual(
    rows.map((r) => [r[1], r[2], r[3]]),
    HEADER_POLICY.map((r) => [`\`${r.header}\``, r.since, r.action]),
  );
});

test("check --live: a counter destination (2.12+) is an error pointing at server sourcing", async () => {
  const { streamFacts } = await import("../../src/nats/stream-facts.js");
  const { checkRetention } = await import("../../src/preflight/stream-checks.js");
  const info = (config: Record<string, unknown>) =>
    ({ config: { name: "D", subjects: ["d.>"], retention: "limits", duplicate_window: 0, max_age: 0, max_msg_size: -1, ...config }, state: { messages: 0, bytes: 0, first_ts: "", last_ts: "" } }) as never;
  const counter = streamFacts(info({ allow_msg_counter: true }));
  const plain = streamFacts(info({ allow_msg_ttl: true }));
  assert.equal(checkRetention(linkWith(), plain).level, "ok");
  const result = checkRetention(linkWith(), counter);
  assert.equal(result.level, "error");
  assert.match(result.detail, /counter stream \(allow_msg_counter/);
  assert.match(result.fix ?? "", /server sourcing/);
});
