import { test } from "node:test";
import assert from "node:assert/strict";
import { rename, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { ConfigReloader } from "../../src/config/reloader.js";
import { createLogger } from "../../src/observability/logger.js";
import type { RelayStatus } from "../../src/relay/relay.js";
import { check, uniqueName } from "../helpers/check.js";
import { metricValue, spawnRelay, startRelay, writeConfig } from "../helpers/relays.js";
import {
  assertExactlyOnce,
  assertInOrder,
  DEFAULT_GROUP,
  publishIds,
  TEST_GROUP,
  twoRegions,
  waitForCount,
} from "../helpers/scenario.js";
import type { TwoRegions } from "../helpers/scenario.js";
import { createStream, readStream, streamCount } from "../helpers/streams.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";
import { scrapeMetric, settled, startLoad, waitReady, watch, withReport } from "../faults/process-harness.js";

/**
 * Config reload without a restart (README "Reloading the config"): SIGHUP, the file watch, and
 * `Relay.reload`. Region a holds the sources, region b the destinations; the relay runs for b.
 */

interface LinkSpec {
  name: string;
  src: string;
  dst: string;
  /** Extra keys inside `to:`, e.g. `subject: { addPrefix: "moved." }`. */
  to?: string;
  extra?: string;
}

function configYaml(r: TwoRegions, links: readonly LinkSpec[], topLevel = ""): string {
  const body = links
    .map(
      (l) => `  - name: ${l.name}
    from: { region: a, stream: ${l.src} }
    to: { region: b, stream: ${l.dst}${l.to ? `, ${l.to}` : ""} }
    ackWait: 5s
    publishTimeout: 2s
${l.extra ?? ""}`,
    )
    .join("\n");
  return `regions:
  a: { servers: ["${r.a.url}"] }
  b: { servers: ["${r.b.url}"] }
links:
${body}
${topLevel.includes("log:") ? "" : "log: { level: info }"}
${topLevel.includes("group:") ? "" : TEST_GROUP}
shutdown: { grace: 10s }
${topLevel}
`;
}

/** A second source/destination stream pair; `destSubjects` are added to the destination's. */
async function streamPair(r: TwoRegions, destSubjects: string[] = []): Promise<{ src: string; dst: string }> {
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  await createStream(r.nca, { name: src, subjects: [`${src}.>`] });
  await createStream(r.ncb, { name: dst, subjects: [`${src}.>`, ...destSubjects] });
  return { src, dst };
}

async function getStatus(url: string): Promise<RelayStatus> {
  return (await (await fetch(`${url}/status`, { signal: AbortSignal.timeout(2_000) })).json()) as RelayStatus;
}

/** For reloaders made here: the relay logs each reload's outcome itself. */
const silent = createLogger({ level: "silent" });

const leaseRevisionOf = (status: RelayStatus, link: string) =>
  status.links.find((l) => l.name === link)?.ownership?.leaseRevision;

/**
 * /status once `link` is owned by the relay (its lease revision known). It also shows the lease
 * revision as `epoch`, its deprecated name, with the same value.
 */
async function ownedStatus(url: string, link: string): Promise<RelayStatus> {
  const status = await check(
    async () => {
      const s = await getStatus(url);
      return leaseRevisionOf(s, link) !== undefined ? s : undefined;
    },
    { name: `${link} owned`, timeoutMs: 20_000 },
  );
  const ownership = status.links.find((l) => l.name === link)?.ownership;
  assert.equal(typeof ownership?.leaseRevision, "number");
  assert.equal(ownership?.epoch, ownership?.leaseRevision, "/status: ownership.epoch (deprecated) equals ownership.leaseRevision");
  return status;
}

/** The largest pause between consecutive stored messages whose store time is within [from, to] (ms). */
function largestGap(times: readonly number[], from: number, to: number): number {
  const inWindow = times.filter((t) => t >= from && t <= to);
  let gap = 0;
  for (let i = 1; i < inWindow.length; i++) gap = Math.max(gap, (inWindow[i] ?? 0) - (inWindow[i - 1] ?? 0));
  return gap;
}

async function consumerInfo(nc: NatsConnection, stream: string, durable: string) {
  return (await jetstreamManager(nc)).consumers.info(stream, durable);
}

test("SIGHUP adding a link under load: the new link relays, the running one does not pause (largest gap < 1 s), exactly once and in order, /healthz answers", async (t) => {
  const r = await twoRegions(t);
  const second = await streamPair(r);
  const first: LinkSpec = {
    name: "a-to-b",
    src: r.src,
    dst: r.dst,
    extra: "    batchSize: 200\n    inFlight: 512\n",
  };
  const added: LinkSpec = { name: "a-to-b-2", src: second.src, dst: second.dst };
  // The lease revision witnesses that a link was not restarted: the default lease, so that a busy machine
  // (a renewal late past a short lease) cannot pass for a restart.
  const http = `http: { listen: "127.0.0.1:0" }\n${DEFAULT_GROUP}`;
  const path = await writeConfig(configYaml(r, [first], http));
  const relay = spawnRelay(t, ["run", "--config", path, "--region", "b"]);
  const url = await relay.httpUrl();
  await waitReady(url, "the relay");
  const before = await ownedStatus(url, "a-to-b");
  const revisionBefore = leaseRevisionOf(before, "a-to-b");

  // The new link's source holds a backlog already; link a-to-b is under a steady load.
  const backlog = await publishIds(r.nca, second.src, "n", 3_000);
  const total = 24_000;
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 2_000 });
  const live = watch(t, url);
  await waitForCount(r.ncb, r.dst, 4_000, 30_000, "a-to-b relaying under load");

  await writeFile(path, configYaml(r, [first, added], http));
  const reloadAt = Date.now();
  relay.signal("SIGHUP");
  await waitForCount(r.ncb, second.dst, backlog.length, 30_000, "the added link relayed its backlog");
  const addedAfterMs = Date.now() - reloadAt;
  assert.ok(!load.finished, "the reload happened under load");

  await load.done;
  const stuck = await settled(r.nca, r.src, "after the load", 60_000);
  const liveness = await live.stop();
  const report = {
    ...(await checkDelivery({
      fault: "reload adding a link under load",
      dest: r.ncb,
      stream: r.dst,
      source: await readSource(r.nca, r.src),
    })),
    liveness,
  };
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  await assertExactlyOnce(r.ncb, second.dst, backlog);
  await assertInOrder(r.ncb, second.dst, backlog);

  // No pause of a-to-b while a-to-b-2 started: the destination's store times, around the reload.
  const from = reloadAt - 1_000;
  const to = reloadAt + addedAfterMs + 1_000;
  const destTimes = (await readStream(r.ncb, r.dst)).map((m) => m.time);
  const destGap = largestGap(destTimes, from, to);
  const sourceGap = largestGap(
    (await readStream(r.nca, r.src)).map((m) => m.time),
    from,
    to,
  );
  const baselineGap = largestGap(destTimes, from - (to - from), from);
  t.diagnostic(
    `a-to-b-2 relayed its ${backlog.length} messages ${addedAfterMs} ms after SIGHUP; largest gap of a-to-b meanwhile: ` +
      `${destGap} ms in the destination (${sourceGap} ms in the source; ${baselineGap} ms in the destination just before)`,
  );
  assert.ok(destGap < 1_000, `a-to-b paused ${destGap} ms during the reload`);

  const after = await getStatus(url);
  assert.equal(leaseRevisionOf(after, "a-to-b"), revisionBefore, "a-to-b kept its lease: it was not restarted");
  assert.notEqual(after.config?.hash, before.config?.hash);
  assert.ok((after.config?.loadedAt ?? "") > (before.config?.loadedAt ?? ""), "loadedAt moved on");
  assert.equal(after.config?.lastReload?.trigger, "SIGHUP");
  assert.deepEqual(
    {
      result: after.config?.lastReload?.result,
      added: after.config?.lastReload?.added,
      unchanged: after.config?.lastReload?.unchanged,
    },
    { result: "success", added: ["a-to-b-2"], unchanged: ["a-to-b"] },
  );
  assert.equal(await scrapeMetric(url, "relay_config_reloads_total", { result: "success" }), 1);
  assert.equal(await scrapeMetric(url, "relay_config_info", { hash: after.config?.hash ?? "?" }), 1);
  assert.match(
    relay.output(),
    /"msg":"config reloaded \(success\): 1 added, 0 removed, 0 changed, 1 unchanged"/,
  );
  assert.ok(relay.running, "SIGHUP did not end the process");
});

