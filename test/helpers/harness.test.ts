import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { check, uniqueName } from "./check.js";
import { startDelayProxy } from "./delay-proxy.js";
import { LocalBackend } from "./local-backend.js";
import { createBackend, withServers } from "./servers.js";
import { makeTlsCerts } from "./tls.js";
import type { NatsNode } from "./types.js";

/** Tests of the test harness itself, against real nats-server / redis-server processes. */

async function withConn<T>(servers: string | string[], fn: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers, timeout: 5_000 });
  try {
    return await fn(nc);
  } finally {
    await nc.close();
  }
}

async function streamMessages(url: string, stream: string): Promise<number> {
  return withConn(
    url,
    async (nc) => (await (await jetstreamManager(nc)).streams.info(stream)).state.messages,
  );
}

async function monitorOk(node: NatsNode, path = "/varz"): Promise<boolean> {
  const res = await fetch(`${mon(node)}${path}`, { signal: AbortSignal.timeout(500) });
  await res.arrayBuffer();
  return res.ok;
}

const mon = (n: NatsNode): string => `http://127.0.0.1:${n.monitorPort}`;
type JszMeta = { meta_cluster?: { leader?: string } };

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

void test("single node: JetStream works; kill + restart keeps ports and data; pause/resume", async (t) => {
  const servers = withServers(t);
  const nats = await servers.startNats();
  assert.match(nats.url, /^nats:\/\/127\.0\.0\.1:\d+$/);
  assert.notEqual(nats.port, 4222);
  const stream = uniqueName("HARNESS");
  await withConn(nats.url, async (nc) => {
    await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: [`${stream}.>`] });
    const js = jetstream(nc);
    for (let i = 0; i < 3; i++) await js.publish(`${stream}.x`, `m${i}`);
  });

  const { port, monitorPort } = nats;
  await nats.kill();
  assert.equal(nats.running, false);
  await nats.kill(); // idempotent
  await nats.restart();
  assert.equal(nats.running, true);
  assert.deepEqual([nats.port, nats.monitorPort], [port, monitorPort]);
  assert.equal(await streamMessages(nats.url, stream), 3);

  await nats.pause();
  // A SIGSTOPped server still has its listening socket, but nothing answers.
  await assert.rejects(monitorOk(nats));
  await nats.resume();
  await check(() => monitorOk(nats), { name: "monitor answers after resume" });
  assert.equal(await streamMessages(nats.url, stream), 3);

  await nats.stop();
  await nats.stop(); // idempotent
  assert.equal(nats.running, false);
});

void test("3-node cluster: R3 stream survives a node kill; the node rejoins and catches up", async (t) => {
  const servers = withServers(t);
  const cluster = await servers.startNatsCluster({ size: 3 });
  assert.equal(cluster.nodes.length, 3);
  const stream = uniqueName("R3");
  const victim = await withConn([...cluster.urls], async (nc) => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], num_replicas: 3 });
    const js = jetstream(nc);
    for (let i = 0; i < 5; i++) await js.publish(`${stream}.x`, `m${i}`);

    // Kill a follower of both the stream and the meta group: losing a leader costs a 4-9 s raft
    // election in nats-server 2.9, which would make this harness test slow and its timing random.
    const streamLeader = (await jsm.streams.info(stream)).cluster?.leader;
    const metaLeader = ((await (await fetch(`${mon(cluster.nodes[0]!)}/jsz`)).json()) as JszMeta).meta_cluster
      ?.leader;
    const victim = cluster.nodes.find((n) => n.name !== streamLeader && n.name !== metaLeader)!;
    await victim.kill();
    // Retry: the stream may need a new leader, and our connection may have been on the victim.
    // Short per-attempt timeout: the default 5 s would dominate the test if the first attempt is lost.
    await check(() => js.publish(`${stream}.x`, "after-kill", { timeout: 1_000 }), {
      name: "publish with one node down",
    });
    await victim.restart();
    assert.equal(victim.running, true);
    return victim;
  });
  // The restarted replica must have replicated everything, including what it missed.
  await check(async () => (await streamMessages(victim.url, stream)) === 6, { name: "6 msgs via victim" });
  await check(
    async () => {
      const res = await fetch(`${mon(victim)}/jsz?accounts=true&streams=true`);
      const jsz = (await res.json()) as {
        account_details?: { stream_detail?: { name: string; state: { messages: number } }[] }[];
      };
      const detail = jsz.account_details
        ?.flatMap((a) => a.stream_detail ?? [])
        .find((s) => s.name === stream);
      return detail?.state.messages === 6;
    },
    { name: "restarted node's own replica has 6 messages", timeoutMs: 15_000 },
  );
  await cluster.waitHealthy?.();
});

void test("leafnode: a leaf with a remote connects to the hub's learned leaf port", async (t) => {
  const servers = withServers(t);
  const hub = await servers.startNats({ domain: "hub", leafListen: true });
  assert.ok(hub.leafPort && hub.leafPort > 0);
  await servers.startNats({ domain: "leaf", leafRemotes: [`nats-leaf://127.0.0.1:${hub.leafPort}`] });
  await check(
    async () => {
      const res = await fetch(`http://127.0.0.1:${hub.monitorPort}/leafz`);
      return ((await res.json()) as { leafnodes?: number }).leafnodes === 1;
    },
    { name: "hub /leafz shows 1 leafnode" },
  );
});

