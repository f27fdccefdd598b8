/**
 * A quiet link sharing a busy destination (DESIGN §11): its position never depends on how deep its last
 * `Relay-Source` marker lies. Region a holds QUIET (the link's source); region b's DST binds QUIET's
 * subjects and BUSY's, which another link fills (its messages are written here straight into DST, with
 * that link's markers, which is all the quiet link's scan sees of them).
 * - the quiet link's consumer lost while the relay is down, behind more than the scan's bound of busy
 *   messages: the owner's checkpoint says where it was; nothing missing, nothing twice;
 * - no checkpoint either: the link halts with POSITION_UNKNOWN (never startAt's guess), and an
 *   operator's `link start-at` lets it go on;
 * - a heal that deletes the consumer re-creates it at its ack floor + 1, not at startAt.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { check, uniqueName } from "../helpers/check.js";
import { fillStream } from "../helpers/fill.js";
import { metricValue, spawnRelay, startRelay as startRelayIn, writeConfig } from "../helpers/relays.js";
import { linkYaml, publishIds } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, exactlyOnce } from "../helpers/streams.js";
import { parseConfigText } from "../../src/config/load.js";
import { leaseKey } from "../../src/config/lease-key.js";
import { checkpointKey, startKey } from "../../src/group/link-position.js";

const LINK = "quiet";
const DURABLE = `relay-${LINK}`;

interface Setup {
  readonly nca: NatsConnection;
  readonly ncb: NatsConnection;
  readonly quiet: string;
  readonly busy: string;
  readonly dst: string;
  readonly yaml: string;
}

async function setup(
  t: { after(fn: () => unknown): void },
  opts: { dstDuplicateWindowMs?: number } = {},
): Promise<Setup> {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const quiet = uniqueName("QUIET");
  const busy = uniqueName("BUSY");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: quiet, subjects: [`${quiet}.>`] });
  await createStream(ncb, {
    name: dst,
    subjects: [`${quiet}.>`, `${busy}.>`],
    ...(opts.dstDuplicateWindowMs ? { duplicateWindowMs: opts.dstDuplicateWindowMs } : {}),
  });
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [
      { name: LINK, from: "a", fromStream: quiet, to: "b", toStream: dst, extra: "    startAt: new\n" },
    ],
  });
  return { nca, ncb, quiet, busy, dst, yaml };
}

/** An in-process relay of region b, stopped when the test ends. */
function startRelay(t: { after(fn: () => unknown): void }, yaml: string) {
  return startRelayIn(t, yaml, "b");
}

/** `count` messages of link busy, straight into DST as that link stores them (its markers, its link name). */
async function busyFill(
  s: Setup,
  count: number,
  opts: { subject?: string; region?: string } = {},
): Promise<void> {
  await fillStream(s.ncb, opts.subject ?? s.busy, count, {
    headers: (i) => {
      const h = headers();
      h.set("Relay-Source", `${opts.region ?? "a"} ${s.busy} ${i + 1}`);
      h.set("Relay-Link", "busy");
      return h;
    },
  });
}

/** The quiet link's ids in DST, in destination order (a filtered read: DST holds the busy ones too). */
async function quietIds(s: Setup): Promise<string[]> {
  const jsm = await jetstreamManager(s.ncb);
  const info = await jsm.streams.info(s.dst, { subjects_filter: `${s.quiet}.q.>` });
  const total = Object.values(info.state.subjects ?? {}).reduce((a, n) => a + n, 0);
  if (total === 0) return [];
  const consumer = await jetstream(s.ncb).consumers.get(s.dst, {
    filter_subjects: `${s.quiet}.q.>`,
    deliver_policy: DeliverPolicy.All,
  });
  const ids: string[] = [];
  const iter = await consumer.consume({ max_messages: 500 });
  const timer = setTimeout(() => void iter.stop(), 10_000);
  for await (const m of iter) {
    ids.push(m.headers?.get("Nats-Msg-Id") ?? "");
    if (ids.length >= total) break;
  }
  clearTimeout(timer);
  await iter.close();
  return ids;
}

async function quietCount(s: Setup): Promise<number> {
  const info = await (
    await jetstreamManager(s.ncb)
  ).streams.info(s.dst, { subjects_filter: `${s.quiet}.q.>` });
  return Object.values(info.state.subjects ?? {}).reduce((a, n) => a + n, 0);
}

