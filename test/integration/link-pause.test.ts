import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { metricValue, RelayProcess, startRelay, writeConfig } from "../helpers/relays.js";
import { assertExactlyOnce, assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { streamCount } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";

/**
 * Issue #24 item 2: an operator pauses a link across the region's group (`jetstream-relay link pause`,
 * the group bucket's control key). The owner finishes what it holds and pulls nothing more while the
 * source grows; the other member honours the pause when it takes over, and so does a relay started
 * while the link is paused; resumed, everything is relayed, every id once, in order. Never `stalled`.
 */
async function cli(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  const p = new RelayProcess(args);
  const code = await p.exited;
  return { code, output: p.output() };
}

/** Fails if the destination's count moves during `ms` (polled), while the source grows or stays. */
async function staysPut(count: () => Promise<number>, expected: number, ms: number, what: string): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    assert.equal(await count(), expected, `the destination holds ${expected} messages while paused (${what})`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

const linkOf = (relay: Relay) => relay.status().links[0];
const neverStalled = (relay: Relay, who: string) =>
  assert.ok(!(linkOf(relay)?.stateHistory ?? []).some((h) => h.state === "stalled"), `${who}: a paused link is never stalled: ${JSON.stringify(linkOf(relay)?.stateHistory)}`);

test("link pause/resume across a group: the owner stops pulling under load, the next owner and a restarted relay stay paused, resume relays every id once, in order", async (t) => {
  const { src, dst, nca, ncb, yaml: linkYaml } = await twoRegions(t);
  // A stall would be said within a second: a paused link must never be one.
  const yaml = linkYaml("    stallAfter: 1s\n");
  const configPath = await writeConfig(yaml);
  const first = await startRelay(t, yaml, "b", { http: true });
  await check(() => linkOf(first.relay)?.state === "live", { name: "first relay owns the link and is live", timeoutMs: 15_000 });
  const second = await startRelay(t, yaml, "b");
  await check(() => linkOf(second.relay)?.state === "standby", { name: "second relay in standby", timeoutMs: 15_000 });

  // Load: 50 messages every 20 ms until told to stop.
  const ids: string[] = [];
  let publishing = true;
  const loader = (async () => {
    while (publishing) {
      ids.push(...(await publishIds(nca, src, "m", 50, ids.length)));
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  t.after(() => {
    publishing = false;
    return loader;
  });
  await waitForCount(ncb, dst, 300, 15_000, "relayed before the pause");

  const base = ["--config", configPath, "--region", "b"];
  const [paused, unknown] = await Promise.all([
    cli(["link", "pause", "a-to-b", ...base, "--reason", "destination maintenance", "--by", "ops@test"]),
    cli(["link", "pause", "no-such-link", ...base, "--reason", "x"]),
  ]);
  assert.equal(paused.code, 0, paused.output);
  assert.match(paused.output, /a-to-b: paused by ops@test at .*: destination maintenance/);
  assert.equal(unknown.code, 2, unknown.output);
  assert.match(unknown.output, /unknown link "no-such-link"/);

  // The owner finishes what it holds (nothing left in flight) and says why it is paused.
  await check(() => linkOf(first.relay)?.state === "paused" && linkOf(first.relay)?.inFlight === 0, { name: "owner paused with nothing in flight", timeoutMs: 10_000 });
  const status = (await (await fetch(`${first.url}/status`)).json()) as ReturnType<Relay["status"]>;
  const shown = status.links[0];
  assert.equal(shown?.state, "paused");
  assert.match(shown?.stateReason ?? "", /paused by ops@test at .*: destination maintenance/);
  assert.deepEqual({ by: shown?.operatorPause?.by, reason: shown?.operatorPause?.reason }, { by: "ops@test", reason: "destination maintenance" });
  assert.equal(first.relay.readiness().ready, true, "a link paused by an operator does not make the relay unready");
  for (const [r, who] of [[first.relay, "owner"], [second.relay, "standby"]] as const) {
    // A member learns of the pause by its watch, or at the latest by its read every group.renew (default 1 s).
    await check(async () => (await metricValue(r, "relay_link_paused", { link: "a-to-b" })) === 1, { name: `relay_link_paused 1 on the ${who}`, timeoutMs: 15_000 });
  }

  // Nothing more is relayed while the source grows.
  const dstCount = () => streamCount(ncb, dst);
  const held = await dstCount();
  const srcBefore = await streamCount(nca, src);
  await staysPut(dstCount, held, 2_500, "owner");
  assert.ok((await streamCount(nca, src)) > srcBefore + 100, "the source kept growing meanwhile");
  publishing = false;
  await loader;
  assert.ok(ids.length > held, `messages wait at the source (${ids.length} published, ${held} relayed)`);
  neverStalled(first.relay, "owner");

  // The owner stops: the other member takes the link over and honours the pause.
  await first.relay.stop(AbortSignal.timeout(10_000));
  await check(() => linkOf(second.relay)?.ownership?.self === true && linkOf(second.relay)?.state === "paused", { name: "second relay owns the link, paused", timeoutMs: 10_000 });
  await staysPut(dstCount, held, 1_500, "after the takeover");
  neverStalled(second.relay, "the next owner");

  // A relay started while the link is paused stays paused (it reads the control key before it pulls).
  await second.relay.stop(AbortSignal.timeout(10_000));
  const third = await startRelay(t, yaml, "b");
  await check(() => linkOf(third.relay)?.ownership?.self === true && linkOf(third.relay)?.state === "paused", { name: "restarted relay owns the link, paused", timeoutMs: 15_000 });
  assert.equal(await metricValue(third.relay, "relay_link_paused", { link: "a-to-b" }), 1);
  await staysPut(dstCount, held, 1_500, "after a restart");
  const shownStatus = await cli(["link", "status", "a-to-b", ...base]);
  assert.equal(shownStatus.code, 0, shownStatus.output);
  assert.match(shownStatus.output, /a-to-b: paused by ops@test/);

  // Resumed: everything is relayed, every id once, in order.
  const resumed = await cli(["link", "resume", "a-to-b", ...base, "--by", "ops@test"]);
  assert.equal(resumed.code, 0, resumed.output);
  await waitForCount(ncb, dst, ids.length, 20_000, "after the resume");
  await assertExactlyOnce(ncb, dst, ids);
  await assertInOrder(ncb, dst, ids);
  await check(async () => (await metricValue(third.relay, "relay_link_paused", { link: "a-to-b" })) === 0, { name: "relay_link_paused 0 after the resume", timeoutMs: 5_000 });
  assert.ok(third.logs.lines.some((l) => /link resumed by ops@test/.test(l)), "one log line says who resumed it");
  neverStalled(third.relay, "the restarted relay");
});
