import { test } from "node:test";
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { env } from "node:process";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { LocalBackend } from "../helpers/local-backend.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";
import type { BlackHoleProxy } from "../helpers/blackhole-proxy.js";
import { connectTo, createStream, streamCount } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";
import type { NatsNode, RedisNode } from "../helpers/types.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";
import { scrapeMetric, settled, terminate, withReport } from "./process-harness.js";
import { chaosSchedule, describeSchedule } from "./chaos/schedule.js";
import type { ScheduledFault } from "./chaos/schedule.js";
import { startChaosLoad } from "./chaos/load.js";
import { startBucketProbe } from "./chaos/bucket-probe.js";

/**
 * The chaos soak: every fault the fault matrix knows, on a seeded random schedule, against the
 * topology production runs — two 3-node regions with R3 streams, the source region reached through
 * one proxy per node (it advertises no other URLs, so the relay cannot route around a black hole), a
 * group of two relay processes with the Redis guard and per-entity versions — under a steady load
 * whose versions rise in source order (one publish at a time).
 *
 * The verdict is the shared checker's, judged on the data before any guard decision: every source id
 * in the destination exactly once, in source order (overall and per subject), no version going back.
 * A message the guard dropped as a stale version at its claim is a violation here: the source held it
 * in order, and only the relay can have put it behind a newer one. The one exception is a retry the
 * relay judged again after a newer version of its entity was stored while its first attempt failed
 * (relay_stale_retries_total): it is missing, and a newer version of its entity is in the destination.
 *
 *   npm test                                     the short soak (1.5 minutes, seed 21: every fault kind once)
 *   npm run test:chaos -- --seed N --minutes M   any seed, any length (a random seed when none given)
 */

const SEED = Number(process.env["CHAOS_SEED"] ?? 21);
const MINUTES = Number(process.env["CHAOS_MINUTES"] ?? 1.5);
const RATE = 400;
const ENTITIES = 50;
const LEASE_MS = 3_000;
/**
 * CHAOS_ORDER=strict (`npm run test:chaos -- --order strict`): the link runs `to.order: strict`, and the
 * soak allows no reorder and no stale-retry drop at all — the chain of expected last sequences keeps
 * the server from storing a later publish after an earlier one failed, so there is nothing to allow.
 */
const STRICT = process.env["CHAOS_ORDER"] === "strict";
if (process.env["CHAOS_ORDER"] !== undefined && process.env["CHAOS_ORDER"] !== "strict" && process.env["CHAOS_ORDER"] !== "") {
  throw new Error(`CHAOS_ORDER: "strict" or unset (got "${process.env["CHAOS_ORDER"]}")`);
}

interface Member {
  readonly process: RelayProcess;
  readonly url: string;
}