async function caughtUp(s: Setup, what: string): Promise<void> {
  const jsm = await jetstreamManager(s.nca);
  await check(
    async () => {
      const info = await jsm.consumers.info(s.quiet, DURABLE).catch(() => undefined);
      return info !== undefined && info.num_pending === 0 && info.num_ack_pending === 0;
    },
    { name: `${what}: the quiet link's consumer has nothing pending`, timeoutMs: 15_000, intervalMs: 100 },
  );
}

/** Every quiet id once, in source order. */
async function assertAllOnceInOrder(s: Setup, expected: readonly string[]): Promise<void> {
  const ids = await quietIds(s);
  const { missing, duplicated } = exactlyOnce(ids, expected);
  assert.deepEqual(
    { missing: missing.slice(0, 10), missingCount: missing.length, duplicated: duplicated.slice(0, 10) },
    { missing: [], missingCount: 0, duplicated: [] },
  );
  assert.deepEqual(ids, [...expected], "in source order");
}

/** Once the quiet link has its consumer: 100 quiet messages published and relayed; their ids. */
async function relayFirstHundred(s: Setup): Promise<string[]> {
  await check(
    () =>
      jetstreamManager(s.nca)
        .then((j) => j.consumers.info(s.quiet, DURABLE))
        .then(
          () => true,
          () => false,
        ),
    { name: "the quiet link created its consumer", timeoutMs: 10_000, intervalMs: 50 },
  );
  const first = await publishIds(s.nca, `${s.quiet}.q`, "q", 100);
  await check(async () => (await quietCount(s)) >= 100, {
    name: "the quiet link relayed its first 100",
    timeoutMs: 15_000,
    intervalMs: 100,
  });
  return first;
}

/** Run 1: the quiet link relays 100, then `busy` messages of the busy link follow them into DST; the relay stops. */
async function quietThenBusy(
  t: { after(fn: () => unknown): void },
  s: Setup,
  busy: number,
): Promise<string[]> {
  const run1 = await startRelay(t, s.yaml);
  await check(() => (run1.relay.status().links[0]?.state ?? "") === "live" || undefined, {
    name: "the quiet link is live",
    timeoutMs: 15_000,
    intervalMs: 50,
  });
  const first = await relayFirstHundred(s);
  await caughtUp(s, "run 1");
  await busyFill(s, busy);
  await run1.relay.stop(AbortSignal.timeout(5_000));
  return first;
}

/** The relay down: the quiet link's durable deleted (an operator's clean-up), 100 more quiet messages published. */
async function loseDurableWhileDown(s: Setup): Promise<string[]> {
  await (await jetstreamManager(s.nca)).consumers.delete(s.quiet, DURABLE);
  return publishIds(s.nca, `${s.quiet}.q`, "q", 100, 100);
}

