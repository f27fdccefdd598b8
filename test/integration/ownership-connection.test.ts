import { test } from "node:test";
import assert from "node:assert/strict";
import { check, uniqueName } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { DEFAULT_GROUP, linkYaml, waitForCount } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany } from "../helpers/streams.js";
import { startThrottleProxy } from "../helpers/throttle-proxy.js";

const MIB = 1024 * 1024;

/**
 * The lease renewals and the membership heartbeats have their own connection to the destination region:
 * a window of large messages queued for publishing cannot hold them back past their request timeout
 * (1 s with the default renew), so the owner keeps its lease through a catch-up of hundreds of MiB.
 * (On the publish connection, renewals queued behind the publishes: "renewed-late", then "lost" and
 * "acquired" again, the link recovering in between.)
 */
test("a window of 1 MiB messages (inFlightBytes 1GiB) does not delay lease renewals: no lease transition during the catch-up; the ownership connection is separate and reported", async (t) => {
  const servers = withServers(t);
  const big = "max_payload: 8MB\nmax_pending: 1GB";
  const [a, b] = await Promise.all([servers.startNats({ extraConfig: big }), servers.startNats({ extraConfig: big })]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  const total = 100;
  const payload = new Uint8Array(MIB).fill(7);
  await publishMany(nca, total, (i) => ({ subject: `${src}.${i % 5}`, data: payload, headers: { "Nats-Msg-Id": `m-${i}` } }), 16);

  // The relay reaches its destination over an uplink of 14 MiB/s per connection: the window it publishes
  // at once (100 MiB) takes ~7 s to go out, several lease deadlines.
  const uplink = await startThrottleProxy({ port: b.port, bytesPerSecond: 14 * MIB });
  t.after(() => uplink.close());
  const yaml = linkYaml({
    regions: { a: [a.url], b: [`nats://127.0.0.1:${uplink.port}`] },
    links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    batchSize: 100\n    inFlight: 2000\n    inFlightBytes: 1GiB\n" }],
    // The default lease and renewal (1 s): what the renewals must keep up with during the catch-up.
    extra: DEFAULT_GROUP,
  }).replace("publishTimeout: 2s", "publishTimeout: 60s");
  const { relay, logs } = await startRelay(t, yaml, "b", { http: true });
  const transitions = async () => {
    const out: Record<string, number> = {};
    for (const reason of ["acquired", "lost", "renewed-late", "released", "handed-over"]) {
      const n = await metricValue(relay, "relay_lease_transitions_total", { link: "a-to-b", reason });
      if (n > 0) out[reason] = n;
    }
    return out;
  };
  await check(async () => (await transitions())["acquired"] === 1, { name: "the relay acquires the link's lease", timeoutMs: 20_000 });

  let peakBytes = 0;
  const sample = setInterval(() => {
    void metricValue(relay, "relay_inflight_bytes", { link: "a-to-b" }).then((v) => (peakBytes = Math.max(peakBytes, v)));
  }, 20);
  t.after(() => clearInterval(sample));
  await waitForCount(ncb, dst, total, 120_000, "every 1 MiB message relayed");
  clearInterval(sample);
  t.diagnostic(`peak in-flight bytes ${Math.round(peakBytes / MIB)} MiB`);
  assert.ok(peakBytes >= 40 * MIB, `the window held many MiB at once (peak ${Math.round(peakBytes / MIB)} MiB)`);
  const leaseLines = logs.lines.filter((l) => /"msg":"lease /.test(l)).slice(-10).join("\n");
  assert.deepEqual(await transitions(), { acquired: 1 }, `no lease transition after the first acquisition:\n${leaseLines}`);

  // The ownership connection: its own, named, in the destination server's connz and in /status.
  const connz = (await (await fetch(`http://127.0.0.1:${b.monitorPort}/connz?limit=1000`)).json()) as { connections?: { name?: string }[] };
  const names = (connz.connections ?? []).map((c) => c.name ?? "");
  assert.ok(names.includes("jetstream-relay/b/ownership:b"), `the destination server lists the ownership connection: ${names.join(", ")}`);
  assert.ok(names.includes("jetstream-relay/b/local:b"), `and the publish connection: ${names.join(", ")}`);
  const status = relay.status();
  assert.deepEqual(
    (status.connections ?? []).map((c) => [c.name, c.role, c.state]).sort(),
    [
      ["jetstream-relay/b/local:b", "local", "connected"],
      ["jetstream-relay/b/ownership:b", "ownership", "connected"],
      ["jetstream-relay/b/remote:a", "remote", "connected"],
    ],
  );
  assert.equal(await metricValue(relay, "relay_connection_up", { region: "b", role: "ownership" }), 1);

  // It reconnects like the others: the destination server restarted, it is back (and says so).
  await b.restart();
  const ownership = () => relay.status().connections?.find((c) => c.role === "ownership");
  await check(() => ownership()?.state === "connected" && ownership()!.reconnects >= 1, {
    name: "the ownership connection reconnected after the destination server restarted",
    timeoutMs: 20_000,
  });
  assert.equal(await metricValue(relay, "relay_connection_up", { region: "b", role: "ownership" }), 1);
  await check(async () => (await transitions())["acquired"] !== undefined && relay.status().links[0]?.state === "live", {
    name: "the link is live again after the restart",
    timeoutMs: 20_000,
  });
});
