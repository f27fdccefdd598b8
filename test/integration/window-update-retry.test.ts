import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";
import { check, uniqueName } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany, streamCount } from "../helpers/streams.js";

/**
 * A MaxAckPending update the source's server never gets (here: the path to it black-holed while the
 * window changes; the update's requests recorded as swallowed) is retried until the server has the window;
 * `/status` and `relay_pull_window_messages` show what the server has meanwhile. On real nats-servers.
 */
test("a MaxAckPending update lost on the way to the source is retried: the server's max_ack_pending converges to the window", async (t) => {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const proxy = await startBlackHoleProxy({ port: a.port });
  t.after(() => proxy.close());
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  const yaml = (extra = "") =>
    linkYaml({
      regions: { a: [`nats://127.0.0.1:${proxy.port}`], b: [b.url] },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra }],
    });
  await publishMany(nca, 20, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } }), 1);
  const { relay } = await startRelay(t, yaml(), "b");
  await check(async () => (await streamCount(ncb, dst)) === 20 && relay.status().links[0]?.state === "live", {
    name: "relayed and live",
    timeoutMs: 20_000,
  });
  const jsm = await jetstreamManager(nca);
  const serverMax = async () => (await jsm.consumers.info(src, "relay-a-to-b")).config.max_ack_pending ?? 0;
  const before = await serverMax();
  assert.equal(relay.status().links[0]?.window?.messages, before);

  // The path goes silent, and a rate cap (a reload) lowers the window: the update is swallowed.
  proxy.blackHole({ record: true });
  const report = await relay.reload(
    parseConfigText(yaml('    maxRate: { messages: "50/s" }\n'), "test.yaml"),
  );
  assert.deepEqual(report.retuned, ["a-to-b"]);
  const wanted = relay.status().links[0]?.window?.pending;
  assert.ok(
    wanted !== undefined && wanted < before,
    `the window asked for is below ${before}: ${JSON.stringify(relay.status().links[0]?.window)}`,
  );
  // nats.js reads the consumer's config before it updates it: that read is what the server never gets.
  await check(
    async () =>
      proxy.swallowed().includes(`$JS.API.CONSUMER.INFO.${src}.relay-a-to-b`) &&
      (await metricValue(relay, "relay_pull_window_update_failures_total", { link: "a-to-b" })) >= 1,
    {
      name: "the update was lost in the black hole, and counted",
      timeoutMs: 15_000,
    },
  );
  assert.equal(relay.status().links[0]?.window?.messages, before, "status shows what the server has");
  assert.equal(await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" }), before);
  assert.equal(await serverMax(), before);

  proxy.restore();
  await check(async () => (await serverMax()) === wanted, {
    name: `the server's max_ack_pending converges to ${wanted}`,
    timeoutMs: 30_000,
    intervalMs: 200,
  });
  await check(
    () =>
      relay.status().links[0]?.window?.messages === wanted &&
      relay.status().links[0]?.window?.pending === undefined,
    { name: "status shows the server's window", timeoutMs: 5_000 },
  );
  assert.equal(await metricValue(relay, "relay_pull_window_messages", { link: "a-to-b" }), wanted);
  assert.ok(
    (await metricValue(relay, "relay_pull_window_update_failures_total", { link: "a-to-b" })) >= 1,
    "the lost update is counted",
  );
});
