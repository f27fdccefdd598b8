import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { createDurable } from "../../src/nats/durable-consumer.js";
import type { Relay } from "../../src/relay/relay.js";
import { verifyLink } from "../../src/verify/verify.js";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { readStream, streamCount } from "../helpers/streams.js";

/**
 * The link's continuous audit (src/audit) against real servers: losses made behind the relay's back
 * (a message deleted from the destination, a subject purged, the relay's consumer placed past messages
 * by an operator) are found with their source sequences and ids; `auto` puts them back; the audit's
 * position and last finding survive a restart. Every other test of the suite runs its links with a
 * short audit.after and fails on any loss the audit reports (test/helpers/relays.ts).
 */

const LINK = { link: "a-to-b" };

function auditOf(relay: Relay) {
  return relay.status().links.find((l) => l.name === "a-to-b")?.audit;
}

/** Deletes the destination copies of `ids` (the message API, as an operator would); returns their source seqs. */
async function deleteCopies(nc: NatsConnection, stream: string, ids: readonly string[]): Promise<number[]> {
  const jsm = await jetstreamManager(nc);
  const copies = (await readStream(nc, stream)).filter((m) => ids.includes(m.headers["Nats-Msg-Id"] ?? ""));
  assert.equal(copies.length, ids.length, "each copy to delete is in the destination");
  for (const c of copies) assert.ok(await jsm.streams.deleteMessage(stream, c.seq));
  return copies.map((c) => Number((c.headers["Relay-Source"] ?? "").split(" ")[2])).sort((x, y) => x - y);
}

test("messages deleted from the destination before their range settles are found by the next pass, with source seqs and ids; report puts nothing back", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const ids = await publishIds(nca, src, "m", 50);
  const { relay, logs } = await startRelay(t, yaml("    audit: { after: 3s }\n"), "b", { auditLoss: true });
  await waitForCount(ncb, dst, 50, 20_000, "relayed");
  const seqs = await deleteCopies(ncb, dst, [ids[10]!, ids[33]!]);

  await check(async () => (await metricValue(relay, "relay_audit_missing_total", LINK)) === 2, { timeoutMs: 20_000, name: "the audit reports the 2 deleted copies missing" });
  const finding = auditOf(relay)?.lastFinding;
  assert.equal(finding?.kind, "missing");
  assert.deepEqual(finding?.sourceSeqs, seqs);
  assert.deepEqual([...(finding?.ids ?? [])].sort(), [ids[10], ids[33]].sort());
  const line = logs.lines.find((l) => l.includes("audit found messages missing from the destination"));
  assert.ok(line, "the loss is logged");
  assert.match(line, new RegExp(`"sourceSeqs":\\[${seqs.join(",")}\\]`));
  assert.equal(await metricValue(relay, "relay_audit_checked_total", LINK), 50);
  assert.equal(await metricValue(relay, "relay_audit_repaired_total", LINK), 0);
  assert.equal(await streamCount(ncb, dst), 48, "report mode puts nothing back");

  // What the link relays later is judged once more, and clean: the loss is not reported again.
  const more = await publishIds(nca, src, "n", 10);
  await check(async () => (await metricValue(relay, "relay_audit_checked_total", LINK)) === 60, { timeoutMs: 20_000, name: "the next 10 judged" });
  assert.equal(await metricValue(relay, "relay_audit_missing_total", LINK), 2);
  assert.equal(more.length, 10);
});

test("audit.repair auto puts exactly the missing messages back through the guard, counted, and verify agrees afterwards", async (t) => {
  // A 1 s duplicate window: the server would otherwise still remember the deleted ids.
  const { src, dst, nca, ncb, servers, yaml } = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const redis = await servers.startRedis();
  const configText = yaml(`    audit: { after: 3s, repair: auto }\n    guard: { redis: { url: "${redis.url}" } }\n`);
  const ids = await publishIds(nca, src, "m", 40);
  const { relay, logs } = await startRelay(t, configText, "b", { auditLoss: true });
  await waitForCount(ncb, dst, 40, 20_000, "relayed");
  await deleteCopies(ncb, dst, [ids[5]!, ids[6]!, ids[39]!]);

  await check(async () => (await metricValue(relay, "relay_audit_repaired_total", LINK)) === 3, { timeoutMs: 25_000, name: "the 3 missing put back" });
  assert.equal(await metricValue(relay, "relay_audit_missing_total", LINK), 3);
  assert.equal(await streamCount(ncb, dst), 40);
  const back = (await readStream(ncb, dst)).filter((m) => m.headers["Relay-Repair"] === "true").map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(back.sort(), [ids[5], ids[6], ids[39]].sort());
  assert.ok(logs.lines.some((l) => l.includes("audit put missing messages back") && l.includes('"repaired":')));
  const report = await verifyLink(parseConfigText(configText, "test.yaml", process.env), "a-to-b");
  assert.equal(report.missing.count, 0);
  assert.equal(report.duplicated.count, 0);
});

