/**
 * `to.order: strict` (issue 39 item 1). A proxy between the relay and the destination loses one
 * publish while the later ones pipelined behind it pass: what a destination leader dying under a
 * window does, on demand. Without the option the destination stores the lost message's retry after
 * them (the test first proves that it does); with it, every later publish fails its
 * `Nats-Expected-Last-Sequence` check, the link rolls back and resumes from the destination's last
 * sequence, and everything lands exactly once, in source order. A second writer into the destination
 * makes a strict link refuse to start, and a stream changed under a running link to admit one stops it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startPubDropProxy } from "../helpers/pub-drop-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { linkYaml, publishIds, twoRegions } from "../helpers/scenario.js";
import type { HasAfter } from "../helpers/servers.js";
import { readStream } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";

const COUNT = 40;
/** The one publish the proxy loses: well inside the first window, with many behind it. */
const LOST = "m-5";

function strictYaml(yaml: string, dst: string): string {
  const plain = `to: { region: b, stream: ${dst} }`;
  assert.ok(yaml.includes(plain), "the link's to line");
  return yaml.replace(plain, `to: { region: b, stream: ${dst}, order: strict }`);
}

/** `promise`, or a failure naming `what` after `ms`. */
async function within(promise: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting until ${what}`)), ms)));
  try {
    await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Two regions, COUNT messages at the source, and a link a-to-b whose destination side goes through the proxy. */
async function lostPublish(t: HasAfter, strict: boolean) {
  const r = await twoRegions(t);
  const proxy = await startPubDropProxy(t, r.b.port);
  const yaml = linkYaml({
    regions: { a: [r.a.url], b: [proxy.url] },
    links: [{ name: "a-to-b", from: "a", fromStream: r.src, to: "b", toStream: r.dst }],
  });
  const ids = await publishIds(r.nca, r.src, "m", COUNT);
  const lost = proxy.dropPublish(`Nats-Msg-Id: ${LOST}\r\n`);
  const { relay } = await startRelay(t, strict ? strictYaml(yaml, r.dst) : yaml, "b");
  await within(lost, 15_000, `the proxy dropped ${LOST}`);
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) === COUNT, {
    name: `${COUNT} messages relayed`,
    timeoutMs: 20_000,
  });
  const stored = (await readStream(r.ncb, r.dst)).map((m) => m.headers["Nats-Msg-Id"] ?? "");
  return { ...r, relay, ids, stored };
}

test("without strict order, a publish lost while later ones pass is stored after them (the case is provoked)", async (t) => {
  const { relay, ids, stored } = await lostPublish(t, false);
  assert.deepEqual([...stored].sort(), [...ids].sort(), "each message once");
  assert.notDeepEqual(stored, ids, "the lost message's retry landed after later ones");
  assert.equal(stored.at(-1), LOST, "it landed last");
  assert.ok((await metricValue(relay, "relay_reordered_total", {})) > 0, "counted as reordered");
});

test("with to.order strict, a publish lost while later ones pass: nothing stored out of order, each once", async (t) => {
  const { relay, ids, stored, ncb, dst } = await lostPublish(t, true);
  assert.deepEqual(stored, ids, "every message exactly once, in source order");
  assert.equal(await metricValue(relay, "relay_reordered_total", {}), 0);
  assert.ok((await metricValue(relay, "relay_order_rejections_total", {})) > 0, "the server refused the publishes behind the lost one");
  const [first] = await readStream(ncb, dst);
  assert.equal(first?.headers["Nats-Expected-Last-Sequence"], "0", "the header is stored with every message (what a re-publisher must strip)");
});

/** The link's status once it is failed. */
async function failedWith(relay: Relay, code: string) {
  await check(() => relay.status().links[0]?.state === "failed", { name: "the link fails", timeoutMs: 15_000 });
  const failed = relay.status().links[0];
  assert.equal(failed?.lastError?.code, code);
  return failed?.lastError?.message ?? "";
}

test("with to.order strict, a destination stream that binds subjects beyond the link's: the link refuses to start", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const jsm = await jetstreamManager(ncb);
  const info = await jsm.streams.info(dst);
  await jsm.streams.update(dst, { ...info.config, subjects: [`${src}.>`, "elsewhere.>"] });
  await publishIds(nca, src, "m", 5);
  const { relay } = await startRelay(t, strictYaml(yaml(), dst), "b", { http: true });
  const message = await failedWith(relay, "ORDER_NOT_SOLE_WRITER");
  for (const part of ["a-to-b", dst, "region b", "elsewhere.>", "only writer"]) assert.ok(message.includes(part), `the error names ${part}: ${message}`);
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 0);
  assert.equal((await readStream(ncb, dst)).length, 0, "nothing published");
});

test("with to.order strict, the stream changed under a running link to admit another writer: the link stops", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const ids = await publishIds(nca, src, "m", 5);
  const { relay } = await startRelay(t, strictYaml(yaml(), dst), "b", { http: true });
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) === ids.length, {
    name: "the first messages relayed",
    timeoutMs: 15_000,
  });
  const jsm = await jetstreamManager(ncb);
  const info = await jsm.streams.info(dst);
  await jsm.streams.update(dst, { ...info.config, subjects: [`${src}.>`, "elsewhere.>"] });
  const message = await failedWith(relay, "ORDER_NOT_SOLE_WRITER");
  assert.ok(message.includes("elsewhere.>"), message);
});
