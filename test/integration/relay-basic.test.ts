import { jetstreamManager } from "@nats-io/jetstream";
import { test } from "node:test";
import { TEST_GROUP, twoRegions } from "../helpers/scenario.js";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { publishMany, readStream, streamCount } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";

function twoRegionYaml(a: string, b: string, src: string, dst: string, extra = ""): string {
  return `
regions:
  a: { servers: ["${a}"] }
  b: { servers: ["${b}"] }
links:
  - name: a-to-b
    from: { region: a, stream: ${src} }
    to: { region: b, stream: ${dst} }
    batchSize: 500
    inFlight: 1024
${extra}
log: { level: info }
${TEST_GROUP}
`;
}

test("20,000 messages A→B arrive exactly once, in source order, headers intact and stamped", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const total = 20_000;
  await publishMany(nca, total, (i) => ({
    subject: `${src}.orders.${i % 7}`,
    headers: { "Nats-Msg-Id": `order-${i}`, "X-Trace": `trace-${i}` },
  }));

  const { relay } = await startRelay(t, twoRegionYaml(a.url, b.url, src, dst), "b", { http: true });
  await check(async () => (await streamCount(ncb, dst)) >= total, { name: `${total} messages in ${dst}`, timeoutMs: 60_000 });
  await check(async () => (await metricValue(relay, "relay_messages_total", { link: "a-to-b", outcome: "relayed" })) === total, {
    name: "relayed counter reaches total",
    timeoutMs: 10_000,
  });

  const stored = await readStream(ncb, dst);
  assert.equal(stored.length, total, "exactly total messages stored");
  stored.forEach((m, i) => {
    assert.equal(m.headers["Nats-Msg-Id"], `order-${i}`, `source order at position ${i}`);
    assert.equal(m.subject, `${src}.orders.${i % 7}`);
    assert.equal(m.data, `payload-${i}`);
    assert.equal(m.headers["X-Trace"], `trace-${i}`);
    assert.equal(m.headers["Relay-Origin"], "a");
    assert.equal(m.headers["Relay-Path"], "a");
    assert.equal(m.headers["Relay-Source"], `a ${src} ${i + 1}`);
    assert.match(m.headers["Relay-Source-Time"] ?? "", /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/);
  });
  assert.equal(await metricValue(relay, "relay_corrections_total", { link: "a-to-b" }), 0);
  // The state follows the backlog probe (once a second): it turns live at the first reading after the catch-up.
  await check(() => relay.status().links[0]?.state === "live", { name: "link state live after the catch-up", timeoutMs: 5_000 });
});

test("messages without Nats-Msg-Id get deterministic ids; JetStream control headers are stripped", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t, { allowRollup: true });
  // B already holds one message, so B's sequences run one ahead of A's: an expected-last-sequence that
  // holds in A would be refused in B, and a subject rollup would purge B's earlier messages.
  await publishMany(ncb, 1, () => ({ subject: `${src}.y`, headers: { "Nats-Msg-Id": "local-1" } }));
  await publishMany(nca, 10, (i) => ({ subject: `${src}.x`, headers: { "X-I": String(i) } }));
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, headers: { "Nats-Expected-Last-Sequence": "10" } }));
  await publishMany(nca, 1, () => ({ subject: `${src}.y`, headers: { "Nats-Rollup": "sub" } }));
  await startRelay(t, twoRegionYaml(a.url, b.url, src, dst), "b");
  await check(async () => (await streamCount(ncb, dst)) === 13, { name: "12 relayed + 1 local message in destination", timeoutMs: 20_000 });
  const all = await readStream(ncb, dst);
  assert.equal(all[0]?.headers["Nats-Msg-Id"], "local-1", "the rollup did not purge B's earlier message on the subject");
  const stored = all.slice(1);
  // The derived id carries the source stream's incarnation (its creation time in ms).
  const created = Date.parse((await (await jetstreamManager(nca)).streams.info(src)).created);
  assert.deepEqual(
    stored.map((m) => m.headers["Nats-Msg-Id"]),
    Array.from({ length: 12 }, (_, i) => `a:${src}:${created}:${i + 1}`),
  );
  for (const m of stored) {
    // No header JetStream acts on is stored: neither the source's nor the relay's own.
    const control = Object.keys(m.headers).filter((k) => /^nats-(expected|rollup|ttl)/i.test(k));
    assert.deepEqual(control, [], `seq ${m.seq}`);
  }
});