test("a sweep finds what was lost after the first check (a deleted message, a purged subject)", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const ids = await publishIds(nca, src, "m", 30);
  const { relay, logs } = await startRelay(t, yaml("    audit: { after: 1s, sweepEvery: 8s }\n"), "b", { auditLoss: true });
  await waitForCount(ncb, dst, 30, 20_000, "relayed");
  await check(async () => (await metricValue(relay, "relay_audit_checked_total", LINK)) >= 30, { timeoutMs: 20_000, name: "the first range pass" });
  assert.equal(await metricValue(relay, "relay_audit_missing_total", LINK), 0, "nothing missing at the first check");
  // publishIds puts message i on `<src>.<i % 5>`: the purge takes the 6 copies of subject .3.
  await deleteCopies(ncb, dst, [ids[1]!]);
  const jsm = await jetstreamManager(ncb);
  const purged = await jsm.streams.purge(dst, { filter: `${src}.3` });
  assert.equal(purged.purged, 6);

  await check(async () => (await metricValue(relay, "relay_audit_missing_total", LINK)) === 7, { timeoutMs: 30_000, name: "the sweep reports the 7 lost copies" });
  assert.equal(auditOf(relay)?.lastFinding?.pass, "sweep");
  assert.ok(await metricValue(relay, "relay_audit_passes_total", { link: "a-to-b", kind: "sweep", outcome: "findings" }) >= 1);
  assert.ok(logs.lines.some((l) => l.includes("audit sweep starts")));
});

test("the audit's position and last finding survive a restart; a consumer an operator placed past messages makes the audit report them", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const configText = yaml("    audit: { after: 1s }\n");
  await publishIds(nca, src, "m", 20);
  const first = await startRelay(t, configText, "b");
  await waitForCount(ncb, dst, 20, 20_000, "relayed");
  await check(async () => (await metricValue(first.relay, "relay_audit_checked_total", LINK)) === 20, { timeoutMs: 20_000, name: "the first 20 judged" });
  await first.relay.stop(AbortSignal.timeout(5_000));

  // An operator re-creates the relay's consumer past source seqs 21..30 while it is down.
  await publishIds(nca, src, "n", 20);
  const link = parseConfigText(configText, "test.yaml", process.env).links[0]!;
  await createDurable(await jetstreamManager(nca), link, 31, true);

  const second = await startRelay(t, configText, "b", { auditLoss: true });
  // The stored position: the new process goes on after source seq 20 (it judges 20 more, not 40).
  await check(() => auditOf(second.relay)?.judgedSeq === 20 || auditOf(second.relay)?.judgedSeq === 40, { timeoutMs: 20_000, name: "the stored audit position loaded" });
  await waitForCount(ncb, dst, 30, 20_000, "31..40 relayed");
  await check(async () => (await metricValue(second.relay, "relay_audit_missing_total", LINK)) === 10, { timeoutMs: 20_000, name: "the 10 skipped messages reported" });
  assert.equal(await metricValue(second.relay, "relay_audit_checked_total", LINK), 20);
  assert.deepEqual(auditOf(second.relay)?.lastFinding?.sourceSeqs, [21, 22, 23, 24, 25, 26, 27, 28, 29, 30]);
  assert.equal(auditOf(second.relay)?.totals.missing, 10);
  await second.relay.stop(AbortSignal.timeout(5_000));

  // A third process reads the finding from the group bucket before any pass of its own.
  const third = await startRelay(t, configText, "b", { auditLoss: true });
  const audit = await check(() => auditOf(third.relay), { timeoutMs: 20_000, name: "the audit state loaded" });
  assert.equal(audit.lastFinding?.kind, "missing");
  assert.deepEqual(audit.lastFinding?.sourceSeqs, [21, 22, 23, 24, 25, 26, 27, 28, 29, 30]);
  assert.equal(audit.totals.checked, 40);
});

