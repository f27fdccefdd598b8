import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { formatNanos } from "../../src/protocol/headers.js";
import { derivedId, legacyDerivedId } from "../../src/link/identity.js";
import { SourceIds } from "../../src/link/derived-ids.js";
import { formatReport } from "../../src/verify/report.js";
import type { VerifyReport } from "../../src/verify/report.js";
import { verifyLink } from "../../src/verify/verify.js";
import { check } from "../helpers/check.js";
import { startRelay } from "../helpers/relays.js";
import { twoRegions } from "../helpers/scenario.js";
import type { TwoRegions } from "../helpers/scenario.js";
import { publishMany, readStream, streamCount } from "../helpers/streams.js";

/** Source messages without Nats-Msg-Id: their ids are derived from region, stream, incarnation and seq. */
async function publishAnonymous(nc: NatsConnection, subject: string, count: number): Promise<void> {
  await publishMany(nc, count, () => ({ subject }), 1);
}

async function incarnationOf(nc: NatsConnection, stream: string): Promise<number> {
  return Date.parse((await (await jetstreamManager(nc)).streams.info(stream)).created);
}

/** The source message's store time as a relay writes Relay-Source-Time. */
async function sourceTime(r: TwoRegions, seq: number): Promise<string> {
  const sm = await (await jetstreamManager(r.nca)).streams.getMessage(r.src, { seq });
  assert.ok(sm, `source seq ${seq} is stored`);
  return formatNanos(BigInt(sm.time.getTime()) * 1_000_000n);
}

/**
 * Stores in the destination, one at a time and in order, the copy of source message `seq` a relay from
 * before incarnations wrote: the old-form derived id, and the relay's headers.
 */
async function publishLegacyCopies(r: TwoRegions, seqs: readonly number[], time?: (seq: number) => Promise<string>): Promise<void> {
  for (const seq of seqs) {
    const headers = {
      "Nats-Msg-Id": derivedId("a", r.src, seq),
      "Relay-Origin": "a",
      "Relay-Path": "a",
      "Relay-Source": `a ${r.src} ${seq}`,
      "Relay-Source-Time": await (time ?? ((s) => sourceTime(r, s)))(seq),
    };
    await publishMany(r.ncb, 1, () => ({ subject: `${r.src}.x`, headers }), 1);
  }
}

function verify(r: TwoRegions): Promise<VerifyReport> {
  return verifyLink(parseConfigText(r.yaml(), "verify-ids.yaml"), "a-to-b");
}

function summary(report: VerifyReport) {
  return {
    agree: report.agree,
    forwardable: report.source.forwardable,
    fromLink: report.destination.fromLink,
    horizon: report.destination.lastRelayedSourceSeq,
    legacyIds: report.destination.legacyIds,
    notYetRelayed: report.notYetRelayed.count,
    missing: report.missing.examples,
    duplicated: report.duplicated.examples,
  };
}

test("destination keys: old-form derived ids of this source's incarnation become the current form, nothing else changes", () => {
  const inc = Date.parse("2026-11-30T08:00:00.123Z");
  const ids = new SourceIds("a", "S", inc);
  const at = (time: string) => ({ get: (k: string) => (k === "Relay-Source-Time" ? time : "") });
  const current = derivedId("a", "S", 42, inc);
  assert.equal(ids.destinationKey("a:S:42", at("2026-11-30T08:00:05.000000000Z")), current);
  assert.equal(legacyDerivedId(current, "a", "S"), "a:S:42");
  assert.equal(ids.destinationKey("a:S:42", undefined), current, "no Relay-Source-Time: read as before incarnations");
  assert.equal(ids.destinationKey("a:S:42", at("not a time")), current);
  assert.equal(ids.destinationKey("a:S:42", at("2026-11-30T07:59:59.999999999Z")), "a:S:42", "made from an older incarnation");
  for (const other of [current, "a:S:042", "a:S:x", "a:S:", "a:T:42", "b:S:42", "order-42", "a:S:1:2:3"]) {
    assert.equal(ids.destinationKey(other, undefined), other);
  }
  assert.equal(ids.legacyIds, 3);
  assert.equal(new SourceIds("a", "S", undefined).destinationKey("a:S:42", undefined), "a:S:42", "no incarnation known");

  // The text fast path and the parsed comparison agree at the incarnation's millisecond.
  assert.equal(ids.olderIncarnation("2026-11-30T08:00:00.122999999Z"), true);
  assert.equal(ids.olderIncarnation("2026-11-30T08:00:00.123000000Z"), false);
  assert.equal(ids.olderIncarnation("2026-11-30T08:00:00.123000001Z"), false);
  assert.equal(ids.olderIncarnation("2026-11-30T08:00:00.123Z"), false);
  assert.equal(ids.olderIncarnation("2026-11-30T08:00:00.12Z"), true);
  assert.equal(ids.olderIncarnation("2025-01-01T00:00:00Z"), true);
  assert.equal(ids.olderIncarnation(""), false);
  assert.equal(ids.olderIncarnation("0000-garbage-that-is-thirty-c"), false);
});

