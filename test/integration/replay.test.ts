import { test } from "node:test";
import assert from "node:assert/strict";
import type { withServers } from "../helpers/servers.js";
import { check } from "../helpers/check.js";
import { readStream, streamCount } from "../helpers/streams.js";
import { metricValue, RelayProcess, startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import type { Relay } from "../../src/relay/relay.js";
import type { NatsConnection } from "@nats-io/nats-core";
import { jetstreamManager } from "@nats-io/jetstream";

type T = Parameters<typeof withServers>[0];

const regions = (t: T, sourceMaxAgeMs?: number) => twoRegions(t, sourceMaxAgeMs ? { srcMaxAgeMs: sourceMaxAgeMs } : {});

const linkOf = (relay: Relay) => relay.status().links[0];

async function waitUntilExpired(nc: NatsConnection, stream: string, firstSeq: number): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await check(async () => (await jsm.streams.info(stream)).state.first_seq >= firstSeq, {
    name: `${stream}: retention deleted everything before seq ${firstSeq}`,
    timeoutMs: 20_000,
    intervalMs: 200,
  });
}

/**
 * A laptop that slept through the incident: the link is down while the source's max_age deletes 50
 * messages it never relayed. Returns once the relay with `policy` has started.
 */
async function sleptThroughIt(t: T, policy: string) {
  const r = await regions(t, 2_000);
  const first = await startRelay(t, r.yaml(`    onGap: ${policy}\n`), "b");
  // Published once the link runs: the relay takes no lease in a bucket younger than group.lease, and
  // the source keeps a message 2 s only.
  await check(() => linkOf(first.relay)?.state === "live", { name: "the link is live before the first messages", timeoutMs: 20_000 });
  await publishIds(r.nca, r.src, "before", 100); // seq 1-100, relayed
  await waitForCount(r.ncb, r.dst, 100, 20_000);
  await first.relay.stop();
  await publishIds(r.nca, r.src, "lost", 50); // seq 101-150, never relayed
  await waitUntilExpired(r.nca, r.src, 151);
  await publishIds(r.nca, r.src, "after", 20); // seq 151-170
  const second = await startRelay(t, r.yaml(`    onGap: ${policy}\n`), "b", { http: true, gaps: true });
  return { ...r, relay: second.relay, url: second.url };
}

for (const policy of ["continue", "halt", "resync"] as const) {
  test(`a link down longer than the source's max_age: the lost range is reported exactly, then onGap ${policy}`, async (t) => {
    const { relay, ncb, dst, nca, src, url } = await sleptThroughIt(t, policy);
    const gaps = await check(() => (linkOf(relay)?.gaps.length ? linkOf(relay)?.gaps : undefined), { name: "gap reported in /status", timeoutMs: 20_000 });
    assert.deepEqual(
      gaps.map((g) => [g.fromSeq, g.toSeq, g.count, g.exact]),
      [[101, 150, 50, true]],
    );
    assert.equal(await metricValue(relay, "relay_gap_messages_total", { link: "a-to-b" }), 50);
    const status = (await (await fetch(`${url}/status`)).json()) as { links: { gaps: unknown[] }[] };
    assert.equal(status.links[0]?.gaps.length, 1);
    if (policy === "continue") {
      await waitForCount(ncb, dst, 120, 20_000);
      const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
      assert.equal(ids.filter((id) => id?.startsWith("after-")).length, 20);
      assert.equal(ids.filter((id) => id?.startsWith("lost-")).length, 0);
    } else if (policy === "halt") {
      await check(() => linkOf(relay)?.state === "failed", { name: "link failed", timeoutMs: 20_000 });
      assert.match(linkOf(relay)?.lastError?.message ?? "", /source seq 101-150 \(50 messages\)/);
      assert.equal(await streamCount(ncb, dst), 100, "nothing relayed past the gap");
      assert.equal((await fetch(`${url}/readyz`)).status, 503);
    } else {
      // The latest message per subject (5 subjects) is sent as a snapshot, then the link is live.
      await check(() => linkOf(relay)?.lastResync, { name: "resync finished", timeoutMs: 30_000 });
      assert.equal(await metricValue(relay, "relay_resyncs_total", { link: "a-to-b", reason: "gap" }), 1);
      const stored = await readStream(ncb, dst);
      const snapshot = stored.filter((m) => m.headers["Relay-Snapshot"]);
      assert.deepEqual(
        snapshot.map((m) => m.headers["Nats-Msg-Id"]).sort(),
        ["after-15", "after-16", "after-17", "after-18", "after-19"],
      );
      assert.ok(snapshot.every((m) => m.headers["Relay-Snapshot"] === linkOf(relay)?.lastResync?.id));
      assert.equal(stored.length, 105, "old deltas were not replayed");
      await check(() => linkOf(relay)?.state === "live", { name: "live after resync", timeoutMs: 20_000 });
      await publishIds(nca, src, "live", 10);
      await waitForCount(ncb, dst, 115, 20_000, "live traffic after the resync");
      assert.ok(linkOf(relay)?.stateHistory.some((h) => h.state === "resyncing"));
    }
  });
}

