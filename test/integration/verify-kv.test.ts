import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers as createHeaders } from "@nats-io/nats-core";
import { loadConfig } from "../../src/config/load.js";
import type { RelayConfig } from "../../src/config/types.js";
import type { KvDifference } from "../../src/verify/kv-compare.js";
import { putBackKv, repairKvLink } from "../../src/verify/kv-repair.js";
import type { KvVerifyReport } from "../../src/verify/kv-report.js";
import type { KvSide } from "../../src/verify/kv-verify.js";
import { verifyKvLink, verifyKvSides } from "../../src/verify/kv-verify.js";
import { readStream, readStreamInfo } from "../../src/nats/stream-reader.js";
import { uniqueName } from "../helpers/check.js";
import { RelayProcess, writeConfig } from "../helpers/relays.js";
import { connectTo } from "../helpers/streams.js";
import { withServers } from "../helpers/servers.js";
import type { HasAfter } from "../helpers/servers.js";

/**
 * `verify --kv` and `repair --kv` against two real nats-servers, one bucket in each (created by the KV
 * client), made to diverge by writes with chosen version headers: verify must find exactly the keys that
 * differ, and how; repair must put each winner on the other side without overwriting a write that
 * lands between its read and its write; verify must then agree.
 */

interface Buckets {
  readonly nca: NatsConnection;
  readonly ncb: NatsConnection;
  readonly kva: KV;
  readonly kvb: KV;
  readonly sides: { readonly from: KvSide; readonly to: KvSide };
  readonly urls: { readonly a: string; readonly b: string };
}

async function twoBuckets(t: HasAfter): Promise<Buckets> {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  const fromBucket = uniqueName("cfg_a");
  const toBucket = uniqueName("cfg_b");
  const kva = await new Kvm(nca).create(fromBucket, { history: 5 });
  const kvb = await new Kvm(ncb).create(toBucket, { history: 5 });
  return {
    nca,
    ncb,
    kva,
    kvb,
    sides: {
      from: { nc: nca, region: "a", stream: `KV_${fromBucket}`, bucket: fromBucket },
      to: { nc: ncb, region: "b", stream: `KV_${toBucket}`, bucket: toBucket },
    },
    urls: { a: a.url, b: b.url },
  };
}

/** A write straight into the bucket's stream, with the version headers a test chooses. */
async function write(
  side: KvSide,
  key: string,
  value: string,
  h: { version?: string; writer?: string; op?: "DEL" | "PURGE" } = {},
): Promise<number> {
  const hdrs = createHeaders();
  if (h.version) hdrs.set("Relay-KV-Version", h.version);
  if (h.writer) hdrs.set("KV-Version", h.writer);
  if (h.op) hdrs.set("KV-Operation", h.op);
  if (h.op === "PURGE") hdrs.set("Nats-Rollup", "sub");
  const ack = await jetstream(side.nc).publish(`$KV.${side.bucket}.${key}`, new TextEncoder().encode(value), { headers: hdrs });
  return ack.seq;
}

/** What the comparison says per key: kind, winner and tombstone-vs-value, keys sorted. */
function shape(differences: readonly KvDifference[]) {
  return differences.map((d) => `${d.key} ${d.kind} ${d.winner ?? "-"}${d.tombstoneVsValue ? " tvv" : ""}`);
}

/** The divergences every test starts from; returns the keys by what they are. */
async function diverge(s: Buckets): Promise<void> {
  const { from, to } = s.sides;
  // The same write on both sides: a value, and a tombstone.
  await write(from, "same", "v1", { version: "1000 a" });
  await write(to, "same", "v1", { version: "1000 a" });
  await write(from, "same-del", "", { version: "1100 a", op: "DEL" });
  await write(to, "same-del", "", { version: "1100 a", op: "DEL" });
  // Missing on one side: a local value in a (its store time is its version), a tombstone only in b.
  await s.kva.put("only-a", "local");
  await s.kvb.delete("only-b-del");
  // Older on one side: a value newer in a; a value in a older than b's purge; a tie broken by region.
  await write(to, "older-b", "old", { version: "1500 a" });
  await write(from, "older-b", "new", { version: "2000 a" });
  await write(from, "purged-in-b", "stale-value", { version: "3000 a" });
  await write(to, "purged-in-b", "", { version: "3500 b", op: "PURGE" });
  await write(from, "tie", "x", { version: "4000 a" });
  await write(to, "tie", "y", { version: "4000 b" });
  // A writer's own version beats a carried older one.
  await write(from, "writer", "w2", { writer: "5000" });
  await write(to, "writer", "w1", { version: "4500 a" });
  // The same version, different values: corrupt, no winner.
  await write(from, "conflict", "conflict-value-1", { version: "6000 a" });
  await write(to, "conflict", "conflict-value-2", { version: "6000 a" });
  // A malformed version on one side: not compared.
  await write(from, "bad-version", "b", { version: "soon" });
  await write(to, "bad-version", "b", { version: "7000 a" });
}

