import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import type { VerifyReport } from "../../src/verify/report.js";
import { repairExitCode, repairLink } from "../../src/verify/repair.js";
import { check } from "../helpers/check.js";
import { publishMany, readStream, streamCount } from "../helpers/streams.js";
import { RelayProcess, startRelay, writeConfig } from "../helpers/relays.js";
import { twoRegions, waitForCount } from "../helpers/scenario.js";

async function cli(args: readonly string[]) {
  const p = new RelayProcess(args);
  return { code: await p.exited, out: p.stdout.join(""), err: p.stderr.join("") };
}

/**
 * 20 messages over 5 entities (`m-<i>`, entity `e<i % 5>`, version i), relayed with the Redis guard
 * and entity versions; then the relay stops and the test deletes copies from the destination.
 * m-15 and m-16 are the newest versions of e0 and e1 (repairable); m-2 is e2 version 2, whose entity
 * the destination holds at version 17 (stale: the guard must refuse it).
 */
test("verify finds deleted copies missing, repair --dry-run changes nothing, repair puts them back through the guard, a stale version is refused", async (t) => {
  // A 1 s duplicate window: the server's dedup remembers a deleted message's id within it.
  const { src, dst, nca, ncb, servers, yaml } = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const redis = await servers.startRedis({ appendonly: true });
  const guard = `    guard: { redis: { url: "${redis.url}" }, versions: { entity: "header:Test-Entity", version: "header:Test-Version" } }\n`;
  const configText = yaml(guard);
  const config = await writeConfig(configText);
  await publishMany(
    nca,
    20,
    (i) => ({
      subject: `${src}.${i % 5}`,
      headers: { "Nats-Msg-Id": `m-${i}`, "Test-Entity": `e${i % 5}`, "Test-Version": String(i), "User-Note": `note ${i}` },
    }),
    1,
  );
  const { relay } = await startRelay(t, configText, "b");
  await waitForCount(ncb, dst, 20, 20_000, "relayed");
  await relay.stop(AbortSignal.timeout(5_000));
  const relayedAt = Date.now();
  const jsm = await jetstreamManager(ncb);
  const destSeqOf = async (id: string) => (await readStream(ncb, dst)).find((m) => m.headers["Nats-Msg-Id"] === id)?.seq ?? 0;
  for (const id of ["m-15", "m-16"]) assert.ok(await jsm.streams.deleteMessage(dst, await destSeqOf(id)));

  // verify: missing, exit 1; an unknown link is a usage error naming the link and the config file.
  const [differ, unknown, dry, dryRange, help] = await Promise.all([
    cli(["verify", "--config", config, "--link", "a-to-b", "--json"]),
    cli(["repair", "--config", config, "--link", "c-to-b"]),
    cli(["repair", "--config", config, "--link", "a-to-b", "--dry-run"]),
    cli(["repair", "--config", config, "--link", "a-to-b", "--dry-run", "--from-seq", "1", "--to-seq", "16"]),
    cli(["repair", "--help"]),
  ]);
  assert.equal(help.code, 0);
  assert.match(help.out, /usage: jetstream-relay repair --config FILE --link NAME \[--from-seq N\] \[--to-seq M\] \[--dry-run\]/);
  assert.equal(dryRange.code, 0, dryRange.out + dryRange.err);
  assert.match(dryRange.out, /verify: 2 missing \(1 in source seq 1\.\.16, 1 outside\)/);
  assert.match(dryRange.out, /^ {2}m-15 \(source seq 16\)$/m);
  assert.doesNotMatch(dryRange.out, /m-16/);
  assert.equal(differ.code, 1, differ.err);
  const before = JSON.parse(differ.out) as VerifyReport;
  assert.deepEqual(before.missing.examples.map((e) => e.id), ["m-15", "m-16"]);
  assert.equal(unknown.code, 2);
  assert.match(unknown.err, /repair: unknown link "c-to-b" in .*relay\.yaml \(links in the config: a-to-b\)/);
  // --dry-run: the plan, nothing published.
  assert.equal(dry.code, 0, dry.out + dry.err);
  assert.match(dry.out, /plan: publish 2 missing source messages/);
  assert.match(dry.out, /^ {2}m-15 \(source seq 16\)$/m);
  assert.match(dry.out, /^ {2}m-16 \(source seq 17\)$/m);
  assert.match(dry.out, /dry run, nothing published/);
  assert.equal(await streamCount(ncb, dst), 18, "the dry run published nothing");

  // Past the 1 s duplicate window (else the broker would call the repaired ids duplicates).
  await check(() => Date.now() > relayedAt + 1_500, { name: "past the destination's duplicate window", timeoutMs: 5_000 });
  const repair = await cli(["repair", "--config", config, "--link", "a-to-b"]);
  assert.equal(repair.code, 0, repair.out + repair.err);
  assert.match(repair.out, /^ {2}m-15 \(source seq 16\): repaired \(destination seq 21\)$/m);
  assert.match(repair.out, /^ {2}m-16 \(source seq 17\): repaired \(destination seq 22\)$/m);
  assert.match(repair.out, /result: 2 repaired, 0 refused stale, 0 duplicate/);
  assert.doesNotMatch(repair.out + repair.err, /redis:\/\//, "no store address with credentials printed");

  // Same ids, payloads and user headers as the source; the link's own headers; Relay-Repair: true.
  const source = await readStream(nca, src);
  const stored = await readStream(ncb, dst);
  assert.equal(stored.length, 20);
  for (const id of ["m-15", "m-16"]) {
    const s = source.find((m) => m.headers["Nats-Msg-Id"] === id);
    const d = stored.find((m) => m.headers["Nats-Msg-Id"] === id);
    assert.ok(s && d, id);
    assert.equal(d.data, s.data);
    assert.equal(d.subject, s.subject);
    assert.equal(d.headers["User-Note"], s.headers["User-Note"]);
    assert.equal(d.headers["Test-Version"], s.headers["Test-Version"]);
    assert.equal(d.headers["Relay-Repair"], "true");
    assert.equal(d.headers["Relay-Source"], `a ${src} ${s.seq}`);
    assert.equal(d.headers["Relay-Link"], "a-to-b");
    assert.equal(d.headers["Relay-Origin"], "a");
    assert.ok(d.headers["Relay-Source-Time"]?.endsWith("Z"));
  }
  assert.equal(stored.filter((m) => m.headers["Relay-Repair"] !== undefined).length, 2, "only the repaired copies are marked");

  // verify agrees now: the repaired copies are present, and not out of order although appended late.
  const after = await cli(["verify", "--config", config, "--link", "a-to-b", "--json"]);
  assert.equal(after.code, 0, after.out + after.err);
  const agreed = JSON.parse(after.out) as VerifyReport;
  assert.equal(agreed.missing.count, 0);
  assert.equal(agreed.outOfOrder.count, 0);
  assert.equal(agreed.destination.repaired, 2);

  // A copy whose entity has a newer version in the destination: verify calls it missing, but the guard
  // refuses it as stale (putting it back would move e2 from 17 to 2), so nothing is stored.
  assert.ok(await jsm.streams.deleteMessage(dst, await destSeqOf("m-2")));
  const parsed = parseConfigText(configText, "test.yaml");
  const refused = await repairLink(parsed, "a-to-b");
  assert.deepEqual(
    refused.items.map((i) => ({ id: i.id, outcome: i.outcome, version: i.version, storedVersion: i.storedVersion })),
    [{ id: "m-2", outcome: "stale", version: 2, storedVersion: 17 }],
  );
  assert.equal(repairExitCode(refused), 0, "refused stale is final: nothing left repair could do");
  assert.equal(await streamCount(ncb, dst), 19, "the stale version was not stored");
  assert.equal((await readStream(ncb, dst)).find((m) => m.headers["Nats-Msg-Id"] === "m-2"), undefined);
});

test("without a guard, repair within the destination's duplicate window: the broker calls it duplicate, exit 1", async (t) => {
  const { src, dst, nca, ncb, yaml } = await twoRegions(t);
  const configText = yaml();
  await publishMany(nca, 5, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `d-${i}` } }), 1);
  const { relay } = await startRelay(t, configText, "b");
  await waitForCount(ncb, dst, 5, 20_000, "relayed");
  await relay.stop(AbortSignal.timeout(5_000));
  const jsm = await jetstreamManager(ncb);
  assert.ok(await jsm.streams.deleteMessage(dst, 3));
  const result = await repairLink(parseConfigText(configText, "test.yaml"), "a-to-b");
  assert.equal(result.guard, "none");
  assert.deepEqual(result.items.map((i) => [i.id, i.outcome]), [["d-2", "duplicate"]]);
  assert.match(result.items[0]?.detail ?? "", /duplicate window/);
  assert.equal(repairExitCode(result), 1);
  assert.equal(await streamCount(ncb, dst), 4);
});
