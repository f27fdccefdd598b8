import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import type { HasAfter } from "../helpers/servers.js";
import { streamCount } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { twoRegions, waitForCount } from "../helpers/scenario.js";
import type { LivenessReport } from "../helpers/liveness.js";
import { assertDelivery, checkDelivery, readSource, recordRow, scaled } from "./checker.js";
import { mergeLiveness, scrapeMetric, settled, startLoad, terminate, watch, withReport } from "./process-harness.js";

/**
 * A region's group loses its owner: the relay process that owns the link is killed or frozen while
 * another member stands by. The lease (3 s here) is what decides: another member is publishing within
 * 5 s of a kill, and a frozen owner that wakes after losing its lease publishes and acks nothing. The
 * destination's duplicate window is 1 s, so a second copy cannot hide behind broker dedup. Every test
 * ends in the checker: every id once, in source order (overall and per subject), /healthz answering.
 */

const LEASE_MS = 3_000;
const DUP_WINDOW_MS = 1_000;
const SETTLE_MS = scaled(120_000, 600_000);

async function setup(t: HasAfter, guard = "") {
  const r = await twoRegions(t, { dstDuplicateWindowMs: DUP_WINDOW_MS });
  let guardYaml = "";
  if (guard === "redis") {
    const redis = await r.servers.startRedis({ appendonly: true });
    guardYaml = `    guard: { redis: { url: "${redis.url}" } }\n`;
  }
  const config = await writeConfig(
    r.yaml(`    batchSize: 200\n    inFlight: 512\n${guardYaml}`, `group: { lease: ${LEASE_MS / 1000}s, renew: 500ms }\nhttp: { listen: "127.0.0.1:0" }`),
  );
  return { ...r, config };
}

interface Member {
  readonly process: RelayProcess;
  readonly url: string;
}

async function member(t: HasAfter, config: string): Promise<Member> {
  const process = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  return { process, url: await process.httpUrl() };
}

interface StatusBody {
  links: { state: string; ownership?: { self: boolean } }[];
  group?: { members: { id: string }[] };
}

async function status(m: Member): Promise<StatusBody> {
  const res = await fetch(`${m.url}/status`, { signal: AbortSignal.timeout(2_000) });
  return (await res.json()) as StatusBody;
}

async function owns(m: Member): Promise<boolean> {
  return (await status(m).catch(() => undefined))?.links[0]?.ownership?.self === true;
}

/** The one member that owns the link (after the group settled), and the others. */
async function ownerOf(members: readonly Member[], what: string): Promise<{ owner: Member; others: Member[] }> {
  let owner: Member | undefined;
  await check(
    async () => {
      const flags = await Promise.all(members.map(owns));
      const holders = members.filter((_, i) => flags[i]);
      owner = holders.length === 1 ? holders[0] : undefined;
      return owner !== undefined;
    },
    { name: `${what}: exactly one member owns the link`, timeoutMs: 20_000, intervalMs: 100 },
  );
  if (!owner) throw new Error("unreachable");
  const found = owner;
  return { owner: found, others: members.filter((m) => m !== found) };
}

const relayed = (m: Member) => scrapeMetric(m.url, "relay_messages_total", { link: "a-to-b", outcome: "relayed" });