const DIVERGED = [
  "bad-version unreadable -",
  "conflict conflict -",
  "older-b older from",
  "only-a missing from",
  "only-b-del missing to",
  "purged-in-b older to tvv",
  "tie older to",
  "writer older from",
];

test("verify --kv finds exactly the keys that differ, and how; repair --kv puts each winner back, and verify then agrees", async (t) => {
  const s = await twoBuckets(t);
  await diverge(s);

  const { report, comparison } = await verifyKvSides("kv-a-b", s.sides);
  assert.deepEqual(shape(comparison.differences), DIVERGED);
  assert.equal(report.agree, false);
  assert.equal(report.keys, 10);
  assert.equal(report.same, 2);
  assert.deepEqual(report.differences.byKind, { missing: 2, older: 4, conflict: 1, unreadable: 1 });
  assert.deepEqual(report.differences.newerOn, { from: 3, to: 3 });
  assert.equal(report.differences.tombstoneVsValue, 1);
  assert.deepEqual({ values: report.from.values, tombstones: report.from.tombstones }, { values: 8, tombstones: 1 });
  assert.deepEqual({ values: report.to.values, tombstones: report.to.tombstones }, { values: 6, tombstones: 3 });
  const writer = comparison.differences.find((d) => d.key === "writer");
  assert.equal(writer?.from?.version, "5000 a", "a writer's KV-Version, in the region of its bucket");
  const conflict = comparison.differences.find((d) => d.key === "conflict");
  assert.notEqual(conflict?.from?.digest, conflict?.to?.digest);
  assert.ok(!/conflict-value|stale-value/.test(JSON.stringify(report)), "no value in the report");

  const items = await putBackKv("kv-a-b", s.sides, comparison.differences);
  assert.deepEqual(
    items.map((i) => `${i.key} ${i.outcome ?? "-"}`),
    ["bad-version undecided", "conflict undecided", "older-b repaired", "only-a repaired", "only-b-del repaired", "purged-in-b repaired", "tie repaired", "writer repaired"],
  );

  // What was put back: the winner's value, version and operation.
  assert.equal((await s.kvb.get("older-b"))?.string(), "new");
  assert.equal((await s.kva.get("tie"))?.string(), "y");
  assert.equal((await s.kva.get("only-b-del"))?.operation, "DEL");
  const purged = await s.kva.get("purged-in-b");
  assert.equal(purged?.operation, "PURGE");
  // The purge rolled up the key in a: its older value is gone from the stream.
  const subject = `$KV.${s.sides.from.bucket}.purged-in-b`;
  const info = await (await jetstreamManager(s.nca)).streams.info(s.sides.from.stream, { subjects_filter: subject });
  assert.deepEqual(info.state.subjects, { [subject]: 1 });
  const onlyA = await jetstreamManager(s.ncb).then((m) => m.streams.getMessage(s.sides.to.stream, { last_by_subj: `$KV.${s.sides.to.bucket}.only-a` }));
  assert.equal(onlyA?.header.get("Relay-Origin"), "a");
  assert.equal(onlyA?.header.get("Relay-Path"), "a");
  assert.equal(onlyA?.header.get("Relay-Repair"), "true");
  assert.match(onlyA?.header.get("Relay-KV-Version") ?? "", /^\d{19} a$/, "a local write's version (its store time in a) travels with the copy");

  const after = await verifyKvSides("kv-a-b", s.sides);
  assert.deepEqual(
    shape(after.comparison.differences),
    ["bad-version unreadable -", "conflict conflict -"],
    "only the keys without a winner are left",
  );

  // New writes settle them (newer than both sides); repair carries them over; then the buckets agree.
  await s.kva.put("conflict", "settled");
  await s.kva.put("bad-version", "settled");
  const second = await verifyKvSides("kv-a-b", s.sides);
  assert.deepEqual(shape(second.comparison.differences), ["bad-version older from", "conflict older from"]);
  assert.deepEqual(
    (await putBackKv("kv-a-b", s.sides, second.comparison.differences)).map((i) => i.outcome),
    ["repaired", "repaired"],
  );
  const final = await verifyKvSides("kv-a-b", s.sides);
  assert.equal(final.report.agree, true, JSON.stringify(final.report.differences));
  assert.equal(final.report.same, 10);
});

