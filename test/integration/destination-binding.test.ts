/**
 * The destination stream's binding and retention, at start and while the link runs (review #21 items 1
 * and 13): a link never acks at the source what its destination stream did not keep, and a destination
 * re-bound at runtime sends at most one in-flight window astray (none with `to.expectStream`).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { ConsumerInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers as createHeaders } from "@nats-io/nats-core";
import { check, uniqueName } from "../helpers/check.js";
import { createCursorFromStart, createStream, readStream, streamCount } from "../helpers/streams.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { Relay } from "../../src/relay/relay.js";

function link(relay: Relay) {
  const l = relay.status().links[0];
  assert.ok(l, "the relay runs one link");
  return l;
}

const consumerInfo = async (nc: NatsConnection, stream: string, durable: string): Promise<ConsumerInfo> =>
  (await jetstreamManager(nc)).consumers.info(stream, durable);

/** Stops at once: a failed link holds messages it will not publish. */
const stopNow = (relay: Relay) => relay.stop(AbortSignal.timeout(500));

async function createRetentionStream(nc: NatsConnection, name: string, subjects: string[], retention: RetentionPolicy): Promise<void> {
  await (await jetstreamManager(nc)).streams.add({ name, subjects, retention, storage: StorageType.File });
}

for (const retention of [RetentionPolicy.Interest, RetentionPolicy.Workqueue]) {
  test(`a destination with ${retention} retention: the link fails at start and acks nothing`, async (t) => {
    const { src, dst, nca, ncb, yaml } = await twoRegions(t, { createDestination: false });
    await createRetentionStream(ncb, dst, [`${src}.>`], retention);
    const durable = uniqueName("cursor");
    await createCursorFromStart(nca, src, durable);
    await publishIds(nca, src, "m", 20);
    const { relay } = await startRelay(t, yaml(`    durable: ${durable}\n`), "b", { http: true });
    // Either outcome ends the wait: today's relay acks what the destination drops.
    await check(async () => link(relay).state === "failed" || (await consumerInfo(nca, src, durable)).ack_floor.stream_seq > 0, {
      name: "the link fails or acks something",
      timeoutMs: 15_000,
    });
    const info = await consumerInfo(nca, src, durable);
    assert.equal(info.ack_floor.stream_seq, 0, "nothing acked at the source");
    assert.equal(await streamCount(nca, src), 20, "every message still at the source");
    const failed = link(relay);
    assert.equal(failed.state, "failed");
    assert.equal(failed.lastError?.code, "DESTINATION_RETENTION");
    const message = failed.lastError?.message ?? "";
    for (const part of ["a-to-b", dst, "region b", retention, "limits"]) assert.ok(message.includes(part), `the error names ${part}: ${message}`);
    assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 0);
    assert.equal(await metricValue(relay, "relay_errors_total", { code: "DESTINATION_RETENTION" }), 1);
    await stopNow(relay);
  });
}

test("the destination recreated with interest retention while the link runs: the link fails, nothing more is acked", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const durable = uniqueName("cursor");
  const { relay } = await startRelay(t, yaml(`    durable: ${durable}\n`), "b", { http: true });
  await publishIds(nca, src, "m", 50);
  await waitForCount(ncb, dst, 50, 15_000);
  await check(async () => (await consumerInfo(nca, src, durable)).ack_floor.stream_seq === 50, { name: "the first 50 acked" });
  // nats-server 2.9 refuses to change retention in place: the operator deletes and recreates the stream.
  const jsm = await jetstreamManager(ncb);
  await assert.rejects(jsm.streams.update(dst, { retention: RetentionPolicy.Interest } as Parameters<typeof jsm.streams.update>[1]), /can not change retention policy/);
  await jsm.streams.delete(dst);
  await createRetentionStream(ncb, dst, [`${src}.>`], RetentionPolicy.Interest);
  await publishIds(nca, src, "m", 50, 50);
  await check(async () => link(relay).state === "failed" || (await consumerInfo(nca, src, durable)).ack_floor.stream_seq > 50, {
    name: "the link fails or acks past the first 50",
    timeoutMs: 15_000,
  });
  const info = await consumerInfo(nca, src, durable);
  assert.equal(info.ack_floor.stream_seq, 50, "nothing acked after the destination changed");
  assert.equal(await streamCount(nca, src), 100);
  const failed = link(relay);
  assert.equal(failed.state, "failed");
  assert.equal(failed.lastError?.code, "DESTINATION_RETENTION");
  assert.ok(await metricValue(relay, "relay_destination_changes_total", { kind: "deleted" }) >= 1, "the deletion was seen");
  await stopNow(relay);
});

