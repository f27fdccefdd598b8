import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { publishMany, readStream } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { twoRegions } from "../helpers/scenario.js";

test("two different messages under one Nats-Msg-Id: the second is counted and logged as an id collision, never silently", async (t) => {
  // The source's own dedup window is short, so it stores both; the destination's is the default 2 min.
  const { src, ncb, dst, nca, yaml } = await twoRegions(t, { srcDuplicateWindowMs: 100 });
  const enc = new TextEncoder();
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, data: enc.encode("first"), headers: { "Nats-Msg-Id": "order-1" } }));
  const after = Date.now() + 300;
  await check(() => Date.now() > after, { name: "past the source's 100 ms window", timeoutMs: 2_000 });
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, data: enc.encode("second, different"), headers: { "Nats-Msg-Id": "order-1" } }));
  // A redelivery of the same message is not a collision: same id, same payload, same source position.
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, data: enc.encode("third"), headers: { "Nats-Msg-Id": "order-3" } }));

  const { relay, logs } = await startRelay(t, yaml(), "b");
  await check(async () => (await metricValue(relay, "relay_id_collisions_total", { link: "a-to-b" })) === 1, { name: "one id collision counted", timeoutMs: 20_000 });
  const stored = await readStream(ncb, dst);
  assert.deepEqual(stored.map((m) => m.data), ["first", "third"]);
  const line = logs.lines.find((l) => l.includes("id collision"));
  assert.ok(line, "logged");
  assert.match(line, /"id":"order-1"/);
  assert.match(line, new RegExp(`"source":"a ${src} 2"`));
  assert.match(line, new RegExp(`"storedSource":"a ${src} 1"`));
  assert.doesNotMatch(line, /second, different/, "never the payload");
});
