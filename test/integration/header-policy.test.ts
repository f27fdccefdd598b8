/**
 * The header policy against real servers (issue 39; docs/data-path.md#header-policy). On every server:
 * headers of newer servers published by a client into the source (2.9 stores them as plain headers) are
 * stripped, `Nats-TTL` goes nowhere a destination without `allow_msg_ttl` (2.9 has no such setting), and
 * with `to.deleteMarkers: drop` a marker is acked and counted, never published. With a 2.11+ binary
 * (NATS_SERVER_BIN) a destination with `allow_msg_ttl` keeps `Nats-TTL`; with 2.12+ a counter stream
 * as destination fails the link. Those say "skipped: needs 2.11+" on older servers.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { StreamConfig } from "@nats-io/jetstream";
import type { Relay } from "../../src/relay/relay.js";
import { check } from "../helpers/check.js";
import { natsServerVersion, needsServer, serverSupports } from "../helpers/nats-version.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { twoRegions, waitForCount } from "../helpers/scenario.js";
import { publishMany, readStream } from "../helpers/streams.js";

const link = (relay: Relay) => {
  const l = relay.status().links.find((x) => x.name === "a-to-b");
  assert.ok(l, "link a-to-b");
  return l;
};

/** One message of each kind, as a client publishes them (2.9 stores the headers as they are). */
function kinds(src: string): { subject: string; headers: Record<string, string> }[] {
  return [
    { subject: `${src}.ttl`, headers: { "Nats-Msg-Id": "ttl", "Nats-TTL": "1h", "X-App": "a" } },
    { subject: `${src}.batch`, headers: { "Nats-Msg-Id": "batch", "Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1", "X-App": "b" } },
    { subject: `${src}.counter`, headers: { "Nats-Msg-Id": "counter", "Nats-Incr": "+1", "Nats-Counter-Sources": "{}", "X-App": "c" } },
    { subject: `${src}.schedule`, headers: { "Nats-Msg-Id": "schedule", "Nats-Schedule": "@every 5m", "Nats-Schedule-Target": `${src}.t`, "X-App": "d" } },
    { subject: `${src}.marker`, headers: { "Nats-Msg-Id": "marker", "Nats-Marker-Reason": "MaxAge", "Nats-TTL": "15m0s" } },
    { subject: `${src}.plain`, headers: { "Nats-Msg-Id": "plain", "X-App": "e" } },
  ];
}

const POLICY_STRIPPED = ["Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit", "Nats-Incr", "Nats-Counter-Sources", "Nats-Schedule", "Nats-Schedule-Target"];

// 2.11+ refuses most of these headers in a client publish to a plain stream (TTL, batch, counter,
// schedule): the messages can only be made on older servers; the 2.11+ tests below cover what can.
const storesThemAsText = serverSupports("2.11") ? `skipped: nats-server ${natsServerVersion() ?? "?"} refuses these headers in a client publish (the 2.11+ tests cover it)` : false;

test("a destination without allow_msg_ttl: Nats-TTL stripped and counted, batch, counter and schedule headers never copied; to.deleteMarkers: drop acks a marker unpublished", { skip: storesThemAsText }, async (t) => {
  const r = await twoRegions(t);
  const sent = kinds(r.src);
  await publishMany(r.nca, sent.length, (i) => sent[i]!);
  const { relay } = await startRelay(t, r.yaml().replace(`stream: ${r.dst} }`, `stream: ${r.dst}, deleteMarkers: drop }`), "b", { http: true });
  await waitForCount(r.ncb, r.dst, sent.length - 1, 20_000, "(all but the marker)");
  await check(async () => (await metricValue(relay, "relay_delete_markers_dropped_total", { link: "a-to-b" })) === 1, { name: "the marker dropped and counted", timeoutMs: 10_000 });
  const stored = await readStream(r.ncb, r.dst);
  assert.deepEqual(
    stored.map((m) => m.headers["Nats-Msg-Id"]),
    ["ttl", "batch", "counter", "schedule", "plain"],
    "everything but the marker, in order",
  );
  for (const m of stored) {
    for (const h of [...POLICY_STRIPPED, "Nats-TTL"]) assert.equal(m.headers[h], undefined, `${m.headers["Nats-Msg-Id"]}: ${h}`);
    assert.ok(m.headers["X-App"], "other headers copied");
  }
  assert.equal(await metricValue(relay, "relay_headers_stripped_total", { link: "a-to-b", header: "Nats-TTL" }), 1);
  // The marker was acked: the source consumer has nothing left.
  await check(() => link(relay).state === "live", { name: "the link is live (nothing held)", timeoutMs: 10_000 });
});

test("a destination with allow_msg_ttl (2.11+) keeps Nats-TTL; a marker is relayed by default", { skip: needsServer("2.11") }, async (t) => {
  const r = await twoRegions(t, { createDestination: false });
  // The source takes TTLs too (else it refuses the publish, 10166); a marker's headers are plain to a client publish.
  await (await jetstreamManager(r.nca)).streams.update(r.src, { subjects: [`${r.src}.>`], allow_msg_ttl: true } as Partial<StreamConfig>);
  const jsm = await jetstreamManager(r.ncb);
  await jsm.streams.add({ name: r.dst, subjects: [`${r.src}.>`], allow_msg_ttl: true } as Partial<StreamConfig> & { name: string });
  const sent = kinds(r.src).filter((k) => ["ttl", "marker", "plain"].includes(k.headers["Nats-Msg-Id"] ?? ""));
  await publishMany(r.nca, sent.length, (i) => sent[i]!);
  const { relay } = await startRelay(t, r.yaml(), "b", { http: true });
  await waitForCount(r.ncb, r.dst, sent.length, 20_000);
  const stored = await readStream(r.ncb, r.dst);
  const byId = new Map(stored.map((m) => [m.headers["Nats-Msg-Id"], m]));
  assert.equal(byId.get("ttl")?.headers["Nats-TTL"], "1h");
  assert.equal(byId.get("marker")?.headers["Nats-Marker-Reason"], "MaxAge");
  assert.equal(await metricValue(relay, "relay_headers_stripped_total", { link: "a-to-b", header: "Nats-TTL" }), 0);
});

test("a counter stream (allow_msg_counter, 2.12+) as destination fails the link, pointing at server sourcing", { skip: needsServer("2.12") }, async (t) => {
  const r = await twoRegions(t, { createDestination: false });
  const jsm = await jetstreamManager(r.ncb);
  await jsm.streams.add({ name: r.dst, subjects: [`${r.src}.>`], allow_msg_counter: true } as Partial<StreamConfig> & { name: string });
  await publishMany(r.nca, 1, () => ({ subject: `${r.src}.x`, headers: { "Nats-Msg-Id": "m" } }));
  const { relay } = await startRelay(t, r.yaml(), "b", { http: true });
  await check(() => link(relay).state === "failed", { name: "the link fails", timeoutMs: 15_000 });
  assert.equal(link(relay).lastError?.code, "DESTINATION_UNSUPPORTED");
  assert.match(link(relay).lastError?.message ?? "", /counter stream \(allow_msg_counter\).*server sourcing/);
});
