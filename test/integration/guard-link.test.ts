import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import type { withServers } from "../helpers/servers.js";
import { check, uniqueName } from "../helpers/check.js";
import { createCursorFromStart, createStream, publishMany, readStream, streamCount } from "../helpers/streams.js";
import { metricValue, spawnRelay, startRelay, writeConfig } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";

type T = Parameters<typeof withServers>[0];

/** Two regions plus a real redis-server for the guard (AOF on unless told otherwise). */
async function withRedis(t: T, opts: { dupWindowMs?: number; appendonly?: boolean } = {}) {
  const r = await twoRegions(t, opts.dupWindowMs ? { dstDuplicateWindowMs: opts.dupWindowMs } : {});
  const redis = await r.servers.startRedis({ appendonly: opts.appendonly ?? true });
  return { ...r, redis };
}

test("redelivery after the destination's duplicate window: the guard keeps a second copy out", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t, { dupWindowMs: 1_000 });
  const guard = `    guard: { redis: { url: "${redis.url}" }, idTtl: 1h }\n`;
  const ids = await publishIds(nca, src, "m", 200);
  const first = await startRelay(t, yaml(`    durable: first\n${guard}`), "b");
  await waitForCount(ncb, dst, 200, 30_000);
  await first.relay.stop();
  // Past the 1 s window, the same messages are delivered again (here: a cursor that starts over).
  const windowOver = Date.now() + 3_000;
  await check(() => Date.now() > windowOver, { name: "3 s past the duplicate window", timeoutMs: 5_000 });
  await createCursorFromStart(nca, src, "second");
  await createCursorFromStart(nca, src, "third");
  const second = await startRelay(t, yaml(`    durable: second\n${guard}`), "b");
  await check(async () => (await metricValue(second.relay, "relay_corrections_total", { kind: "guard_duplicate" })) === 200, {
    name: "200 guard duplicates counted",
    timeoutMs: 30_000,
  });
  assert.equal(await metricValue(second.relay, "relay_messages_total", { outcome: "duplicate" }), 200);
  await assertExactlyOnce(ncb, dst, ids);
  // Control: without the guard the same replay does make second copies, so the guard is what held.
  await second.relay.stop();
  const unguarded = await startRelay(t, yaml(`    durable: third\n`), "b");
  await waitForCount(ncb, dst, 400, 30_000, "unguarded replay stores copies");
  await unguarded.relay.stop();
});

test("versions 82 then 81 of one entity: 81 is stale, the destination's last state is 82", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  const guard = `    guard: { redis: { url: "${redis.url}" }, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`;
  const { relay } = await startRelay(t, yaml(guard), "b");
  await publishMany(nca, 1, () => ({ subject: `${src}.presence`, headers: { "Nats-Msg-Id": "ev-82", "Entity-Id": "u-17", "Entity-Version": "82" } }));
  await waitForCount(ncb, dst, 1, 20_000);
  await publishMany(nca, 1, () => ({ subject: `${src}.presence`, headers: { "Nats-Msg-Id": "ev-81", "Entity-Id": "u-17", "Entity-Version": "81" } }));
  await publishMany(nca, 1, () => ({ subject: `${src}.presence`, headers: { "Nats-Msg-Id": "ev-90", "Entity-Id": "u-99", "Entity-Version": "1" } }));
  await waitForCount(ncb, dst, 2, 20_000);
  await check(async () => (await metricValue(relay, "relay_corrections_total", { kind: "stale_version" })) === 1, { name: "one stale version counted" });
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "stale" }), 1);
  const stored = await readStream(ncb, dst);
  const u17 = stored.filter((m) => m.headers["Entity-Id"] === "u-17");
  assert.deepEqual(u17.map((m) => m.headers["Entity-Version"]), ["82"]);
  assert.deepEqual(stored.map((m) => m.headers["Nats-Msg-Id"]), ["ev-82", "ev-90"]);
});