test(`chaos soak: seed ${SEED}, ${MINUTES} min at ${RATE} msgs/s, a fault every 8-15 s${STRICT ? ", to.order strict" : ""}; every id once${STRICT ? "" : " or superseded"}, in order, versions never back`, async (t: TestContext) => {
  const lengthMs = Math.round(MINUTES * 60_000);
  const schedule = chaosSchedule(SEED, lengthMs);
  t.diagnostic(`schedule (seed ${SEED}): ${describeSchedule(schedule)}`);
  const servers = new LocalBackend(); // per-node options (noAdvertise) are the local backend's
  t.after(() => servers.cleanup());
  const [a, b, redis] = await Promise.all([
    servers.startNatsCluster({ size: 3, node: () => ({ noAdvertise: true }) }),
    servers.startNatsCluster({ size: 3 }),
    servers.startRedis({ appendonly: true }),
  ]);
  const proxies = await Promise.all(a.nodes.map((n) => startBlackHoleProxy({ port: n.port })));
  t.after(() => Promise.all(proxies.map((p) => p.close())));
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.urls);
  const ncb = await connectTo(t, b.urls);
  await createStream(nca, { name: src, subjects: [`${src}.>`], replicas: 3 });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
  const yaml = linkYaml({
    regions: { a: proxies.map((p) => `nats://127.0.0.1:${p.port}`), b: b.urls },
    links: [
      {
        name: "a-to-b",
        from: "a",
        fromStream: src,
        to: "b",
        toStream: dst,
        extra: `    guard:\n      redis: { url: "${redis.url}" }\n      versions: { entity: "header:Test-Entity", version: "header:Test-Version" }\n`,
      },
    ],
    extra: `group: { lease: ${LEASE_MS / 1000}s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }\n`,
  });
  const linkYamlText = STRICT ? yaml.replace(`to: { region: b, stream: ${dst} }`, `to: { region: b, stream: ${dst}, order: strict }`) : yaml;
  assert.equal(linkYamlText.includes("order: strict"), STRICT, "the link's order is the soak's");
  const config = await writeConfig(linkYamlText);
  const spawned: Member[] = [];
  const spawnMember = async (): Promise<Member> => {
    const process = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
    const member = { process, url: await process.httpUrl() };
    spawned.push(member);
    return member;
  };
  // CHAOS_LOG_DIR=<dir>: every relay process's log (killed ones too) is written there, to read what the
  // relays decided in a run that failed.
  t.after(async () => {
    const dir = env["CHAOS_LOG_DIR"];
    if (!dir) return;
    await mkdir(dir, { recursive: true });
    await Promise.all(spawned.map((m) => writeFile(join(dir, `chaos-${SEED}-relay-${m.process.pid ?? "?"}.log`), m.process.output())));
  });
  let members = [await spawnMember(), await spawnMember()];
  // The one reorder (README; `to.order: strict`, CHAOS_ORDER=strict here, prevents it): a destination leader that dies may store a later
  // publish while an earlier one fails. Each relay counts what it saw in relay_reordered_total; the
  // counts of every relay process, killed ones included (sampled, and read just before a kill), are
  // what the soak allows — any other reorder is a failure. The retry of such an earlier publish is
  // judged again: when a newer version of its entity is in the destination by then, it is dropped as
  // stale (relay_stale_retries_total), so versions never go back. Those drops, counted the same way,
  // are the only losses allowed, each superseded by a newer version of its entity in the destination.
  const reorders = new Map<number, number>();
  const staleRetries = new Map<number, number>();
  // Leases lost, per relay process: a relay loses its lease once per time it was itself frozen past
  // the lease, and never otherwise. A server killed or paused (an election of the group bucket's stream
  // or of the destination) must not take a link from a live owner (README: an election shorter than
  // group.lease costs no lease).
  const leasesLost = new Map<number, number>();
  const frozen = new Map<number, number>();
  const sampleReorders = async (ms: readonly Member[]): Promise<void> => {
    await Promise.all(
      ms.map(async (m) => {
        const pid = m.process.pid ?? -1;
        const [n, stale, lost] = await Promise.all([
          scrapeMetric(m.url, "relay_reordered_total", { link: "a-to-b" }).catch(() => undefined),
          scrapeMetric(m.url, "relay_stale_retries_total", { link: "a-to-b" }).catch(() => undefined),
          scrapeMetric(m.url, "relay_lease_transitions_total", { link: "a-to-b", reason: "lost" }).catch(() => undefined),
        ]);
        if (n !== undefined) reorders.set(pid, Math.max(reorders.get(pid) ?? 0, n));
        if (stale !== undefined) staleRetries.set(pid, Math.max(staleRetries.get(pid) ?? 0, stale));
        if (lost !== undefined) leasesLost.set(pid, Math.max(leasesLost.get(pid) ?? 0, lost));
      }),
    );
  };
  const sampler = setInterval(() => void sampleReorders(members), 500);
  t.after(() => clearInterval(sampler));
  // A member's session lapses when no write of its key lands within its lease (less its margin) of the
  // last one it sent (up to a renew interval before an outage began): outages from 2 s on may cost it.
  const bucketProbe = startBucketProbe(ncb, "relay_leases", LEASE_MS - 1_000);
  t.after(() => bucketProbe.stop());

  const total = Math.round((lengthMs / 1_000) * RATE);
  const load = startChaosLoad(nca, src, { total, ratePerSec: RATE, entities: ENTITIES });
  t.after(() => load.stop());
  const started = Date.now();
  const log: string[] = [];
  for (const fault of schedule) {
    const wait = started + fault.atMs - Date.now();
    if (wait > 0) await delay(wait);
    const line = await inject(fault, {
      a: a.nodes,
      b: b.nodes,
      proxies,
      redis,
      members,
      spawnMember,
      sampleReorders,
      replace: (m) => (members = m),
      froze: (pid) => frozen.set(pid, (frozen.get(pid) ?? 0) + 1),
      leaderOf: async (what) => {
        const name =
          what === "source-consumer"
            ? (await (await jetstreamManager(nca)).consumers.info(src, "relay-a-to-b").catch(() => undefined))?.cluster?.leader
            : (await (await jetstreamManager(ncb)).streams.info(dst).catch(() => undefined))?.cluster?.leader;
        return [...a.nodes, ...b.nodes].find((n) => n.name === name);
      },
      owner: async () => {
        const owns = await Promise.all(members.map(async (m) => ((await statusOf(m))?.links[0]?.ownership?.self === true)));
        return members.find((_, i) => owns[i]);
      },
    });
    log.push(`${((Date.now() - started) / 1000).toFixed(1)}s ${line}`);
  }
  t.diagnostic(`faults: ${log.join("; ")}`);
  await load.done;
  t.diagnostic(`published ${load.published} (${load.retries} publish retries) in ${((Date.now() - started) / 1000).toFixed(0)} s`);

  const stuck = await settled(nca, src, "after the soak", 120_000);
  clearInterval(sampler);
  await sampleReorders(members);
  const counted = [...reorders.values()].reduce((a, n) => a + n, 0);
  const staleDrops = [...staleRetries.values()].reduce((a, n) => a + n, 0);
  const stale = await Promise.all(
    members.map(async (m) => {
      const [corrections, retries] = await Promise.all([
        scrapeMetric(m.url, "relay_corrections_total", { link: "a-to-b", kind: "stale_version" }).catch(() => -1),
        scrapeMetric(m.url, "relay_stale_retries_total", { link: "a-to-b" }).catch(() => -1),
      ]);
      return corrections - retries; // stale at the claim: only a reorder by the relay makes one
    }),
  );
  const rejections = await Promise.all(members.map((m) => scrapeMetric(m.url, "relay_order_rejections_total", { link: "a-to-b" }).catch(() => -1)));
  const codes = await Promise.all(members.map((m) => terminate(m.process)));
  const report = await checkDelivery({ fault: `chaos soak seed ${SEED}, ${MINUTES} min`, dest: ncb, stream: dst, source: await readSource(nca, src) });
  await recordRow(report);
  t.diagnostic(
    `stale_version corrections at the claim on the surviving relays: ${stale.join(", ")}; reorders the relays counted (destination leader kills): ${counted}; retries dropped as stale: ${staleDrops}; destination holds ${await streamCount(ncb, dst)}`,
  );
  if (stuck) throw withReport(stuck, report);
  if (STRICT) {
    // Strict order: the server stores nothing after a publish that failed, so there is nothing to allow.
    t.diagnostic(`order rejections (strict order) on the surviving relays: ${rejections.join(", ")}`);
    assert.equal(counted, 0, "with to.order strict the relays saw no reorder");
    assert.equal(staleDrops, 0, "with to.order strict no retry is judged stale (nothing newer was stored ahead of it)");
  }
  assertDelivery(report, { reorderedAllowed: counted, staleDropsAllowed: staleDrops });
  assert.deepEqual(
    stale.filter((n) => n !== 0),
    [],
    "no stale-version drop at the claim: the source's versions rise in its own order, so a stale one means the relay reordered",
  );
  await bucketProbe.stop();
  const outages = bucketProbe.long;
  const froze = (pid: number) => frozen.get(pid) ?? 0;
  const lostUnexplained = [...leasesLost]
    .filter(([pid, n]) => n > froze(pid) + outages.length)
    .map(([pid, n]) => `pid ${pid}: ${n} lost, frozen ${froze(pid)} times, ${outages.length} bucket outages over the lease`);
  t.diagnostic(
    `leases lost per relay process: ${[...leasesLost].map(([pid, n]) => `${pid}: ${n} (frozen ${froze(pid)} times)`).join(", ")}; group bucket write outages of ${LEASE_MS - 1_000} ms or more: ${outages.length ? outages.map((ms) => `${ms} ms`).join(", ") : "none"}`,
  );
  assert.deepEqual(
    lostUnexplained,
    [],
    "a relay loses its lease only when it was frozen past it or its group bucket could not be written for about its lease (an election longer than the lease)",
  );
  assert.deepEqual(codes, members.map(() => 0), "the surviving members drain and exit 0");
});

