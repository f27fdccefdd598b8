/**
 * KV links (docs/kv.md) while a relay process is SIGKILLed mid-traffic: writers in both regions keep
 * writing overlapping keys, region b's relay is killed several times and started again, and at the end
 * both buckets hold, for every key, the newest write either region stored; no write came back to its
 * region.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { check, uniqueName } from "../helpers/check.js";
import { converged, history, kvRegions, kvYaml, latest, newestOf } from "../helpers/kv.js";
import type { Region } from "../helpers/kv.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { HasAfter } from "../helpers/servers.js";
import { scrapeMetric } from "./process-harness.js";

const KILLS = 3;
const KEYS = Array.from({ length: 20 }, (_, i) => `k${i}`);

function runRelay(t: HasAfter, config: string, region: string) {
  // A purge or history can drop a superseded write before it is relayed: reported as a gap (docs/kv.md).
  return spawnRelay(t, ["run", "--config", config, "--region", region], {});
}

/** Writes in both regions on the same keys until `stop()`: puts, and a delete now and then. */
function startWriters(all: readonly Region[]) {
  let stopped = false;
  let writes = 0;
  const run = async (r: Region, ri: number): Promise<void> => {
    for (let i = 0; !stopped; i++) {
      const key = KEYS[(i * 7 + ri * 3) % KEYS.length] as string;
      if (i % 13 === 0) await r.kv.delete(key);
      else await r.kv.put(key, `${r.name}-${i}`);
      writes++;
      if (i % 20 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  const done = Promise.all(all.map((r, ri) => run(r, ri)));
  return {
    get writes() {
      return writes;
    },
    async stop() {
      stopped = true;
      await done;
    },
  };
}

test("KV links: the relay is SIGKILLed mid-traffic and restarted while both regions write: the buckets converge on the newest writes", { timeout: 180_000 }, async (t) => {
  const bucket = uniqueName("kill").replace(/[^-\w]/g, "_");
  const all = await kvRegions(t, ["a", "b"], bucket, 8);
  const [a, b] = all as [Region, Region];
  const config = await writeConfig(kvYaml(all, [["a", "b"], ["b", "a"]], bucket, 'http: { listen: "127.0.0.1:0" }'));
  runRelay(t, config, "a");
  const writers = startWriters(all);
  for (let kill = 0; kill < KILLS; kill++) {
    const relay = runRelay(t, config, "b");
    const url = await relay.httpUrl();
    // Killed once it decided writes of this round (relayed, or older than b's: b writes the same keys
    // all the time, so most remote writes lose): mid-traffic, the writers still writing.
    const decided = async () => {
      const [relayed, stale] = await Promise.all(["relayed", "stale"].map((outcome) => scrapeMetric(url, "relay_messages_total", { link: "a-to-b", outcome }).catch(() => 0)));
      return (relayed ?? 0) + (stale ?? 0);
    };
    await check(async () => (await decided()) > 20, {
      name: `round ${kill}: the relay in b decided writes`,
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    relay.signal("SIGKILL");
    await relay.exited;
  }
  await writers.stop();
  assert.ok(writers.writes > 100, `the writers wrote (${writers.writes})`);
  runRelay(t, config, "b");
  await check(async () => converged(all, bucket, KEYS), {
    name: "both buckets hold the same latest write of every key",
    timeoutMs: 90_000,
    intervalMs: 500,
  });
  const histories = await Promise.all(all.map((r) => history(r, bucket)));
  for (const key of KEYS) {
    assert.equal((await latest(a, bucket, key))?.version, newestOf(histories, `$KV.${bucket}.${key}`), `key ${key}: the newest write wins`);
  }
  all.forEach((r, i) => {
    const back = (histories[i] ?? []).filter((m) => m.origin === r.name);
    assert.equal(back.length, 0, `no write of region ${r.name} came back to it`);
  });
  assert.ok(b);
});