test("an older version in a later batch, while the newer one is still unconfirmed, is stale too", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  const guard = `    batchSize: 1\n    guard: { redis: { url: "${redis.url}" }, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`;
  // Per entity: version 2 then version 1, one claim batch each (batchSize 1), back to back.
  const entities = 100;
  await publishMany(nca, entities * 2, (i) => {
    const e = Math.floor(i / 2);
    const version = i % 2 === 0 ? "2" : "1";
    return { subject: `${src}.e`, headers: { "Nats-Msg-Id": `e${e}-v${version}`, "Entity-Id": `e${e}`, "Entity-Version": version } };
  }, 1);
  const { relay } = await startRelay(t, yaml(guard), "b");
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "stale" })) + (await metricValue(relay, "relay_messages_total", { outcome: "relayed" })) === entities * 2, {
    name: "every message decided",
    timeoutMs: 30_000,
  });
  assert.equal(await metricValue(relay, "relay_messages_total", { outcome: "stale" }), entities);
  const stored = await readStream(ncb, dst);
  assert.equal(stored.length, entities);
  assert.ok(stored.every((m) => m.headers["Entity-Version"] === "2"), "no entity ends on version 1");
});

test("two relay processes racing on the same messages: each id is published once", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t, { dupWindowMs: 1_000 });
  const ids = await publishIds(nca, src, "race", 5_000);
  const guard = `    guard: { redis: { url: "${redis.url}" }, claimTtl: 30s }\n`;
  const extra = 'http: { listen: "127.0.0.1:0" }\n';
  // Two cursors over the same source: both relays see every message.
  await createCursorFromStart(nca, src, "one");
  await createCursorFromStart(nca, src, "two");
  const p1 = spawnRelay(t, ["run", "--config", await writeConfig(yaml(`    durable: one\n${guard}`) + extra), "--region", "b"]);
  const p2 = spawnRelay(t, ["run", "--config", await writeConfig(yaml(`    durable: two\n${guard}`) + extra), "--region", "b"]);
  await waitForCount(ncb, dst, ids.length, 60_000);
  const [u1, u2] = [await p1.httpUrl(), await p2.httpUrl()];
  // Wait until both cursors have passed every message (each decided relay, duplicate or in-flight → later duplicate).
  const handled = async (url: string) => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const get = (outcome: string) => Number(new RegExp(`relay_messages_total\\{link="a-to-b",outcome="${outcome}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
    const broker = Number(/relay_corrections_total\{link="a-to-b",kind="broker_duplicate"\} (\d+)/.exec(text)?.[1] ?? 0);
    return { relayed: get("relayed"), duplicate: get("duplicate"), broker };
  };
  const [h1, h2] = await check(
    async () => {
      const r = [await handled(u1), await handled(u2)] as const;
      return r[0].relayed + r[0].duplicate === ids.length && r[1].relayed + r[1].duplicate === ids.length ? r : undefined;
    },
    { name: "both relays passed every message", timeoutMs: 90_000, intervalMs: 250 },
  );
  assert.equal(h1.relayed + h2.relayed, ids.length, "every id relayed by exactly one of them");
  assert.equal(h1.broker + h2.broker, 0, "no publish reached the broker twice");
  await assertExactlyOnce(ncb, dst, ids);
});

test("Redis killed and restarted mid-transfer: the link pauses, resumes, and nothing is lost or doubled", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  const ids = await publishIds(nca, src, "m", 10_000);
  const { relay, logs } = await startRelay(t, yaml(`    batchSize: 100\n    inFlight: 200\n    guard: { redis: { url: "${redis.url}" } }\n`), "b", { level: "debug" });
  await waitForCount(ncb, dst, 1_000, 30_000);
  await redis.kill();
  await check(() => relay.status().links[0]?.state === "paused", { name: "link paused", timeoutMs: 15_000 });
  const during = await streamCount(ncb, dst);
  await delay(1_000); // a second of outage: the count must not move while paused
  assert.ok((await streamCount(ncb, dst)) - during <= 200, "at most the in-flight window lands while paused");
  assert.ok(during < ids.length, "Redis died mid-transfer");
  await redis.restart();
  await waitForCount(ncb, dst, ids.length, 60_000, "after Redis came back").catch((err: unknown) => {
    console.error(JSON.stringify(relay.status(), null, 1), logs.lines.filter((l) => !l.includes('"decision"')).slice(-40).join("\n"));
    throw err;
  });
  await check(() => relay.status().links[0]?.state === "live", { name: "link live again", timeoutMs: 20_000 });
  await assertExactlyOnce(ncb, dst, ids);
  assert.ok((await metricValue(relay, "relay_errors_total", { code: "GUARD_UNAVAILABLE" })) > 0);
});

test("Redis down when the relay starts: the link starts paused and runs once Redis is up", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  await redis.stop();
  const ids = await publishIds(nca, src, "m", 100);
  const { relay } = await startRelay(t, yaml(`    guard: { redis: { url: "${redis.url}" } }\n`), "b");
  assert.equal(relay.status().links[0]?.state, "paused");
  assert.equal(await streamCount(ncb, dst), 0);
  await redis.restart();
  await waitForCount(ncb, dst, ids.length, 30_000);
  await assertExactlyOnce(ncb, dst, ids);
});

test("claims of unpublished messages are released on stop: another relay takes them at once", async (t) => {
  const { b, redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  const guard = `    guard: { redis: { url: "${redis.url}" }, claimTtl: 10m }\n`;
  const first = await startRelay(t, yaml(guard), "b");
  await check(() => first.relay.status().links[0]?.state === "live", { name: "link live (its cursor placed)", timeoutMs: 20_000 });
  await b.stop(); // publishes fail after the claims were taken
  const ids = await publishIds(nca, src, "m", 50);
  await check(async () => first.relay.status().links[0]?.inFlight === 50 && (await metricValue(first.relay, "relay_guard_duration_seconds_count", { op: "claim" })) > 0, {
    name: "all 50 claimed and held: the destination is down",
    timeoutMs: 20_000,
  });
  await first.relay.stop(AbortSignal.timeout(1_000));
  await b.restart();
  await startRelay(t, yaml(guard), "b");
  // With a 10-minute claim TTL, only released claims let this happen within seconds.
  await waitForCount(ncb, dst, ids.length, 30_000);
  await assertExactlyOnce(ncb, dst, ids);
});

test("bad version headers go to the dead-letter subject with the reason; halt stops the link", async (t) => {
  const { redis, src, dst, nca, ncb, yaml } = await withRedis(t);
  const dlq = uniqueName("DLQ");
  await createStream(ncb, { name: dlq, subjects: [`dlq.${dlq}`] });
  const versions = `versions: { entity: "header:Entity-Id", version: "header:Entity-Version" }`;
  const { relay } = await startRelay(t, yaml(`    onBadMessage: { deadLetter: "dlq.${dlq}" }\n    guard: { redis: { url: "${redis.url}" }, ${versions} }\n`), "b");
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": "bad-1", "Entity-Id": "e", "Entity-Version": "v12" } }));
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": "bad-2", "Entity-Id": "e" } }));
  await publishMany(nca, 1, () => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": "good-1", "Entity-Id": "e", "Entity-Version": "3" } }));
  await waitForCount(ncb, dlq, 2, 20_000);
  await waitForCount(ncb, dst, 1, 20_000);
  const parked = await readStream(ncb, dlq);
  assert.deepEqual(parked.map((m) => m.headers["Nats-Msg-Id"]), ["bad-1", "bad-2"]);
  assert.match(parked[0]?.headers["Relay-Dead-Letter-Reason"] ?? "", /malformed version "v12"/);
  assert.match(parked[1]?.headers["Relay-Dead-Letter-Reason"] ?? "", /missing version/);
  assert.equal(parked[0]?.headers["Relay-Dead-Letter-Link"], "a-to-b");
  assert.deepEqual((await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]), ["good-1"]);
  await check(async () => (await metricValue(relay, "relay_messages_total", { outcome: "dead_lettered" })) === 2, { name: "2 dead-lettered" });
  // /status (and `jetstream-relay status`) say so: counts by outcome and the last error, with the message id.
  const status = relay.status().links[0];
  assert.equal(status?.messages?.["dead_lettered"], 2);
  assert.equal(status?.messages?.["relayed"], 1);
  assert.equal(status?.lastError?.code, "BAD_MESSAGE");
  assert.match(status?.lastError?.message ?? "", /bad-2.*missing version/);
  await relay.stop();

  await createCursorFromStart(nca, src, "strict");
  const halted = await startRelay(t, yaml(`    durable: strict\n    onBadMessage: halt\n    guard: { memory: true, ${versions} }\n`), "b");
  await check(() => halted.relay.status().links[0]?.state === "failed", { name: "link failed on the bad message", timeoutMs: 20_000 });
  assert.match(halted.relay.status().links[0]?.lastError?.message ?? "", /bad-1.*malformed version/);
});