async function statusOf(m: Member): Promise<{ links: { ownership?: { self: boolean } }[] } | undefined> {
  const res = await fetch(`${m.url}/status`, { signal: AbortSignal.timeout(1_000) }).catch(() => undefined);
  return res?.ok ? ((await res.json()) as { links: { ownership?: { self: boolean } }[] }) : undefined;
}

interface Targets {
  readonly a: readonly NatsNode[];
  readonly b: readonly NatsNode[];
  readonly proxies: readonly BlackHoleProxy[];
  readonly redis: RedisNode;
  readonly members: readonly Member[];
  spawnMember(): Promise<Member>;
  sampleReorders(members: readonly Member[]): Promise<void>;
  replace(members: Member[]): void;
  /** A relay process was SIGSTOPped: it may lose its lease. */
  froze(pid: number): void;
  /** The node leading the source consumer or the destination stream (undefined: not known now). */
  leaderOf(what: "source-consumer" | "dest-stream"): Promise<NatsNode | undefined>;
  /** The relay owning the link (undefined: none, or not known now). */
  owner(): Promise<Member | undefined>;
}

/** Injects one fault, waits its duration, heals it; returns what it did. */
async function inject(fault: ScheduledFault, x: Targets): Promise<string> {
  const pick = <T>(list: readonly T[]): T => list[fault.target % list.length] as T;
  // Every other fault of a kind strikes where it hurts most: the node leading the source consumer or
  // the destination stream, the relay owning the link (the rest strike at random).
  const sharp = fault.target % 2 === 0;
  const d = fault.durationMs;
  switch (fault.kind) {
    case "kill-source-node":
    case "kill-dest-node": {
      const source = fault.kind === "kill-source-node";
      const nodes = source ? x.a : x.b;
      const node = (sharp ? await x.leaderOf(source ? "source-consumer" : "dest-stream") : undefined) ?? pick(nodes);
      await node.kill();
      await delay(d);
      await node.restart();
      return `${fault.kind} ${node.name} (${d} ms)`;
    }
    case "pause-source-node": {
      const node = (sharp ? await x.leaderOf("source-consumer") : undefined) ?? pick(x.a);
      await node.pause();
      await delay(d);
      await node.resume();
      return `${fault.kind} ${node.name} (${d} ms)`;
    }
    case "blackhole-source-node": {
      const i = fault.target % x.proxies.length;
      const proxy = x.proxies[i] as BlackHoleProxy;
      proxy.blackHole();
      await delay(d);
      proxy.restore();
      return `${fault.kind} #${i} (${d} ms)`;
    }
    case "pause-relay": {
      const m = (sharp ? await x.owner() : undefined) ?? pick(x.members);
      x.froze(m.process.pid ?? -1);
      m.process.signal("SIGSTOP");
      await delay(d);
      m.process.signal("SIGCONT");
      return `${fault.kind} pid ${m.process.pid} (${d} ms)`;
    }
    case "kill-relay": {
      const m = (sharp ? await x.owner() : undefined) ?? pick(x.members);
      await x.sampleReorders([m]); // its counts die with it
      m.process.signal("SIGKILL");
      await m.process.exited;
      await delay(d);
      const fresh = await x.spawnMember();
      x.replace([...x.members.filter((o) => o !== m), fresh]);
      await check(async () => (await fetch(`${fresh.url}/healthz`)).ok, { name: "the replacement relay answers /healthz", timeoutMs: 20_000 });
      return `${fault.kind} pid ${m.process.pid}, replaced by pid ${fresh.process.pid}`;
    }
    case "pause-redis":
      await x.redis.pause();
      await delay(d);
      await x.redis.resume();
      return `${fault.kind} (${d} ms)`;
  }
}
