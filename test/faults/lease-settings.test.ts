import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { check } from "../helpers/check.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import type { HasAfter } from "../helpers/servers.js";
import { twoRegions, waitForCount } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";
import { mergeLiveness, settled, startLoad, terminate, watch, withReport } from "./process-harness.js";

/**
 * Members of a group that disagree on `group.lease` (a rolling restart that changes it runs both values
 * at once). The owner runs a 20 s lease, the other member 3 s: the owner is SIGSTOPped for 8 s. The
 * lease stores its duration, and a contender judges expiry by the stored one, so the 3 s member must
 * not take the link over while the owner's 20 s lease has not expired, and there are never two owners.
 */

const DUP_WINDOW_MS = 1_000;
const FREEZE_MS = 8_000;
const SETTLE_MS = scaled(120_000, 600_000);

interface Member {
  readonly process: RelayProcess;
  readonly url: string;
}

interface MemberStatus {
  id: string;
  leaseMs?: number;
  renewMs?: number;
  settingsDiffer?: boolean;
}

interface StatusBody {
  links: { state: string; ownership?: { self: boolean; owner?: string } }[];
  group?: { member: string; members: MemberStatus[] };
}

async function member(t: HasAfter, config: string): Promise<Member> {
  const process = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  return { process, url: await process.httpUrl() };
}

async function status(m: Member): Promise<StatusBody> {
  const res = await fetch(`${m.url}/status`, { signal: AbortSignal.timeout(2_000) });
  return (await res.json()) as StatusBody;
}

/** Whether `m` says it owns the link; undefined when it does not answer (a stopped process). */
async function owns(m: Member): Promise<boolean | undefined> {
  const s = await status(m).catch(() => undefined);
  return s === undefined ? undefined : s.links[0]?.ownership?.self === true;
}

/** An unlabelled gauge of a relay process's /metrics (NaN when absent). */
async function gauge(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.slice(name.length + 1));
}

/** Polls `fn` every 100 ms for `ms`: every answer must hold (a named invariant, not a sleep). */
async function holdsFor(ms: number, name: string, fn: (elapsedMs: number) => Promise<void>): Promise<number> {
  const start = Date.now();
  let samples = 0;
  while (Date.now() - start < ms) {
    await fn(Date.now() - start);
    samples++;
    await delay(100);
  }
  assert.ok(samples >= ms / 500, `${name}: sampled ${samples} times in ${ms} ms`);
  return samples;
}

test("members disagree on group.lease: the owner (lease 20 s) is SIGSTOPped for 8 s while a member with 3 s waits; it does not take over, never two owners; every id once, in order", async (t) => {
  const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
  const linkYaml = `    batchSize: 200\n    inFlight: 512\n`;
  const http = `http: { listen: "127.0.0.1:0" }`;
  const longConfig = await writeConfig(r.yaml(linkYaml, `group: { lease: 20s, renew: 1s }\n${http}`));
  const shortConfig = await writeConfig(r.yaml(linkYaml, `group: { lease: 3s, renew: 500ms }\n${http}`));
  const total = scaled(8_000, 40_000);

  // The 20 s member first: it owns the link, and placement keeps a link with its owner. It creates the
  // bucket, and takes no lease in a bucket younger than its lease (an old bucket's owner may still act).
  const long = await member(t, longConfig);
  await check(async () => (await owns(long)) === true, { name: "the 20 s member owns the link", timeoutMs: 40_000, intervalMs: 100 });
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 500 });
  await waitForCount(r.ncb, r.dst, 500, 30_000, "the 20 s owner relays");
  const short = await member(t, shortConfig);
  await check(
    async () => {
      const s = await status(short);
      return s.links[0]?.state === "standby" && (s.group?.members.length ?? 0) === 2;
    },
    { name: "the 3 s member is standby and sees both members", timeoutMs: 20_000, intervalMs: 200 },
  );
  const probe = watch(t, short.url);

  long.process.signal("SIGSTOP");
  try {
    await holdsFor(FREEZE_MS, "the 3 s member stays standby while the 20 s lease runs", async (elapsed) => {
      const s = await status(short);
      assert.notEqual(s.links[0]?.ownership?.self, true, `the 3 s member took the link over ${elapsed} ms into the owner's freeze (its stored lease is 20 s)`);
    });
  } finally {
    long.process.signal("SIGCONT");
  }
  // Woken within its lease, the owner goes on; at no sample do both say they own the link.
  await holdsFor(3_000, "one owner after the owner woke", async (elapsed) => {
    const [a, b] = await Promise.all([owns(long), owns(short)]);
    assert.ok(!(a === true && b === true), `both members own the link ${elapsed} ms after the owner woke`);
  });
  assert.equal(await owns(long), true, "the 20 s member still owns the link");
  assert.equal(await owns(short), false, "the 3 s member does not");

  // The disagreement is visible: each member's settings in /status, and a gauge.
  const seen = (await status(short)).group?.members ?? [];
  const other = seen.find((m) => m.leaseMs === 20_000);
  assert.ok(other, `/status shows the other member's lease: ${JSON.stringify(seen)}`);
  assert.equal(other.renewMs, 1_000);
  assert.equal(other.settingsDiffer, true, "flagged as differing from this relay's settings");
  assert.equal(await gauge(short.url, "relay_group_settings_mismatch"), 1);

  await load.done;
  const stuck = await settled(r.nca, r.src, "after the freeze", SETTLE_MS);
  const liveness = mergeLiveness([await probe.stop()]);
  const codes = await Promise.all([terminate(long.process), terminate(short.process)]);
  const report = {
    ...(await checkDelivery({ fault: "group members disagree on lease (20 s owner SIGSTOPped 8 s, 3 s member)", dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })),
    ...(liveness ? { liveness } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.deepEqual(codes, [0, 0], "both members drain and exit 0");
});