test("a link relaying faster than audit.maxReadRate is sampled: the skipped seqs are logged and counted in the coverage, and nothing is called missing", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  // 150 reads a second, 10 s after: a pass may read 1,500. The first pass reads batch 0 (its sample
  // settles first, alone); by its end the samples of batches 1 and 2 have settled: 2,000 to read.
  const { relay, logs } = await startRelay(t, yaml("    audit: { after: 10s, maxReadRate: 150/s }\n"), "b");
  await check(() => auditOf(relay), { timeoutMs: 20_000, name: "the audit's first sample (the link works)" });
  for (let batch = 0; batch < 3; batch++) {
    await publishIds(nca, src, `b${batch}`, 1_000);
    await waitForCount(ncb, dst, 1_000 * (batch + 1), 20_000, `batch ${batch} relayed`);
    // One sample of the link's position before the relay starts moving, and one after each batch.
    await check(() => (auditOf(relay)?.pendingSamples ?? 0) >= batch + 2, { timeoutMs: 5_000, name: `a sample after batch ${batch}` });
  }
  await check(async () => (await metricValue(relay, "relay_audit_passes_total", { link: "a-to-b", kind: "range", outcome: "sampled" })) >= 1, { timeoutMs: 40_000, name: "a pass over the budget samples" });
  await check(() => (auditOf(relay)?.judgedSeq ?? 0) >= 3_000 && auditOf(relay)?.pendingSamples === 1, { timeoutMs: 40_000, name: "the audit reaches the end" });
  const audit = auditOf(relay)!;
  assert.ok(audit.coverage > 0 && audit.coverage < 1, `coverage ${audit.coverage}`);
  assert.equal((await metricValue(relay, "relay_audit_coverage_ratio", LINK)).toFixed(3), audit.coverage.toFixed(3));
  assert.ok(audit.totals.checked > 0 && audit.totals.checked < 3_000, `checked ${audit.totals.checked}`);
  assert.ok(logs.lines.some((l) => l.includes("audit is over its read budget")));
  assert.equal(await metricValue(relay, "relay_audit_missing_total", LINK), 0);
});

test("a handover: the new owner of the link goes on from the audit position the old one stored, and only the owner audits", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const configText = yaml("    audit: { after: 1s }\n");
  const first = await startRelay(t, configText, "b");
  await check(() => first.relay.status().links[0]?.state === "live", { name: "first relay owns the link", timeoutMs: 20_000 });
  const second = await startRelay(t, configText, "b");
  await check(() => second.relay.status().links[0]?.state === "standby", { name: "second relay stands by", timeoutMs: 20_000 });
  await publishIds(nca, src, "m", 300);
  await waitForCount(ncb, dst, 300, 20_000, "relayed by the first");
  await check(async () => (await metricValue(first.relay, "relay_audit_checked_total", LINK)) === 300, { timeoutMs: 20_000, name: "the owner judged the 300" });
  assert.equal(await metricValue(second.relay, "relay_audit_checked_total", LINK), 0, "the standby audits nothing");
  assert.equal(auditOf(second.relay), undefined);

  await first.relay.stop(AbortSignal.timeout(10_000));
  await check(() => second.relay.status().links[0]?.state === "live", { name: "second relay took over", timeoutMs: 10_000 });
  await publishIds(nca, src, "n", 200);
  await waitForCount(ncb, dst, 500, 20_000, "relayed by the second");
  await check(async () => (await metricValue(second.relay, "relay_audit_checked_total", LINK)) === 200, { timeoutMs: 20_000, name: "the new owner judged the 200 after the stored position" });
  assert.equal(auditOf(second.relay)?.totals.checked, 500, "the totals go on from the stored state");
  assert.equal(await metricValue(second.relay, "relay_audit_missing_total", LINK), 0);
});

test("a link that starts at a source sequence is audited from there: neither range passes nor sweeps judge what it was never to relay", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  await publishIds(nca, src, "m", 20);
  const { relay } = await startRelay(t, yaml("    startAt: { seq: 11 }\n    audit: { after: 1s, sweepEvery: 3s }\n"), "b");
  await waitForCount(ncb, dst, 10, 20_000, "11..20 relayed");
  await check(async () => (await metricValue(relay, "relay_audit_passes_total", { link: "a-to-b", kind: "sweep", outcome: "clean" })) >= 1, { timeoutMs: 20_000, name: "a clean sweep" });
  assert.equal(await metricValue(relay, "relay_audit_missing_total", LINK), 0);
  assert.ok((await metricValue(relay, "relay_audit_checked_total", LINK)) >= 20, "the range pass judged 11..20 and the sweep again");
  assert.equal(auditOf(relay)?.judgedSeq, 20);
});