test("a quiet link's consumer lost behind 250,000 busy messages (the real scan bound): the checkpoint says where it was, nothing missing, nothing twice", async (t) => {
  const s = await setup(t);
  const filled = performance.now();
  const first = await quietThenBusy(t, s, 250_000);
  t.diagnostic(`run 1 with 250,000 busy messages: ${Math.round(performance.now() - filled)} ms`);
  const more = await loseDurableWhileDown(s);
  const placed = performance.now();
  const run2 = await startRelay(t, s.yaml);
  await check(async () => (await quietCount(s)) >= 200 || run2.relay.status().links[0]?.state === "failed", {
    name: "the quiet link relayed what was published while its consumer was gone",
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  await caughtUp(s, "run 2");
  t.diagnostic(`run 2 placed the consumer and relayed 100: ${Math.round(performance.now() - placed)} ms`);
  await assertAllOnceInOrder(s, [...first, ...more]);
  assert.equal(
    await metricValue(run2.relay, "relay_cursor_placements_total", { link: LINK, from: "checkpoint" }),
    1,
    "placed by the checkpoint",
  );
  assert.equal(await metricValue(run2.relay, "relay_gap_messages_total", { link: LINK }), 0, "no gap");
  await run2.relay.stop(AbortSignal.timeout(5_000));
});

test("no checkpoint and the scan's bound reached without the link's record: the link halts with POSITION_UNKNOWN; link start-at lets it go on", async (t) => {
  const s = await setup(t);
  const first = await quietThenBusy(t, s, 250_000);
  const more = await loseDurableWhileDown(s);
  // No checkpoint either (a group bucket lost, or one never written).
  const config = parseConfigText(s.yaml, "test.yaml", process.env);
  const unit = config.links[0];
  assert.ok(unit);
  const kv = await new Kvm(s.ncb).open(config.group.bucket);
  assert.ok(await kv.get(checkpointKey(leaseKey(unit))), "the owner wrote a checkpoint");
  await kv.purge(checkpointKey(leaseKey(unit)));

  const scanFrom = performance.now();
  const run2 = await startRelay(t, s.yaml);
  const halted = await check(
    () => (run2.relay.status().links[0]?.state === "failed" ? run2.relay.status().links[0] : undefined),
    { name: "the quiet link halts", timeoutMs: 15_000, intervalMs: 50 },
  );
  t.diagnostic(
    `halted after scanning 200,000 destination messages: ${Math.round(performance.now() - scanFrom)} ms`,
  );
  assert.equal(halted.lastError?.code, "POSITION_UNKNOWN");
  assert.match(
    halted.lastError?.message ?? "",
    new RegExp(
      `link ${LINK}: .*none of its messages is in the last 200000 messages of destination stream ${s.dst}`,
    ),
  );
  assert.match(halted.lastError?.message ?? "", /jetstream-relay link start-at quiet --seq N/);
  assert.equal(
    await metricValue(run2.relay, "relay_cursor_placements_total", { link: LINK, from: "unknown" }),
    1,
  );
  assert.equal(await quietCount(s), 100, "nothing guessed: nothing relayed");
  assert.equal(
    await (await jetstreamManager(s.nca)).consumers.info(s.quiet, DURABLE).then(
      () => true,
      () => false,
    ),
    false,
    "no consumer created",
  );
  await run2.relay.stop(AbortSignal.timeout(5_000));

  // The operator knows the first 100 are in DST: start at source seq 101.
  const file = await writeConfig(s.yaml);
  const cli = spawnRelay(t, [
    "link",
    "start-at",
    LINK,
    "--seq",
    "101",
    "--config",
    file,
    "--reason",
    "consumer lost",
  ]);
  assert.equal(await cli.exited, 0, cli.output());
  assert.match(cli.output(), /quiet: start at source seq 101/);

  const run3 = await startRelay(t, s.yaml);
  await check(async () => (await quietCount(s)) >= 200 || run3.relay.status().links[0]?.state === "failed", {
    name: "the quiet link goes on from the explicit start",
    timeoutMs: 15_000,
    intervalMs: 100,
  });
  await caughtUp(s, "run 3");
  await assertAllOnceInOrder(s, [...first, ...more]);
  assert.equal(
    await metricValue(run3.relay, "relay_cursor_placements_total", { link: LINK, from: "explicit" }),
    1,
  );
  assert.equal(
    await kv.get(startKey(leaseKey(unit))).then((e) => e?.operation ?? "none"),
    "DEL",
    "the explicit start is used once",
  );
  await run3.relay.stop(AbortSignal.timeout(5_000));
});

test("a heal that deletes the consumer (stall, silent path) re-creates it at its ack floor + 1: not at startAt, whatever fills the destination", async (t) => {
  // A short duplicate window: a message sent twice after it is stored twice, as past 2 minutes.
  const s = await setup(t, { dstDuplicateWindowMs: 1_000 });
  const run = await startRelay(t, s.yaml);
  const first = await relayFirstHundred(s);
  await caughtUp(s, "before the heal");
  // Past the real scan bound: the link's last record is deeper than any scan reads.
  await busyFill(s, 250_000);
  const filled = Date.now();
  await check(() => Date.now() > filled + 1_500, {
    name: "the destination's duplicate window passed",
    timeoutMs: 5_000,
    intervalMs: 50,
  });
  // The step the stall watch ("consumer") and the silent-path watch take.
  const link = (run.relay as unknown as { links: { loop: { heal(step: "consumer"): Promise<void> } }[] })
    .links[0];
  assert.ok(link);
  await link.loop.heal("consumer");
  const more = await publishIds(s.nca, `${s.quiet}.q`, "q", 100, 100);
  await check(async () => (await quietCount(s)) >= 200, {
    name: "the quiet link relayed what was published after the heal",
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  await caughtUp(s, "after the heal");
  await assertAllOnceInOrder(s, [...first, ...more]);
  // The new consumer delivered only what came after its ack floor, not the link's whole history again
  // (in one process the pipeline's memory of finished seqs hides such a replay; past it, or after a
  // restart, it is stored twice).
  const info = await (await jetstreamManager(s.nca)).consumers.info(s.quiet, DURABLE);
  assert.equal(
    info.delivered.consumer_seq,
    100,
    "the re-created consumer delivered the 100 new messages only",
  );
  assert.equal(
    await metricValue(run.relay, "relay_cursor_placements_total", { link: LINK, from: "heal" }),
    1,
    "placed at the deleted consumer's ack floor + 1",
  );
  await run.relay.stop(AbortSignal.timeout(5_000));
});

test("a new link on a destination that another link filled past the scan's bound: no message on its subjects is certain, startAt applies", async (t) => {
  const s = await setup(t);
  await busyFill(s, 250_000);
  const old = await publishIds(s.nca, `${s.quiet}.q`, "q", 10);
  const { relay } = await startRelay(t, s.yaml.replace("startAt: new", "startAt: earliest"));
  const live = await publishIds(s.nca, `${s.quiet}.q`, "q", 10, 10);
  await check(async () => (await quietCount(s)) >= 20 || relay.status().links[0]?.state === "failed", {
    name: "the new link relays from startAt earliest",
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  await caughtUp(s, "new link");
  await assertAllOnceInOrder(s, [...old, ...live]);
  assert.equal(
    await metricValue(relay, "relay_cursor_placements_total", { link: LINK, from: "start_at" }),
    1,
  );
  await relay.stop(AbortSignal.timeout(5_000));
});

test("the quiet link's source stream re-created while the relay is down, behind 250,000 busy messages: the checkpoint of the old incarnation says all of the new one is new", async (t) => {
  const s = await setup(t);
  const first = await quietThenBusy(t, s, 250_000);
  const jsm = await jetstreamManager(s.nca);
  await jsm.streams.delete(s.quiet);
  await createStream(s.nca, { name: s.quiet, subjects: [`${s.quiet}.>`] });
  const again = await publishIds(s.nca, `${s.quiet}.q`, "r", 50);
  const run2 = await startRelay(t, s.yaml);
  await check(async () => (await quietCount(s)) >= 150 || run2.relay.status().links[0]?.state === "failed", {
    name: "the quiet link relays the new incarnation from its start",
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  await caughtUp(s, "new incarnation");
  await assertAllOnceInOrder(s, [...first, ...again]);
  assert.equal(
    await metricValue(run2.relay, "relay_cursor_placements_total", { link: LINK, from: "checkpoint" }),
    1,
  );
  await run2.relay.stop(AbortSignal.timeout(5_000));
});

test("a new link whose subjects another link fills past the scan's bound: it halts (no record cannot be told), and link start-at --as-configured starts it at its startAt", async (t) => {
  const s = await setup(t);
  // Another region's link writes the same subjects into DST (an aggregating mesh).
  await busyFill(s, 250_000, { subject: `${s.quiet}.other`, region: "c" });
  const old = await publishIds(s.nca, `${s.quiet}.q`, "q", 10);
  const yaml = s.yaml.replace("startAt: new", "startAt: earliest");
  const run1 = await startRelay(t, yaml);
  const halted = await check(
    () => (run1.relay.status().links[0]?.state === "failed" ? run1.relay.status().links[0] : undefined),
    {
      name: "the new link halts",
      timeoutMs: 20_000,
      intervalMs: 50,
    },
  );
  assert.equal(halted.lastError?.code, "POSITION_UNKNOWN");
  await run1.relay.stop(AbortSignal.timeout(5_000));

  const file = await writeConfig(yaml);
  const cli = spawnRelay(t, ["link", "start-at", LINK, "--as-configured", "--config", file]);
  assert.equal(await cli.exited, 0, cli.output());
  assert.match(cli.output(), /quiet: start where its startAt says \(earliest\)/);
  const run2 = await startRelay(t, yaml);
  const live = await publishIds(s.nca, `${s.quiet}.q`, "q", 10, 10);
  await check(async () => (await quietCount(s)) >= 20 || run2.relay.status().links[0]?.state === "failed", {
    name: "the new link relays from startAt earliest",
    timeoutMs: 20_000,
    intervalMs: 100,
  });
  await caughtUp(s, "as configured");
  await assertAllOnceInOrder(s, [...old, ...live]);
  assert.equal(
    await metricValue(run2.relay, "relay_cursor_placements_total", { link: LINK, from: "explicit" }),
    1,
  );
  await run2.relay.stop(AbortSignal.timeout(5_000));
});