test("repair --kv never overwrites a write that lands between its read and its write: the key is reported changed", async (t) => {
  const s = await twoBuckets(t);
  await diverge(s);
  const { comparison } = await verifyKvSides("kv-a-b", s.sides);
  assert.deepEqual(shape(comparison.differences), DIVERGED);

  // After the read, before the writes: a write on the side repair would write into (b for older-b, a
  // for tie, whose winner is b), and one on the winner's side (a for only-a).
  await s.kvb.put("older-b", "landed-in-b");
  await s.kva.put("only-a", "landed-in-a");
  await s.kva.put("tie", "landed-in-a");

  const items = await putBackKv("kv-a-b", s.sides, comparison.differences);
  const byKey = Object.fromEntries(items.map((i) => [i.key, i]));
  assert.equal(byKey["older-b"]?.outcome, "changed");
  assert.match(byKey["older-b"]?.detail ?? "", /a write landed on the key in b\/.* since the read/);
  assert.equal(byKey["only-a"]?.outcome, "changed");
  assert.match(byKey["only-a"]?.detail ?? "", /not the compared seq/);
  assert.equal(byKey["tie"]?.outcome, "changed");
  assert.equal(byKey["writer"]?.outcome, "repaired");
  // Nothing that landed was overwritten.
  assert.equal((await s.kvb.get("older-b"))?.string(), "landed-in-b");
  assert.equal((await s.kva.get("tie"))?.string(), "landed-in-a");
  assert.equal(await s.kvb.get("only-a"), null, "the stale winner was not copied");

  // The next round sees the new writes and converges them (the conflict aside).
  const again = await verifyKvSides("kv-a-b", s.sides);
  assert.deepEqual(shape(again.comparison.differences), ["bad-version unreadable -", "conflict conflict -", "older-b older to", "only-a missing from", "tie older from"]);
  assert.deepEqual(
    (await putBackKv("kv-a-b", s.sides, again.comparison.differences)).map((i) => i.outcome),
    ["undecided", "undecided", "repaired", "repaired", "repaired"],
  );
  assert.equal((await s.kva.get("older-b"))?.string(), "landed-in-b");
  assert.equal((await s.kvb.get("tie"))?.string(), "landed-in-a");
});

