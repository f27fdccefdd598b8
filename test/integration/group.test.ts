import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { startRelay } from "../helpers/relays.js";
import { assertInOrder, DEFAULT_GROUP, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";

test("two relays of a region: one owns the link, the other is standby (and ready); on SIGTERM-like stop the standby takes over at once, in order", async (t) => {
  const { src, dst, nca, ncb, yaml: yamlWith } = await twoRegions(t);
  // The defaults: a standby that waited for the lease to expire would take >= 5 s (asserted below).
  const yaml = () => yamlWith("", DEFAULT_GROUP);
  const first = await startRelay(t, yaml(), "b");
  await check(() => first.relay.status().links[0]?.state === "live", { name: "first relay owns the link and is live", timeoutMs: 20_000 });
  const second = await startRelay(t, yaml(), "b");
  const standbyOwned = () => {
    const l = second.relay.status().links[0];
    return l?.state === "standby" && /owns the link/.test(l.stateReason ?? "");
  };
  await check(standbyOwned, { name: "second relay in standby, naming the owner", timeoutMs: 20_000 }).catch((err: unknown) => {
    console.error(JSON.stringify(second.relay.status().links[0]), second.logs.lines.filter((l) => /lease/.test(l)).slice(-10).join("\n"));
    throw err;
  });
  assert.equal(second.relay.readiness().ready, true, "a standby relay is ready (a rollout can proceed)");

  const ids = await publishIds(nca, src, "m", 2_000);
  await waitForCount(ncb, dst, 500, 30_000, "first relay moving messages");
  await first.relay.stop(AbortSignal.timeout(10_000)); // drains, acks, releases the lease
  const releasedAt = Date.now();
  const leaseLog = () =>
    [first, second].map((r, i) => `relay ${i + 1}:\n${r.logs.lines.filter((l) => /lease|placement|members|member's key|stopp/.test(l)).slice(-15).join("\n")}`).join("\n");
  await check(() => second.relay.status().links[0]?.state === "live" || second.relay.status().links[0]?.state === "catching-up", {
    name: "second relay took over",
    timeoutMs: 5_000,
  }).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}\nsecond relay's link: ${JSON.stringify(second.relay.status().links[0])}\n${leaseLog()}`);
  });
  // Released, not expired: the lease is 5 s, and a standby that waited for expiry would take ≥ 5 s.
  const tookOverMs = Date.now() - releasedAt;
  t.diagnostic(`took over ${tookOverMs} ms after the release`);
  await waitForCount(ncb, dst, ids.length, 30_000, "after the takeover");
  await assertInOrder(ncb, dst, ids);
  assert.ok(tookOverMs < 2_500, `takeover within half the lease of the release (${tookOverMs} ms)\n${leaseLog()}`);
});