/** A background publisher into the source, alternating `<prefix>.a.<n>` and `<prefix>.b.<n>`, ~`perSecond`. */
function steadyTraffic(nc: NatsConnection, prefix: string, perSecond: number) {
  const js = jetstream(nc);
  let sent = 0;
  let stopped = false;
  const perTick = Math.max(1, Math.round(perSecond / 100));
  const run = (async () => {
    while (!stopped) {
      const tick = Date.now();
      for (let k = 0; k < perTick; k++) {
        const i = sent++;
        const h = createHeaders();
        h.set("Nats-Msg-Id", `t-${i}`);
        await js.publish(`${prefix}.${i % 2 === 0 ? "a" : "b"}.${i % 5}`, new TextEncoder().encode(`payload-${i}`), { headers: h, timeout: 10_000 });
      }
      await new Promise((r) => setTimeout(r, Math.max(0, 10 - (Date.now() - tick))));
    }
  })();
  return {
    get sent() {
      return sent;
    },
    stop: async () => {
      stopped = true;
      await run;
      return sent;
    },
  };
}

for (const expectStream of [false, true]) {
  test(`a destination re-bound under traffic${expectStream ? " with to.expectStream" : ""}: the link fails, ${expectStream ? "nothing" : "at most one window"} goes astray, nothing astray is acked`, async (t) => {
    const { src, dst, nca, ncb, yaml } = await twoRegions(t);
    const durable = uniqueName("cursor");
    const inFlight = 32;
    const keys = `    durable: ${durable}\n    inFlight: ${inFlight}\n    batchSize: 16\n`;
    const config = expectStream ? yaml(keys).replace(`stream: ${dst} }`, `stream: ${dst}, expectStream: true }`) : yaml(keys);
    assert.ok(!expectStream || config.includes("expectStream: true"));
    const { relay } = await startRelay(t, config, "b", { http: true });
    const traffic = steadyTraffic(nca, src, 400);
    t.after(() => traffic.stop());
    await waitForCount(ncb, dst, 200, 20_000, "(the link relays the traffic)");
    // The operator narrows DST to `.a.>` and gives `.b.>` a stream of its own.
    const jsm = await jetstreamManager(ncb);
    const other = uniqueName("OTHER");
    await jsm.streams.update(dst, { subjects: [`${src}.a.>`] });
    await createStream(ncb, { name: other, subjects: [`${src}.b.>`] });
    await check(() => link(relay).state === "failed", { name: "the link fails", timeoutMs: 15_000 });
    await traffic.stop();
    const failed = link(relay);
    const astray = await streamCount(ncb, other);
    t.diagnostic(`messages in ${other}: ${astray}; sent ${traffic.sent}; error: ${failed.lastError?.message ?? ""}`);
    assert.equal(failed.lastError?.code, "DESTINATION_MISMATCH");
    if (expectStream) assert.equal(astray, 0, "the server refused every publish into another stream");
    else assert.ok(astray <= inFlight, `at most one in-flight window (${inFlight}) in ${other}: ${astray}`);
    // Nothing acked at the source that is not in DST.
    await stopNow(relay);
    const floor = (await consumerInfo(nca, src, durable)).ack_floor.stream_seq;
    const dstMessages = await readStream(ncb, dst);
    const inDst = new Set(dstMessages.map((m) => m.headers["Nats-Msg-Id"]));
    const stamped = dstMessages.filter((m) => m.headers["Nats-Expected-Stream"] === dst).length;
    assert.equal(stamped, expectStream ? dstMessages.length : 0, "Nats-Expected-Stream is stored with every message only with the option");
    const acked = (await readStream(nca, src)).filter((m) => m.seq <= floor);
    assert.ok(acked.length >= 200, `the link had acked what it relayed: ${acked.length}`);
    const missing = acked.filter((m) => !inDst.has(m.headers["Nats-Msg-Id"])).map((m) => m.seq);
    assert.deepEqual(missing.slice(0, 10), [], `acked at the source but not in ${dst} (ack floor ${floor})`);
  });
}