test("a short outage replays in order; replay age shows the outage; backlog age returns to 0; states and /readyz follow", async (t) => {
  const { b, src, dst, nca, ncb, yaml } = await regions(t);
  // The ownership bucket lives in region b too: a lease longer than the outage (3 s + the restart) keeps
  // this one episode (a lease lost with it would be a second one, as the relay counts it).
  const { relay, url } = await startRelay(t, yaml("", "group: { lease: 15s, renew: 1s }\n"), "b", { http: true });
  const before = await publishIds(nca, src, "before", 100);
  // The relay creates the bucket and takes no lease in it before it is a lease (15 s) old.
  await waitForCount(ncb, dst, 100, 40_000);
  await check(() => linkOf(relay)?.state === "live", { name: "live before the outage" });
  assert.equal((await fetch(`${url}/readyz`)).status, 200);

  await b.stop();
  await check(() => linkOf(relay)?.state === "recovering", { name: "recovering during the outage", timeoutMs: 20_000 });
  assert.equal((await fetch(`${url}/readyz`)).status, 503);
  const during = await publishIds(nca, src, "during", 200);
  const outageStarted = Date.now();
  await check(() => Date.now() - outageStarted > 3_000, { name: "a 3 s outage", timeoutMs: 5_000 });
  await b.restart();
  await waitForCount(ncb, dst, 300, 30_000);
  await check(() => linkOf(relay)?.state === "live", { name: "live after recovery", timeoutMs: 20_000 });
  assert.equal((await fetch(`${url}/readyz`)).status, 200);

  const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(ids, [...before, ...during], "replayed in source order");
  // Messages published at the start of the outage waited >= 3 s; none waited a minute.
  const le = async (bound: string) => metricValue(relay, "relay_replay_age_seconds_bucket", { link: "a-to-b", le: bound });
  const count = await metricValue(relay, "relay_replay_age_seconds_count", { link: "a-to-b" });
  assert.equal(count, 300);
  assert.ok(count - (await le("2.5")) >= 100, `most outage messages older than 2.5 s (count ${count}, <=2.5s ${await le("2.5")})`);
  assert.equal(await le("60"), 300, "all within a minute");
  await check(async () => (await metricValue(relay, "relay_backlog_age_seconds", { link: "a-to-b" })) === 0, { name: "backlog age back to 0" });
  assert.equal(await metricValue(relay, "relay_recoveries_total", { link: "a-to-b" }), 1);
  assert.equal(await metricValue(relay, "relay_recovery_seconds_count", { link: "a-to-b" }), 1);
  const states = linkOf(relay)?.stateHistory.map((h) => h.state) ?? [];
  const sequence = states.filter((s, i) => s !== states[i - 1]);
  assert.deepEqual(sequence.slice(sequence.lastIndexOf("recovering") - 1), ["live", "recovering", "live"]);
  assert.equal(sequence[0], "starting");

  // `jetstream-relay status` prints the table.
  const cli = new RelayProcess(["status", "--url", url]);
  assert.equal(await cli.exited, 0);
  const out = cli.stdout.join("");
  assert.match(out, /LINK\s+FROM\s+TO\s+STATE/);
  assert.match(out, new RegExp(`a-to-b\\s+a/${src}\\s+b/${dst}\\s+live`));
});

test("bounded replay: a backlog older than maxReplayAge resyncs; one within it replays every delta in order", async (t) => {
  const { src, dst, nca, ncb, yaml } = await regions(t);
  const first = await startRelay(t, yaml("    maxReplayAge: 2s\n"), "b");
  await publishIds(nca, src, "before", 10);
  await waitForCount(ncb, dst, 10, 20_000);
  await first.relay.stop();
  await publishIds(nca, src, "old", 50);
  const published = Date.now();
  await check(() => Date.now() - published > 2_500, { name: "backlog older than 2 s", timeoutMs: 5_000 });
  const second = await startRelay(t, yaml("    maxReplayAge: 2s\n"), "b");
  await check(() => linkOf(second.relay)?.lastResync, { name: "resync after max replay age", timeoutMs: 30_000 });
  assert.equal(await metricValue(second.relay, "relay_resyncs_total", { reason: "max_replay_age" }), 1);
  assert.equal(await streamCount(ncb, dst), 15, "10 before + the latest of 5 subjects, not 50 deltas");
  await second.relay.stop();

  await publishIds(nca, src, "fresh", 30);
  const third = await startRelay(t, yaml("    maxReplayAge: 1h\n"), "b");
  await waitForCount(ncb, dst, 45, 20_000);
  const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(ids.slice(15), Array.from({ length: 30 }, (_, i) => `fresh-${i}`));
  assert.equal(await metricValue(third.relay, "relay_resyncs_total", {}), 0);
});

test("a long replay logs its progress every log.progressInterval: backlog messages, age, drain rate and ETA", async (t) => {
  const { src, dst, nca, ncb, yaml } = await regions(t);
  const backlog = await publishIds(nca, src, "backlog", 20_000);
  // A narrow in-flight window keeps the link catching up for several seconds.
  const { logs } = await startRelay(t, yaml("    inFlight: 8\n    batchSize: 8\n", "log:\n  progressInterval: 300ms\n"), "b");
  await waitForCount(ncb, dst, backlog.length, 60_000, "after the replay");
  const progress = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => typeof l["backlogMessages"] === "number");
  assert.ok(progress.length >= 2, `at least two progress lines during the replay (got ${progress.length})`);
  for (const line of progress) {
    assert.equal(line["link"], "a-to-b");
    assert.match(String(line["msg"]), /^catching up: \d+ messages behind, oldest \d+ s old, /);
    assert.equal(typeof line["backlogAgeSeconds"], "number");
    assert.equal(typeof line["drainRate"], "number");
  }
  const counts = progress.map((l) => l["backlogMessages"] as number);
  assert.ok(counts[0]! > counts.at(-1)!, `the backlog shrinks from line to line (${counts.join(", ")})`);
  assert.ok(progress.some((l) => typeof l["etaSeconds"] === "number"), "an ETA once the backlog shrinks");
});
