import { test } from "node:test";
import assert from "node:assert/strict";
import type { withServers } from "../helpers/servers.js";
import { streamCount } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import type { RelayProcess } from "../helpers/relays.js";
import { assertExactlyOnce, linkYaml, publishIds, waitForCount, twoRegions } from "../helpers/scenario.js";

const TOTAL = 20_000;

async function setup(t: Parameters<typeof withServers>[0]) {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  const ids = await publishIds(nca, src, "m", TOTAL);
  const config = await writeConfig(
    linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    batchSize: 200\n    inFlight: 512\n" }],
      extra: 'http: { listen: "127.0.0.1:0" }',
    }),
  );
  return { ncb, dst, ids, config };
}

test("the relay is SIGKILLed at random moments mid-transfer and restarted: every id exactly once", async (t) => {
  const { ncb, dst, ids, config } = await setup(t);
  const kills = 6;
  let killedMidTransfer = 0;
  for (let round = 0; round < kills; round++) {
    const relay = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
    const before = await streamCount(ncb, dst);
    // Wait for progress, then kill after a random extra delay: at a random point of the transfer.
    await waitForCount(ncb, dst, Math.min(TOTAL, before + 500), 60_000, `round ${round}: progress before kill`);
    await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 300)));
    const atKill = await streamCount(ncb, dst);
    relay.signal("SIGKILL");
    await relay.exited;
    if (atKill < TOTAL) killedMidTransfer++;
  }
  assert.ok(killedMidTransfer >= 5, `at least 5 kills hit mid-transfer (${killedMidTransfer})`);
  const last = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  await waitForCount(ncb, dst, TOTAL, 120_000, "after the last restart");
  await assertExactlyOnce(ncb, dst, ids);
  await last.stop();
});

test("SIGTERM mid-transfer drains, exits 0, and a restart finishes without loss or duplicates", async (t) => {
  const { ncb, dst, ids, config } = await setup(t);
  const relay: RelayProcess = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  await waitForCount(ncb, dst, 2_000, 60_000, "progress before SIGTERM");
  relay.signal("SIGTERM");
  const code = await relay.exited;
  assert.equal(code, 0, `exit code 0 after SIGTERM; output:\n${relay.output().slice(-2000)}`);
  assert.match(relay.output(), /"msg":"drained: exiting"/);
  const atStop = await streamCount(ncb, dst);
  assert.ok(atStop < TOTAL, `stopped mid-transfer (${atStop} of ${TOTAL})`);
  const again = spawnRelay(t, ["run", "--config", config, "--region", "b"]);
  await waitForCount(ncb, dst, TOTAL, 120_000, "after restart");
  await assertExactlyOnce(ncb, dst, ids);
  await again.stop();
});