test("changing a link's to.subject restarts only that link; removing a link drains and stops it: acked up to what it published, its consumer no longer pulled, its series gone", async (t) => {
  const r = await twoRegions(t);
  const pair = await streamPair(r, ["moved.>"]);
  const one: LinkSpec = { name: "one", src: r.src, dst: r.dst };
  const two: LinkSpec = { name: "two", src: pair.src, dst: pair.dst };
  // The lease revision witnesses that a link was not restarted: the default lease, so that a busy machine
  // (a renewal late past a short lease) cannot pass for a restart.
  const { relay, logs } = await startRelay(t, configYaml(r, [one, two], DEFAULT_GROUP), "b");
  const reload = (links: LinkSpec[]) => relay.reload(parseConfigText(configYaml(r, links, DEFAULT_GROUP), "test.yaml"));
  const ids1 = await publishIds(r.nca, r.src, "x", 500);
  const ids2 = await publishIds(r.nca, pair.src, "y", 500);
  await waitForCount(r.ncb, r.dst, 500, 30_000);
  await waitForCount(r.ncb, pair.dst, 500, 30_000);
  const leaseRevisions = () => ({ one: leaseRevisionOf(relay.status(), "one"), two: leaseRevisionOf(relay.status(), "two") });
  const start = leaseRevisions();
  /** one's states entered since `at` that a restart would pass through. */
  const restartStates = (at: string) =>
    (relay.status().links.find((l) => l.name === "one")?.stateHistory ?? [])
      .filter((h) => h.at >= at && ["stopped", "starting", "standby"].includes(h.state))
      .map((h) => h.state);
  const changedAt = new Date().toISOString();

  // Change: two publishes under "moved." from now on; one is not touched.
  const changed = await reload([one, { ...two, to: 'subject: { addPrefix: "moved." }' }]);
  assert.deepEqual(
    { changed: changed.changed, unchanged: changed.unchanged, result: changed.result },
    { changed: ["two"], unchanged: ["one"], result: "success" },
  );
  await check(() => leaseRevisions().two !== undefined && leaseRevisions().two !== start.two, {
    name: "two restarted: it took its lease again",
    timeoutMs: 20_000,
  });
  assert.equal(leaseRevisions().one, start.one, "one kept its lease");
  assert.deepEqual(restartStates(changedAt), [], "one did not stop or start again");
  const more2 = await publishIds(r.nca, pair.src, "y", 300, 500);
  const more1 = await publishIds(r.nca, r.src, "x", 300, 500);
  await waitForCount(r.ncb, pair.dst, 800, 30_000, "two relays after its change");
  await waitForCount(r.ncb, r.dst, 800, 30_000, "one relays on");
  const stored2 = await readStream(r.ncb, pair.dst);
  assert.deepEqual(
    stored2.map((m) => m.headers["Nats-Msg-Id"]),
    [...ids2, ...more2],
    "every message of two once, in order, across the restart",
  );
  assert.ok(stored2.slice(0, 500).every((m) => m.subject.startsWith(`${pair.src}.`)));
  assert.ok(
    stored2.slice(500).every((m) => m.subject.startsWith(`moved.${pair.src}.`)),
    "the new subject applies",
  );
  await assertExactlyOnce(r.ncb, r.dst, [...ids1, ...more1]);

  // Remove two while it works through a backlog: it drains, acks what it published, and stops pulling.
  const publishing = publishIds(r.nca, pair.src, "y", 20_000, 800);
  await waitForCount(r.ncb, pair.dst, 2_000, 30_000, "two relaying the backlog");
  const removed = await reload([one]);
  await publishing;
  assert.deepEqual(
    { removed: removed.removed, unchanged: removed.unchanged },
    { removed: ["two"], unchanged: ["one"] },
  );
  assert.deepEqual(
    relay.status().links.map((l) => l.name),
    ["one"],
  );
  const durable = "relay-two";
  // What it published is acked, and nothing else: messages the server sent to a pull cut off by the stop
  // stay unacked (ack pending past the floor) and are redelivered to whoever runs the link next.
  const afterStop = await consumerInfo(r.nca, pair.src, durable);
  const relayed = await streamCount(r.ncb, pair.dst);
  assert.ok(relayed < 20_800, `removed mid-backlog (${relayed} of 20800 relayed)`);
  assert.equal(afterStop.ack_floor.stream_seq, relayed, "acked up to what it published");
  const sourceIds = (await readStream(r.nca, pair.src)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(
    (await readStream(r.ncb, pair.dst)).map((m) => m.headers["Nats-Msg-Id"]),
    sourceIds.slice(0, relayed),
    "what it published: the source's first messages, each once, in order",
  );
  // A pull request sent before the stop expires within 5 s; after that nothing pulls.
  await check(async () => (await consumerInfo(r.nca, pair.src, durable)).num_waiting === 0, {
    name: "no pull request on two's consumer",
    timeoutMs: 10_000,
  });
  const delivered = (await consumerInfo(r.nca, pair.src, durable)).delivered.stream_seq;
  await publishIds(r.nca, pair.src, "y", 200, 20_800);
  await delay(1_500);
  const later = await consumerInfo(r.nca, pair.src, durable);
  assert.equal(later.delivered.stream_seq, delivered, "nothing delivered to the removed link");
  assert.equal(await streamCount(r.ncb, pair.dst), relayed, "nothing more published by the removed link");
  // (A backlog probe in flight when it stopped may report once more: removed again after that.)
  const leftover = async () =>
    (await relay.registry.metrics()).split("\n").filter((l) => l.includes('link="two"'));
  await check(async () => (await leftover()).length === 0, {
    name: "no series of the removed link left",
    timeoutMs: 10_000,
  }).catch(async (err: unknown) => assert.fail(`${String(err)}: ${(await leftover()).join(" | ")}`));
  assert.equal(await metricValue(relay, "relay_link_owner", { link: "one" }), 1);

  // one was never touched, and relays on.
  assert.equal(leaseRevisions().one, start.one);
  assert.deepEqual(restartStates(changedAt), []);
  const last1 = await publishIds(r.nca, r.src, "x", 200, 800);
  await waitForCount(r.ncb, r.dst, 1_000, 30_000, "one relays after two was removed");
  await assertInOrder(r.ncb, r.dst, [...ids1, ...more1, ...last1]);
  assert.ok(
    logs.lines.some(
      (l) =>
        /"msg":"config reloaded \(success\): 0 added, 1 removed, 0 changed, 1 unchanged"/.test(l) &&
        /"removed":\["two"\]/.test(l),
    ),
  );
});

test("a bad file (YAML error, then a schema error) changes nothing: the failure is counted and logged, the links keep relaying", async (t) => {
  const r = await twoRegions(t);
  const link: LinkSpec = { name: "a-to-b", src: r.src, dst: r.dst };
  // The lease revision witnesses that a link was not restarted: the default lease, so that a busy machine
  // (a renewal late past a short lease) cannot pass for a restart.
  const http = `http: { listen: "127.0.0.1:0" }\n${DEFAULT_GROUP}`;
  const good = configYaml(r, [link], http);
  const path = await writeConfig(good);
  const relay = spawnRelay(t, ["run", "--config", path, "--region", "b"]);
  const url = await relay.httpUrl();
  await waitReady(url, "the relay");
  const before = await ownedStatus(url, "a-to-b");
  const failures = () => scrapeMetric(url, "relay_config_reloads_total", { result: "failure" });
  assert.equal(await failures(), 0, "the failure series is there from the start");

  await writeFile(path, `${good}\nlinks: [unclosed\n`);
  relay.signal("SIGHUP");
  await check(async () => (await failures()) === 1, { name: "one failed reload counted", timeoutMs: 10_000 });
  // The line reaches this process through the child's stdout pipe, maybe after the scrape saw the count.
  const yamlError = await check(
    () =>
      relay
        .output()
        .split("\n")
        .find((l) => l.includes("config reload failed")),
    { name: "the failure is logged", timeoutMs: 5_000 },
  );
  assert.match(yamlError, /"code":"CONFIG_INVALID"/);
  assert.match(yamlError, /is invalid:\\n {2}line \d+, column \d+/, "with the config error's text");
  const afterYaml = await getStatus(url);
  assert.equal(afterYaml.config?.hash, before.config?.hash, "the running config stays");
  assert.equal(afterYaml.config?.loadedAt, before.config?.loadedAt);
  assert.equal(afterYaml.config?.lastReload?.result, "failure");
  assert.match(afterYaml.config?.lastReload?.error ?? "", /line \d+, column \d+/);

  await writeFile(path, good.replace("to: { region: b,", "to: { region: eu-wst,"));
  relay.signal("SIGHUP");
  await check(async () => (await failures()) === 2, {
    name: "the second failed reload counted",
    timeoutMs: 10_000,
  });
  await check(() => /links\[0\]\.to\.region: unknown region \\"eu-wst\\"/.test(relay.output()), {
    name: "the schema error is logged, naming the config path",
    timeoutMs: 5_000,
  });
  assert.equal((await getStatus(url)).config?.hash, before.config?.hash);
  assert.equal(await scrapeMetric(url, "relay_config_reloads_total", { result: "success" }), 0);

  const ids = await publishIds(r.nca, r.src, "m", 1_000);
  await waitForCount(r.ncb, r.dst, ids.length, 30_000, "the link relays after the failed reloads");
  await assertInOrder(r.ncb, r.dst, ids);
  assert.equal(
    leaseRevisionOf(await getStatus(url), "a-to-b"),
    leaseRevisionOf(before, "a-to-b"),
    "the link was not restarted",
  );
  assert.ok(relay.running);
});

test("/status shows the config's hash and load time: a reload changes them; a setting that needs a restart keeps its value (partial)", async (t) => {
  const r = await twoRegions(t);
  const link: LinkSpec = { name: "a-to-b", src: r.src, dst: r.dst };
  const { relay, url, logs } = await startRelay(t, configYaml(r, [link]), "b", { http: true });
  const first = await getStatus(url);
  assert.match(first.config?.hash ?? "", /^[0-9a-f]{16}$/);
  assert.ok(first.config?.loadedAt);
  assert.equal(first.config?.lastReload, undefined);
  assert.equal(await metricValue(relay, "relay_config_info", { hash: first.config?.hash ?? "" }), 1);
  const loadedBefore = await metricValue(relay, "relay_config_loaded_timestamp_seconds", {});

  await delay(20);
  const report = await relay.reload(
    parseConfigText(
      configYaml(r, [link], "group: { lease: 8s, renew: 2s }\nlog: { level: warn }"),
      "test.yaml",
    ),
  );
  assert.equal(report.result, "partial");
  assert.deepEqual(report.needsRestart, ["group.lease", "group.renew"]);
  const second = await getStatus(url);
  assert.notEqual(second.config?.hash, first.config?.hash);
  assert.ok((second.config?.loadedAt ?? "") > (first.config?.loadedAt ?? ""));
  assert.deepEqual(second.config?.needsRestart, ["group.lease", "group.renew"]);
  assert.equal(await metricValue(relay, "relay_config_info", { hash: second.config?.hash ?? "" }), 1);
  assert.equal(
    await metricValue(relay, "relay_config_info", { hash: first.config?.hash ?? "" }),
    0,
    "one hash series at a time",
  );
  assert.ok((await metricValue(relay, "relay_config_loaded_timestamp_seconds", {})) > loadedBefore);
  assert.equal(await metricValue(relay, "relay_config_reloads_total", { result: "partial" }), 1);
  assert.ok(
    logs.lines.some((l) => /"msg":"needs a restart: group.lease/.test(l)),
    "each setting that waits for a restart is logged",
  );
  // log.level applied live: info lines stop.
  const lines = logs.lines.length;
  await relay.reload(
    parseConfigText(
      configYaml(r, [link], "group: { lease: 8s, renew: 2s }\nlog: { level: warn }"),
      "test.yaml",
    ),
  );
  assert.ok(
    logs.lines.slice(lines).every((l) => !/"level":30/.test(l)),
    "no info line at level warn",
  );
});

test("reload.watch: writing the file as a temporary file renamed over it reloads it; an unchanged file does not", async (t) => {
  const r = await twoRegions(t);
  const pair = await streamPair(r);
  const first: LinkSpec = { name: "a-to-b", src: r.src, dst: r.dst };
  const added: LinkSpec = { name: "a-to-b-2", src: pair.src, dst: pair.dst };
  const top = 'http: { listen: "127.0.0.1:0" }\nreload: { watch: true }';
  const path = await writeConfig(configYaml(r, [first], top));
  const relay = spawnRelay(t, ["run", "--config", path, "--region", "b"]);
  const url = await relay.httpUrl();
  await waitReady(url, "the relay");
  await check(() => /watching the config file/.test(relay.output()), { name: "the watch is set up" });

  const tmp = join(dirname(path), ".relay.yaml.tmp");
  await writeFile(tmp, configYaml(r, [first, added], top));
  await rename(tmp, path);
  const status = await check(
    async () => {
      const s = await getStatus(url);
      return s.links.some((l) => l.name === "a-to-b-2") && s.config?.lastReload ? s : undefined;
    },
    { name: "the added link runs after the rename, and the reload is reported", timeoutMs: 10_000 },
  );
  assert.equal(status.config?.lastReload?.trigger, "watch");
  const ids = await publishIds(r.nca, pair.src, "w", 300);
  await waitForCount(r.ncb, pair.dst, ids.length, 30_000, "the link added by the watch relays");

  // The same content again (a touch, an editor saving without changes): no reload.
  await writeFile(tmp, configYaml(r, [first, added], top));
  await rename(tmp, path);
  await delay(1_500);
  assert.equal(await scrapeMetric(url, "relay_config_reloads_total", { result: "success" }), 1);
});

test("requests during a reload are merged into one more; a ConfigReloader for an unreadable file records a failure", async (t) => {
  const r = await twoRegions(t);
  const link: LinkSpec = { name: "a-to-b", src: r.src, dst: r.dst };
  const path = await writeConfig(configYaml(r, [link]));
  const { relay, logs, config } = await startRelay(t, configYaml(r, [link]), "b");
  const reloader = new ConfigReloader({ path, target: relay, logger: silent });
  t.after(() => reloader.stop());
  reloader.start(config);
  const reloads = () => metricValue(relay, "relay_config_reloads_total", { result: "success" });
  await Promise.all([reloader.request("SIGHUP"), reloader.request("SIGHUP"), reloader.request("SIGHUP")]);
  assert.equal(await reloads(), 2, "three requests while one ran: that one and one more");

  const missing = new ConfigReloader({
    path: join(dirname(path), "missing.yaml"),
    target: relay,
    logger: silent,
  });
  missing.start(config);
  await missing.request("SIGHUP");
  assert.equal(await metricValue(relay, "relay_config_reloads_total", { result: "failure" }), 1);
  assert.match(relay.status().config?.lastReload?.error ?? "", /missing\.yaml: cannot read: ENOENT/);
  assert.ok(logs.lines.some((l) => /config reload failed/.test(l) && /cannot read/.test(l)));
});

test("a group of two relays reloaded one after the other: placement covers the new link set, every link has one owner throughout", async (t) => {
  const r = await twoRegions(t);
  const pairs = [{ src: r.src, dst: r.dst }, await streamPair(r), await streamPair(r)];
  const specs: LinkSpec[] = pairs.map((p, i) => ({ name: `l${i + 1}`, src: p.src, dst: p.dst }));
  const top = "group: { lease: 3s, renew: 500ms }";
  const yaml = (links: LinkSpec[]) => configYaml(r, links, top);
  const relays = [
    await startRelay(t, yaml(specs.slice(0, 2)), "b"),
    await startRelay(t, yaml(specs.slice(0, 2)), "b"),
  ];
  /** Link → the relays that own it now. */
  const owners = () => {
    const out = new Map<string, number[]>();
    relays.forEach(({ relay }, i) => {
      for (const l of relay.status().links)
        if (l.ownership?.self) out.set(l.name, [...(out.get(l.name) ?? []), i]);
    });
    return out;
  };
  const spread = (names: string[]) =>
    check(
      () => {
        const o = owners();
        const each = relays.map((_, i) => names.filter((n) => o.get(n)?.includes(i)).length);
        const balanced =
          names.every((n) => o.get(n)?.length === 1) && Math.max(...each) - Math.min(...each) <= 1;
        return balanced ? o : undefined;
      },
      { name: `${names.join(", ")} owned once each, spread over both relays`, timeoutMs: 30_000 },
    );
  await spread(["l1", "l2"]);
  // No link ever has two owners (sampled every 20 ms through both reloads).
  let doubleOwned: string | undefined;
  const sampler = setInterval(() => {
    for (const [name, by] of owners())
      if (by.length > 1) doubleOwned ??= `${name} owned by relays ${by.join(" and ")}`;
  }, 20);
  t.after(() => clearInterval(sampler));

  // A rollout of a new config: the first relay runs it a while before the second.
  for (const { relay } of relays) {
    await relay.reload(parseConfigText(yaml(specs), "test.yaml"));
    await delay(500);
  }
  const three = await spread(["l1", "l2", "l3"]);
  // Remove a link of the relay that has one: the other now has two and hands one over.
  const single = relays.findIndex(
    (_, i) => ["l1", "l2", "l3"].filter((n) => three.get(n)?.includes(i)).length === 1,
  );
  const gone = ["l1", "l2", "l3"].find((n) => three.get(n)?.includes(single)) ?? "";
  const left = specs.filter((s) => s.name !== gone);
  for (const { relay } of relays) await relay.reload(parseConfigText(yaml(left), "test.yaml"));
  const final = await spread(left.map((s) => s.name));
  clearInterval(sampler);
  assert.equal(doubleOwned, undefined, doubleOwned);
  t.diagnostic(`removed ${gone}; owners after: ${JSON.stringify([...final])}`);
  for (const { relay } of relays) {
    const placed = relay.status().group?.members.map((m) => m.placed.length);
    assert.deepEqual(placed, [1, 1], "each relay's placement: one link per member");
  }
  // The remaining links relay in order, exactly once.
  for (const spec of left) {
    const ids = await publishIds(r.nca, spec.src, spec.name, 300);
    await waitForCount(r.ncb, spec.dst, ids.length, 30_000, `${spec.name} relays`);
    await assertInOrder(r.ncb, spec.dst, ids);
  }
});

test("a source region's new server list: its connection is replaced and its links restart on it, in order, exactly once", async (t) => {
  const r = await twoRegions(t);
  const link: LinkSpec = { name: "a-to-b", src: r.src, dst: r.dst };
  const { relay, logs } = await startRelay(t, configYaml(r, [link]), "b");
  const ids = await publishIds(r.nca, r.src, "m", 500);
  await waitForCount(r.ncb, r.dst, 500, 30_000);
  const connects = () =>
    logs.lines.filter((l) => /"peerRegion":"a"/.test(l) && /connected to region/.test(l)).length;
  assert.equal(connects(), 1);
  // The same server, spelled another way: new connection settings for region a.
  const respelled = configYaml(r, [link]).replace(
    `servers: ["${r.a.url}"]`,
    `servers: ["${r.a.url.replace("127.0.0.1", "localhost")}"]`,
  );
  assert.notEqual(respelled, configYaml(r, [link]));
  const publishing = publishIds(r.nca, r.src, "m", 5_000, 500);
  const report = await relay.reload(parseConfigText(respelled, "test.yaml"));
  assert.deepEqual(report.changed, ["a-to-b"]);
  await publishing;
  assert.equal(connects(), 2, "region a connected again");
  await waitForCount(r.ncb, r.dst, 5_500, 30_000, "the link relays on its new connection");
  await assertInOrder(r.ncb, r.dst, [...ids, ...Array.from({ length: 5_000 }, (_, i) => `m-${i + 500}`)]);
});

test("a reload whose new link cannot start is partial, naming the link and why; the running link goes on", async (t) => {
  const r = await twoRegions(t);
  const one: LinkSpec = { name: "one", src: r.src, dst: r.dst };
  const { relay, url } = await startRelay(t, configYaml(r, [one]), "b", { http: true });
  await ownedStatus(url, "one");
  const pair = await streamPair(r);
  // The new link's durable exists with another filter: its start is refused (the cursor would move).
  const durable = uniqueName("two-durable");
  await (await jetstreamManager(r.nca)).consumers.add(pair.src, { durable_name: durable, filter_subject: `${pair.src}.9`, ack_policy: AckPolicy.Explicit });
  const two: LinkSpec = { name: "two", ...pair, extra: `    durable: ${durable}\n` };
  const report = await relay.reload(parseConfigText(configYaml(r, [one, two]), "test.yaml"));
  assert.equal(report.result, "partial");
  assert.deepEqual(report.added, ["two"]);
  assert.equal(report.notStarted?.length, 1, JSON.stringify(report));
  assert.equal(report.notStarted?.[0]?.link, "two");
  assert.match(report.notStarted?.[0]?.reason ?? "", new RegExp(`durable ${durable} .* filters`));
  const status = await getStatus(url);
  assert.deepEqual(status.config?.lastReload?.notStarted, report.notStarted);
  assert.equal(await metricValue(relay, "relay_config_reloads_total", { result: "partial" }), 1);
  assert.equal(await metricValue(relay, "relay_config_reloads_total", { result: "success" }), 0);
  const ids = await publishIds(r.nca, r.src, "after", 200);
  await waitForCount(r.ncb, r.dst, ids.length, 30_000, "the running link after the reload");
  await assertInOrder(r.ncb, r.dst, ids);
});