test("a source without Nats-Msg-Id relayed by the relay verifies clean; a deleted copy is missing under its current id", async (t) => {
  const r = await twoRegions(t);
  await publishAnonymous(r.nca, `${r.src}.x`, 40);
  await startRelay(t, r.yaml(), "b");
  await check(async () => (await streamCount(r.ncb, r.dst)) === 40, { name: "40 relayed", timeoutMs: 30_000 });
  const inc = await incarnationOf(r.nca, r.src);
  const stored = (await readStream(r.ncb, r.dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(stored, Array.from({ length: 40 }, (_, i) => derivedId("a", r.src, i + 1, inc)), "the relay derives new-form ids");

  const ok = await verify(r);
  assert.deepEqual(summary(ok), { agree: true, forwardable: 40, fromLink: 40, horizon: 40, legacyIds: 0, notYetRelayed: 0, missing: [], duplicated: [] });
  assert.equal(ok.source.incarnation, inc);

  await (await jetstreamManager(r.ncb)).streams.deleteMessage(r.dst, 7);
  const bad = await verify(r);
  assert.equal(bad.agree, false);
  assert.equal(bad.missing.count, 1);
  assert.deepEqual(bad.missing.examples, [{ id: derivedId("a", r.src, 7, inc), sourceSeq: 7 }]);
});

test("copies an old relay stored with old-form ids count as the current ids: an upgraded relay's destination verifies clean", async (t) => {
  const r = await twoRegions(t);
  await publishAnonymous(r.nca, `${r.src}.x`, 30);
  // Before the upgrade: a relay without incarnations copied source seqs 1..12.
  await publishLegacyCopies(r, Array.from({ length: 12 }, (_, i) => i + 1));
  // The upgraded relay continues after the last Relay-Source marker, with new-form ids.
  await startRelay(t, r.yaml(), "b");
  await check(async () => (await streamCount(r.ncb, r.dst)) === 30, { name: "13..30 relayed after the 12 old copies", timeoutMs: 30_000 });
  const inc = await incarnationOf(r.nca, r.src);
  const stored = (await readStream(r.ncb, r.dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(stored.slice(11, 13), [`a:${r.src}:12`, derivedId("a", r.src, 13, inc)], "a mix of both forms");

  const ok = await verify(r);
  assert.deepEqual(summary(ok), { agree: true, forwardable: 30, fromLink: 30, horizon: 30, legacyIds: 12, notYetRelayed: 0, missing: [], duplicated: [] });
  assert.match(formatReport(ok), /last Relay-Source seq 30, 12 with ids derived before incarnations \(counted under their current form\)/);

  // A real gap among the old copies is still missing, reported under the id the source message has now.
  await (await jetstreamManager(r.ncb)).streams.deleteMessage(r.dst, 5);
  const gap = await verify(r);
  assert.equal(gap.agree, false);
  assert.deepEqual(gap.missing.examples, [{ id: derivedId("a", r.src, 5, inc), sourceSeq: 5 }]);
  assert.equal(gap.duplicated.count, 0);

  // One message held in both forms is held twice.
  await publishLegacyCopies(r, [20]);
  const twice = await verify(r);
  assert.deepEqual(twice.duplicated.examples, [{ id: derivedId("a", r.src, 20, inc), copies: 2 }]);
  assert.equal(twice.missing.count, 1);
});

test("copies made from an older incarnation of the source neither count as present nor move the horizon", async (t) => {
  const r = await twoRegions(t);
  await publishAnonymous(r.nca, `${r.src}.x`, 5);
  const inc = await incarnationOf(r.nca, r.src);
  const before = async () => formatNanos(BigInt(inc - 3_600_000) * 1_000_000n);
  // A deleted-and-recreated source's previous life reached seq 10; its copies carry its older times.
  // (Seqs 1 and 3 of the current incarnation are stored below: the broker would absorb the same old id twice.)
  await publishLegacyCopies(r, [2, 4, 5, 6, 7, 8, 9, 10], before);
  await publishLegacyCopies(r, [1, 3]);

  const report = await verify(r);
  assert.deepEqual(summary(report), {
    agree: false,
    forwardable: 5,
    fromLink: 10,
    horizon: 3,
    legacyIds: 2,
    notYetRelayed: 2,
    missing: [{ id: derivedId("a", r.src, 2, inc), sourceSeq: 2 }],
    duplicated: [],
  });
});