test("verify --kv and repair --kv from a config: the link's regions and buckets; --kv on a stream link is a usage error", async (t) => {
  const s = await twoBuckets(t);
  await diverge(s);
  const yaml = (link: string) => `regions:
  a: { servers: ["${s.urls.a}"] }
  b: { servers: ["${s.urls.b}"] }
links:
  - name: kv-a-b
${link}
`;
  const streamLink = await writeConfig(
    yaml(`    from: { region: a, stream: ${s.sides.from.stream} }\n    to: { region: b, stream: ${s.sides.to.stream} }`),
  );
  const config = await loadConfig(streamLink);
  // The KV link as the config compiles it (from.bucket/to.bucket; KV_<bucket> streams).
  const kvConfig: RelayConfig = {
    ...config,
    links: config.links.map((l) => ({
      ...l,
      from: { ...l.from, bucket: s.sides.from.bucket },
      to: { ...l.to, bucket: s.sides.to.bucket },
    })),
  };
  const report = await verifyKvLink(kvConfig, "kv-a-b");
  assert.equal(report.differences.count, DIVERGED.length);
  assert.deepEqual([report.from.region, report.from.bucket, report.to.region, report.to.bucket], ["a", s.sides.from.bucket, "b", s.sides.to.bucket]);
  const dry = await repairKvLink(kvConfig, "kv-a-b", { dryRun: true });
  assert.equal(dry.items.length, DIVERGED.length);
  assert.ok(dry.items.every((i) => i.outcome === undefined), "a dry run writes nothing");
  assert.equal((await verifyKvLink(kvConfig, "kv-a-b")).differences.count, DIVERGED.length);
  const repaired = await repairKvLink(kvConfig, "kv-a-b");
  assert.deepEqual(repaired.items.filter((i) => i.outcome !== "repaired").map((i) => i.key), ["bad-version", "conflict"]);
  assert.equal((await verifyKvLink(kvConfig, "kv-a-b")).differences.count, 2);

  const cli = async (args: readonly string[]) => {
    const p = new RelayProcess(args);
    return { code: await p.exited, out: p.stdout.join(""), err: p.stderr.join("") };
  };
  const [notKv, since, seqs] = await Promise.all([
    cli(["verify", "--config", streamLink, "--link", "kv-a-b", "--kv"]),
    cli(["verify", "--config", streamLink, "--link", "kv-a-b", "--kv", "--since", "1h"]),
    cli(["repair", "--config", streamLink, "--link", "kv-a-b", "--kv", "--from-seq", "3"]),
  ]);
  assert.equal(notKv.code, 2, notKv.err);
  assert.match(notKv.err, /verify --kv: link "kv-a-b" is not a KV link/);
  assert.equal(since.code, 2);
  assert.match(since.err, /--since does not apply/);
  assert.equal(seqs.code, 2);
  assert.match(seqs.err, /--from-seq and --to-seq do not apply/);

  // The CLI end to end on a KV link in the config.
  const kvLink = await writeConfig(
    yaml(`    from: { region: a, bucket: ${s.sides.from.bucket} }\n    to: { region: b, bucket: ${s.sides.to.bucket} }`),
  );
  await loadConfig(kvLink);
  const listed = await cli(["check", "--config", kvLink]);
  assert.equal(listed.code, 0, listed.err);
  assert.match(listed.out, new RegExp(`kv-a-b: a/bucket ${s.sides.from.bucket} -> b/bucket ${s.sides.to.bucket} `), "check names a KV link's buckets");
  await s.kva.put("conflict", "settled");
  await s.kva.put("bad-version", "settled");
  const differ = await cli(["verify", "--config", kvLink, "--link", "kv-a-b", "--kv", "--json"]);
  assert.equal(differ.code, 1, differ.err);
  assert.deepEqual((JSON.parse(differ.out) as KvVerifyReport).differences.examples.map((d) => `${d.key} ${d.kind} ${d.winner}`), ["bad-version older from", "conflict older from"]);
  const plain = await cli(["verify", "--config", kvLink, "--link", "kv-a-b"]);
  assert.equal(plain.code, 2);
  assert.match(plain.err, /is a KV link: verify it with --kv/);
  const fix = await cli(["repair", "--config", kvLink, "--link", "kv-a-b", "--kv"]);
  assert.equal(fix.code, 0, fix.out + fix.err);
  assert.match(fix.out, /result: 2 repaired, 0 changed meanwhile, 0 undecided, 0 failed/);
  const agree = await cli(["verify", "--config", kvLink, "--link", "kv-a-b", "--kv"]);
  assert.equal(agree.code, 0, agree.out + agree.err);
  assert.match(agree.out, /result: AGREE/);
});

test("a last-per-subject read sees a key written after the stream's state was read: its new last message, not nothing", async (t) => {
  const s = await twoBuckets(t);
  const { from } = s.sides;
  await write(from, "k1", "one");
  await write(from, "k2", "two");
  const before = await readStreamInfo(from);
  const rewritten = await write(from, "k1", "one again"); // its earlier message is not the last any more
  const seen = new Map<string, number>();
  await readStream(from, { info: before, filterSubject: `$KV.${from.bucket}.>`, lastPerSubject: true, payloads: true }, (m, seq) => {
    seen.set(m.subject.slice(`$KV.${from.bucket}.`.length), seq);
    assert.ok(m.data.length > 0, "payloads are delivered");
  });
  assert.deepEqual(Object.fromEntries(seen), { k1: rewritten, k2: 2 });
});
