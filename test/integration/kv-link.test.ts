/**
 * KV links (issue 40, docs/kv.md): buckets in two regions written in both, with links both ways,
 * converge by last writer wins on the write's version. A remote write is applied only when newer than
 * what the bucket holds, checked and written in one step (`Nats-Expected-Last-Subject-Sequence`): a
 * local write that lands between the relay's read and its publish (a proxy holds the publish) is never
 * overwritten. Deletes and purges converge the same way; a bucket with history keeps the winner last;
 * a relayed write never comes back.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { check, uniqueName } from "../helpers/check.js";
import { converged, history, kvRegions as regions, kvYaml, latest, newestOf } from "../helpers/kv.js";
import type { Region } from "../helpers/kv.js";
import { startPubDropProxy } from "../helpers/pub-drop-proxy.js";
import { TEST_GROUP } from "../helpers/scenario.js";
import { createStream, readStream } from "../helpers/streams.js";
import { jetstream } from "@nats-io/jetstream";
import { headers } from "@nats-io/nats-core";
import { metricValue, startRelay } from "../helpers/relays.js";

test("KV link: two regions writing overlapping keys converge by last writer wins; a relayed write never comes back", { timeout: 120_000 }, async (t) => {
  const bucket = uniqueName("cfg").replace(/[^-\w]/g, "_");
  const [a, b] = await regions(t, ["a", "b"], bucket, 64);
  assert.ok(a && b);
  const yaml = kvYaml([a, b], [["a", "b"], ["b", "a"]], bucket);
  // A purge rolls the source's older writes of its key up (and history drops the oldest): a write
  // superseded that way before it was relayed is counted as superseded, never reported as a gap.
  const ra = await startRelay(t, yaml, "a");
  const rb = await startRelay(t, yaml, "b");
  const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
  // Writers in both regions on the same keys, interleaved: puts, some deletes, one purge each.
  for (let round = 0; round < 12; round++) {
    await Promise.all(
      [a, b].map(async (r) => {
        for (const key of keys) {
          const pick = (round * 7 + key.length + Number(key.slice(1)) + (r.name === "a" ? 0 : 3)) % 11;
          if (pick === 0) await r.kv.delete(key);
          else await r.kv.put(key, `${r.name}-${round}-${key}`);
        }
      }),
    );
  }
  await a.kv.purge("k1");
  await b.kv.purge("k2");
  await check(async () => converged([a, b], bucket, keys), {
    name: "both buckets hold the same latest write (value, operation and version) of every key",
    timeoutMs: 60_000,
    intervalMs: 250,
  });
  // Last writer wins: what both hold is the newest write either region stored for the key.
  const histories = await Promise.all([a, b].map((r) => history(r, bucket)));
  for (const key of keys) {
    const got = await latest(a, bucket, key);
    assert.equal(got?.version, newestOf(histories, `$KV.${bucket}.${key}`), `key ${key}: the newest write wins`);
  }
  // Loop prevention: a bucket holds relayed copies only of the other region's writes.
  for (const [r, h] of [[a, histories[0]], [b, histories[1]]] as const) {
    const back = (h ?? []).filter((m) => m.origin === r.name);
    assert.equal(back.length, 0, `no write of region ${r.name} came back to it`);
  }
  assert.ok((await metricValue(ra.relay, "relay_messages_total", { outcome: "loop" })) + (await metricValue(rb.relay, "relay_messages_total", { outcome: "loop" })) > 0, "relayed writes were seen and dropped as loops");
  // The purges carried their rollup: the purged key's history is the purge alone.
  for (const [r, h] of [[a, histories[0]], [b, histories[1]]] as const) {
    for (const key of ["k1", "k2"]) {
      const last = await latest(r, bucket, key);
      if (last?.op !== "PURGE") continue;
      const left = (h ?? []).filter((m) => m.subject === `$KV.${bucket}.${key}` && m.version !== last.version);
      const after = (await history(r, bucket)).filter((m) => m.subject === `$KV.${bucket}.${key}`);
      assert.equal(after.length, 1, `region ${r.name} key ${key}: only the purge is left (found ${after.length}, ${left.length} before)`);
    }
  }
});

test("KV link: a local write between the relay's read and its publish is never overwritten (the publish is held)", { timeout: 60_000 }, async (t) => {
  const bucket = uniqueName("hold").replace(/[^-\w]/g, "_");
  const [a, b] = await regions(t, ["a", "b"], bucket, 5);
  assert.ok(a && b);
  const proxy = await startPubDropProxy(t, b.port);
  const hold = proxy.holdPublish(`HPUB $KV.${bucket}.k `);
  const yaml = kvYaml([a, { name: "b", url: proxy.url }], [["a", "b"]], bucket);
  await a.kv.put("k", "remote");
  const { relay } = await startRelay(t, yaml, "b");
  await hold.held; // the relay read the key (absent) and published with expected last subject seq 0
  await b.kv.put("k", "local"); // newer: written after the remote write, on the same clock
  hold.release();
  await check(async () => (await metricValue(relay, "relay_kv_conflicts_total", { outcome: "remote_older" })) === 1, {
    name: "the remote write, decided again after the refusal, is a counted conflict",
    timeoutMs: 20_000,
  });
  assert.equal(await metricValue(relay, "relay_kv_conflicts_total", { outcome: "local_write_between" }), 1);
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "relayed" }), 0);
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "stale" }), 1);
  assert.equal(await metricValue(relay, "relay_corrections_total", { kind: "kv_conflict" }), 1);
  const got = await b.kv.get("k");
  assert.equal(got?.string(), "local", "the local write stays");
  assert.equal((await history(b, bucket)).length, 1, "nothing else was stored");
});

test("KV link: deletes, purges and older writes converge; a bucket with history keeps the winner last", { timeout: 90_000 }, async (t) => {
  const bucket = uniqueName("tomb").replace(/[^-\w]/g, "_");
  const [a, b] = await regions(t, ["a", "b"], bucket, 5);
  assert.ok(a && b);
  // Written before any relay runs, each later write in the other region: every key has a conflict.
  await a.kv.put("del", "a-1");
  await b.kv.delete("del"); // newer tombstone in b
  await b.kv.put("purged", "b-1");
  await b.kv.put("purged", "b-2");
  await a.kv.purge("purged"); // newer purge in a: rolls b's history up when it wins there
  await a.kv.put("hist", "a-old");
  await b.kv.put("hist", "b-new"); // newer in b
  await b.kv.put("revived", "b-old");
  await a.kv.delete("revived");
  await a.kv.put("revived", "a-new"); // newest in a, after a tombstone of its own
  const yaml = kvYaml([a, b], [["a", "b"], ["b", "a"]], bucket);
  const ra = await startRelay(t, yaml, "a");
  const rb = await startRelay(t, yaml, "b");
  const keys = ["del", "purged", "hist", "revived"];
  await check(async () => converged([a, b], bucket, keys), {
    name: "both buckets hold the same latest write of every key",
    timeoutMs: 30_000,
    intervalMs: 250,
  });
  assert.equal((await latest(a, bucket, "del"))?.op, "DEL");
  assert.equal((await latest(a, bucket, "purged"))?.op, "PURGE");
  assert.equal((await latest(b, bucket, "hist"))?.value, "b-new");
  assert.equal((await latest(b, bucket, "revived"))?.value, "a-new");
  // The purge won in b: its rollup left the purge alone there.
  const inB = (await history(b, bucket)).filter((m) => m.subject === `$KV.${bucket}.purged`);
  assert.deepEqual(inB.map((m) => m.op), ["PURGE"]);
  // History > 1: a keeps its older write of "hist" before the winner, the winner last.
  const histA = (await history(a, bucket)).filter((m) => m.subject === `$KV.${bucket}.hist`);
  assert.equal(histA.length, 2);
  const kvA = await a.kv.history({ key: "hist" });
  const values: string[] = [];
  for await (const e of kvA) values.push(e.string());
  assert.deepEqual(values, ["a-old", "b-new"], "the winner is last in a's history");
  // Each older remote write was a counted conflict, never applied.
  const conflicts = (await metricValue(ra.relay, "relay_kv_conflicts_total", { outcome: "remote_older" })) + (await metricValue(rb.relay, "relay_kv_conflicts_total", { outcome: "remote_older" }));
  assert.ok(conflicts >= 4, `older remote writes were counted as conflicts (${conflicts})`);
  const histB = (await history(b, bucket)).filter((m) => m.subject === `$KV.${bucket}.hist`);
  assert.deepEqual(histB.map((m) => m.origin), [""], "b never stored a's older write of hist");
});

test("KV link: three regions in a mesh of the bucket, writers in every region on overlapping keys, converge", { timeout: 120_000 }, async (t) => {
  const bucket = uniqueName("mesh").replace(/[^-\w]/g, "_");
  const all = await regions(t, ["a", "b", "c"], bucket, 16);
  // The links come from a mesh of the bucket: one per ordered pair of regions.
  const yaml = `regions:\n${all.map((r) => `  ${r.name}: { servers: ["${r.url}"] }`).join("\n")}
meshes:
  - name: kv
    regions: [a, b, c]
    buckets: [${bucket}]
    link: { ackWait: 5s, publishTimeout: 2s }
log: { level: info }
${TEST_GROUP}
shutdown: { grace: 10s }
`;
  const relays = [];
  for (const r of all) relays.push(await startRelay(t, yaml, r.name));
  const keys = Array.from({ length: 6 }, (_, i) => `k${i}`);
  for (let round = 0; round < 8; round++) {
    await Promise.all(
      all.map(async (r, ri) => {
        for (const key of keys) {
          if ((round + ri + Number(key.slice(1))) % 7 === 0) await r.kv.delete(key);
          else await r.kv.put(key, `${r.name}-${round}-${key}`);
        }
      }),
    );
  }
  await check(async () => converged(all, bucket, keys), {
    name: "all three buckets hold the same latest write of every key",
    timeoutMs: 60_000,
    intervalMs: 250,
  });
  const histories = await Promise.all(all.map((r) => history(r, bucket)));
  for (const key of keys) {
    const got = await latest(all[0] as Region, bucket, key);
    assert.equal(got?.version, newestOf(histories, `$KV.${bucket}.${key}`), `key ${key}: the newest write wins`);
  }
  all.forEach((r, i) => {
    const back = (histories[i] ?? []).filter((m) => m.origin === r.name);
    assert.equal(back.length, 0, `no write of region ${r.name} came back to it`);
  });
});

test("KV link: a writer-supplied KV-Version wins over store times; an unreadable one is dead-lettered with the reason; writes the bucket dropped are superseded, not gaps", { timeout: 60_000 }, async (t) => {
  const bucket = uniqueName("ver").replace(/[^-\w]/g, "_");
  const [a, b] = await regions(t, ["a", "b"], bucket, 5);
  assert.ok(a && b);
  await createStream(b.nc, { name: "RELAY_DLQ", subjects: ["relay.dlq.>"] });
  const put = async (r: Region, key: string, value: string, version?: string) => {
    const h = headers();
    if (version !== undefined) h.set("KV-Version", version);
    await jetstream(r.nc).publish(`$KV.${bucket}.${key}`, value, { headers: h });
  };
  // Eight writes of one key in a bucket that keeps five, after another key's: the first three are gone
  // before any relay runs, a hole in the stream behind the first write.
  await a.kv.put("first", "f");
  for (let i = 0; i < 8; i++) await a.kv.put("churn", `c${i}`);
  // a's write supplies a version far ahead of any clock: b's later write, judged by its store time, is older.
  await put(a, "pinned", "a-writer", "9000000000000000000");
  await put(b, "pinned", "b-later");
  // A version that is not a number: a bad message, never compared.
  await put(a, "bad", "a-bad", "tomorrow");
  await put(a, "after", "a-after");
  const yaml = kvYaml([a, b], [["a", "b"], ["b", "a"]], bucket);
  const rb = await startRelay(t, yaml, "b");
  const ra = await startRelay(t, yaml, "a");
  await check(async () => converged([a, b], bucket, ["pinned"]), { name: "both buckets agree on pinned", timeoutMs: 20_000, intervalMs: 200 });
  assert.equal((await latest(b, bucket, "pinned"))?.value, "a-writer", "the writer's version wins over b's later store time");
  assert.equal((await latest(b, bucket, "pinned"))?.version, "9000000000000000000 a");
  await check(async () => (await latest(b, bucket, "after"))?.value === "a-after", { name: "the write after the bad one is relayed", timeoutMs: 20_000 });
  assert.equal(await latest(b, bucket, "bad"), undefined, "the bad write is not in the bucket");
  assert.equal(await metricValue(rb.relay, "relay_messages_total", { link: "a-to-b", outcome: "dead_lettered" }), 1);
  const parked = await readStream(b.nc, "RELAY_DLQ");
  assert.equal(parked.length, 1);
  assert.match(parked[0]?.headers["Relay-Dead-Letter-Reason"] ?? "", /KV-Version "tomorrow" is not a decimal integer/);
  // Both buckets agree once a's write reached b: the b-to-a link may still be waiting for its lease
  // (the group bucket's hold-off), and b's write is judged in a when it runs.
  await check(async () => (await metricValue(ra.relay, "relay_kv_conflicts_total", { link: "b-to-a", outcome: "remote_older" })) === 1, {
    name: "b's write of pinned lost in a (a remote_older conflict of the b-to-a link)",
    timeoutMs: 20_000,
  });
  assert.equal((await latest(a, bucket, "pinned"))?.value, "a-writer", "a keeps its writer's version");
  // The writes the source bucket dropped are superseded, not a gap (the relay's logs hold no gap: startRelay checks).
  await check(async () => (await latest(b, bucket, "churn"))?.value === "c7", { name: "the key's latest write is relayed", timeoutMs: 20_000 });
  assert.equal(await metricValue(rb.relay, "relay_kv_superseded_total", { link: "a-to-b" }), 3);
  assert.equal(await metricValue(rb.relay, "relay_gap_messages_total", { link: "a-to-b" }), 0);
});