test("the owner is SIGKILLed under steady load: another member publishes within 5 s (lease 3 s); every id once, in order", async (t) => {
  const r = await setup(t);
  const rounds = scaled(2, 10);
  const total = scaled(24_000, 200_000);
  const load = startLoad(r.nca, r.src, total, { ratePerSec: 1_000 });
  let members = [await member(t, r.config), await member(t, r.config)];
  const liveness: LivenessReport[] = [];
  const failoverMs: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const { owner, others } = await ownerOf(members, `round ${round}`);
    await waitForCount(r.ncb, r.dst, (await streamCount(r.ncb, r.dst)) + 500, 30_000, `round ${round}: the owner relays`);
    const probes = others.map((m) => watch(t, m.url));
    const before = await Promise.all(others.map(relayed));
    const killedAt = Date.now();
    owner.process.signal("SIGKILL");
    await owner.process.exited;
    await check(async () => (await Promise.all(others.map(relayed))).some((n, i) => n > (before[i] ?? 0)), {
      name: `round ${round}: another member publishing within 5 s of the owner's SIGKILL`,
      timeoutMs: 5_000,
      intervalMs: 50,
    });
    failoverMs.push(Date.now() - killedAt);
    for (const p of probes) liveness.push(await p.stop());
    members = [...others, await member(t, r.config)]; // the replacement pod
  }
  t.diagnostic(`failover after SIGKILL (ms): ${failoverMs.join(", ")}`);
  await load.done;
  const stuck = await settled(r.nca, r.src, "after the kills", SETTLE_MS);
  const codes = await Promise.all(members.map((m) => terminate(m.process)));
  const merged = mergeLiveness(liveness);
  const report = {
    ...(await checkDelivery({ fault: `group owner SIGKILL x${rounds} (lease 3 s)`, dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) })),
    ...(merged ? { liveness: merged } : {}),
  };
  await recordRow(report);
  if (stuck) throw withReport(stuck, report);
  assertDelivery(report);
  assert.deepEqual(codes, members.map(() => 0), "the surviving members drain and exit 0");
});

for (const guard of ["", "redis"]) {
  test(`the owner is SIGSTOPped for 3× the lease while another takes over, then continued: it publishes nothing after waking and rejoins (${guard ? "Redis guard" : "no guard"}; 1 s duplicate window)`, async (t) => {
    const r = await setup(t, guard);
    const total = scaled(16_000, 100_000);
    const load = startLoad(r.nca, r.src, total, { ratePerSec: 1_000 });
    const members = [await member(t, r.config), await member(t, r.config)];
    const { owner, others } = await ownerOf(members, "before the freeze");
    await waitForCount(r.ncb, r.dst, 1_000, 30_000, "the owner relays");
    const probes = others.map((m) => watch(t, m.url));
    const ownerRelayed = await relayed(owner);
    owner.process.signal("SIGSTOP");
    const frozenAt = Date.now();
    await check(async () => (await Promise.all(others.map(owns))).some(Boolean), {
      name: "another member owns the link while the owner is frozen",
      timeoutMs: 2 * LEASE_MS,
      intervalMs: 100,
    });
    const atTakeover = await streamCount(r.ncb, r.dst);
    await check(async () => Date.now() - frozenAt >= 3 * LEASE_MS && (await streamCount(r.ncb, r.dst)) > atTakeover, {
      name: "frozen for 3× the lease while the new owner relays",
      timeoutMs: 6 * LEASE_MS,
      intervalMs: 200,
    });
    owner.process.signal("SIGCONT");
    // Woken: it sees its lease deadline passed before anything else runs, so its counter stays where it was.
    await check(
      async () => {
        const s = await status(owner);
        return s.links[0]?.state === "standby" && (s.group?.members.length ?? 0) === 2;
      },
      { name: "the woken relay rejoins: standby, and sees both members", timeoutMs: 20_000, intervalMs: 200 },
    );
    assert.equal(await relayed(owner), ownerRelayed, "the woken relay relayed nothing after its lease passed");
    await load.done;
    const stuck = await settled(r.nca, r.src, "after the freeze", SETTLE_MS);
    const liveness = mergeLiveness(await Promise.all(probes.map((p) => p.stop())));
    const codes = await Promise.all(members.map((m) => terminate(m.process)));
    const report = {
      ...(await checkDelivery({
        fault: `group owner SIGSTOP 3x lease${guard ? ", Redis guard" : ""}`,
        dest: r.ncb,
        stream: r.dst,
        source: await readSource(r.nca, r.src),
      })),
      ...(liveness ? { liveness } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
    assert.deepEqual(codes, [0, 0], "both members drain and exit 0");
  });
}
