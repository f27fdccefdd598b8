import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { createCursorFromStart, readStream } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";

const linkOf = (relay: Relay) => relay.status().links[0];

/**
 * Review #21 item 6: a resync holds its snapshot in the pipeline until the destination takes it. When
 * the lease goes meanwhile, the resync must end with it — not wait forever for a pipeline that cannot
 * publish, and not, on taking the link back later, publish an old snapshot after what the other owner
 * relayed and move the cursor back to its old snapshot point.
 */
test("a lease lost mid-resync ends the resync: its snapshot is dropped, the cursor not moved; the next owner relays, and the first one takes over cleanly later", async (t) => {
  // The destination's 1 s duplicate window: a late publish or a cursor moved back would store copies.
  const r = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const jsa = await jetstreamManager(r.nca);
  const jsb = await jetstreamManager(r.ncb);
  // A source that keeps 300 messages: 400 published behind a cursor at the start leave a gap of 100.
  await jsa.streams.update(r.src, { ...(await jsa.streams.info(r.src)).config, max_msgs: 300 });
  await createCursorFromStart(r.nca, r.src, "relay-a-to-b");
  await publishIds(r.nca, r.src, "old", 400);
  // A destination that takes 2 messages: the snapshot (the latest of 5 subjects) waits in the pipeline.
  const full = (await jsb.streams.info(r.dst)).config;
  await jsb.streams.update(r.dst, { ...full, max_msgs: 2, discard: DiscardPolicy.New });

  // The first relay reaches region b through a proxy that can go silent; the second directly.
  const proxy = await startBlackHoleProxy({ port: r.b.port });
  t.after(() => proxy.close());
  const group = "group: { lease: 3s, renew: 500ms }";
  const link = [{ name: "a-to-b", from: "a", fromStream: r.src, to: "b", toStream: r.dst, extra: "    onGap: resync\n" }];
  const yamlVia = (bUrl: string) => linkYaml({ regions: { a: [r.a.url], b: [bUrl] }, links: link, extra: group });
  const first = await startRelay(t, yamlVia(`nats://127.0.0.1:${proxy.port}`), "b", { gaps: true });
  await check(() => linkOf(first.relay)?.state === "resyncing", { name: "the first relay resyncing after the gap", timeoutMs: 20_000 });
  await waitForCount(r.ncb, r.dst, 2, 20_000, "the part of the snapshot the destination takes");
  const second = await startRelay(t, yamlVia(r.b.url), "b", { gaps: true });
  await check(() => linkOf(second.relay)?.state === "standby", { name: "the second relay in standby", timeoutMs: 20_000 });

  // The first relay's path to region b goes silent: its lease lapses, the second takes the link.
  proxy.blackHole();
  await check(() => linkOf(second.relay)?.ownership?.self === true, { name: "the second relay owns the link", timeoutMs: 20_000 });
  await check(() => linkOf(first.relay)?.state === "standby", {
    name: "the first relay's resync ended with its lease (standby, not resyncing forever)",
    timeoutMs: 15_000,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(linkOf(first.relay))}`);
  });
  assert.equal(await metricValue(first.relay, "relay_resyncs_abandoned_total", { link: "a-to-b", reason: "gap" }), 1);

  // The destination takes everything again: the second relay's own resync, then live traffic.
  await jsb.streams.update(r.dst, full);
  await check(() => linkOf(second.relay)?.lastResync, { name: "the second relay's resync finished", timeoutMs: 30_000 });
  const fresh = await publishIds(r.nca, r.src, "new", 50);
  await check(async () => (await readStream(r.ncb, r.dst)).some((m) => m.headers["Nats-Msg-Id"] === fresh.at(-1)), {
    name: "the second relay relayed the new messages",
    timeoutMs: 20_000,
  });

  // The first relay comes back and takes the link over when the second stops.
  proxy.restore();
  await second.relay.stop(AbortSignal.timeout(10_000));
  await check(() => linkOf(first.relay)?.state === "live", { name: "the first relay owns the link again, live", timeoutMs: 30_000 }).catch(
    (err: unknown) => {
      throw new Error(`${(err as Error).message}: ${JSON.stringify(linkOf(first.relay))}`);
    },
  );
  const more = await publishIds(r.nca, r.src, "more", 10, 50);
  await check(async () => (await readStream(r.ncb, r.dst)).some((m) => m.headers["Nats-Msg-Id"] === more.at(-1)), {
    name: "the first relay relays again",
    timeoutMs: 20_000,
  });
  // Past the 1 s window: anything published late or replayed from a moved-back cursor is stored again.
  const windowPassed = Date.now() + 2_000;
  await check(() => Date.now() > windowPassed, { name: "past the destination's duplicate window", timeoutMs: 5_000 });
  assert.equal(await metricValue(first.relay, "relay_resyncs_total", { link: "a-to-b" }), 1, "the first relay did not resync again: the second moved the cursor past the gap");

  const stored = await readStream(r.ncb, r.dst);
  const ids = stored.map((m) => m.headers["Nats-Msg-Id"] ?? "");
  const live = ids.filter((id) => !id.startsWith("old-"));
  assert.deepEqual(live, [...fresh, ...more], "every message after the snapshot once, in order: no cursor moved back");
  // Per subject, the newest stored is the newest published: no old snapshot message after the new ones.
  const lastBySubject = new Map<string, string>();
  for (const m of stored) lastBySubject.set(m.subject, m.headers["Nats-Msg-Id"] ?? "");
  for (const [subject, id] of lastBySubject) assert.ok(!id.startsWith("old-"), `${subject} ends with ${id}, an old snapshot message published late`);
});