void test("leafnode through delay proxies: one connection per leaf, and it stays on a proxy (the hub advertises no direct URL)", async (t) => {
  const servers = new LocalBackend(); // the local backend's cluster takes per-node options
  t.after(() => servers.cleanup());
  const hub = await servers.startNatsCluster({ domain: "hub", node: () => ({ leafListen: true, noAdvertise: true }) });
  const proxies = await Promise.all(hub.nodes.map((n) => startDelayProxy({ port: n.leafPort ?? -1, oneWayMs: 5 })));
  t.after(() => Promise.all(proxies.map((p) => p.close())));
  const leaf = await servers.startNats({ domain: "leaf", leafRemotes: proxies.map((p) => `nats-leaf://127.0.0.1:${p.port}`) });
  const proxyPorts = new Set(proxies.map((p) => p.port));
  const leafs = async () => (((await (await fetch(`http://127.0.0.1:${leaf.monitorPort}/leafz`)).json()) as { leafs?: { port: number }[] | null }).leafs ?? []);
  // One remote with every URL: a remote per URL made the hub refuse all but one as a loop (30 s apart).
  await check(async () => (await leafs()).length === 1, { name: "the leaf has its one leafnode connection", timeoutMs: 15_000 });
  const [conn] = await leafs();
  assert.ok(conn && proxyPorts.has(conn.port), `the leafnode connection goes through a proxy (port ${conn?.port}, proxies ${[...proxyPorts].join(", ")})`);
});

void test("redis: appendonly data survives kill + restart on the same port", async (t) => {
  const servers = withServers(t);
  const redis = await servers.startRedis({ appendonly: true, password: "p w" });
  const use = async <T>(fn: (r: Redis) => Promise<T>): Promise<T> => {
    const r = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    try {
      return await fn(r);
    } finally {
      r.disconnect();
    }
  };
  await use((r) => r.set("harness", "kept"));
  const port = redis.port;
  await redis.kill();
  assert.equal(redis.running, false);
  await redis.restart();
  assert.equal(redis.port, port);
  assert.equal(await use((r) => r.get("harness")), "kept");
});

void test("TLS + user/password: accepts a TLS client that trusts the CA, rejects bad credentials", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "relay-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const certs = await makeTlsCerts(dir);
  const servers = withServers(t);
  const nats = await servers.startNats({
    tls: { certFile: certs.certFile, keyFile: certs.keyFile },
    user: { user: "relay", password: "s3cret" },
  });
  assert.match(nats.url, /^tls:\/\//);
  const tls = { caFile: certs.caFile };
  const nc = await connect({ servers: nats.url, tls, user: "relay", pass: "s3cret", timeout: 5_000 });
  await nc.flush();
  await nc.close();
  await assert.rejects(connect({ servers: nats.url, tls, user: "relay", pass: "wrong", reconnect: false }));
});

void test("cleanup kills every process (paused ones too) and removes temp dirs", async () => {
  const backend = createBackend();
  const nats = await backend.startNats();
  const redis = await backend.startRedis();
  await nats.pause();
  const pids = [nats.pid, redis.pid];
  assert.ok(pids.every((p) => typeof p === "number" && alive(p)));
  await backend.cleanup();
  await backend.cleanup(); // idempotent
  assert.deepEqual(
    pids.filter((p) => alive(p!)),
    [],
  );
  assert.equal(existsSync(nats.storeDir), false);
});

test("config files the tests write are removed when the test process exits", async () => {
  const { execFileSync } = await import("node:child_process");
  const helper = new URL("./relays.ts", import.meta.url).pathname;
  const script = `import { writeConfig } from ${JSON.stringify(helper)}; const p = await writeConfig("regions: {}\\n"); console.log(p);`;
  const out = execFileSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8" });
  const path = out.trim().split("\n").at(-1) ?? "";
  assert.match(path, /relay-cfg-.*\/relay\.yaml$/);
  assert.equal(existsSync(path), false, `${path} is gone`);
});

test("the delay proxy holds every byte for its one-way delay each way, in order", async () => {
  const { createServer, connect: connectTcp } = await import("node:net");
  const { startDelayProxy } = await import("./delay-proxy.js");
  const echo = createServer((s) => s.pipe(s));
  await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
  const proxy = await startDelayProxy({ port: (echo.address() as { port: number }).port, oneWayMs: 30 });
  const socket = connectTcp({ port: proxy.port, host: "127.0.0.1" });
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  const got: string[] = [];
  const sent = Date.now();
  const back = new Promise<number>((resolve) =>
    socket.on("data", (d: Buffer) => {
      got.push(d.toString());
      if (got.join("").length === 6) resolve(Date.now() - sent);
    }),
  );
  socket.write("abc");
  socket.write("def");
  const rtt = await back;
  assert.equal(got.join(""), "abcdef");
  assert.ok(rtt >= 58, `a round trip through it takes at least 2 × 30 ms (took ${rtt} ms)`);
  socket.destroy();
  await proxy.close();
  await new Promise<void>((resolve) => echo.close(() => resolve()));
});
