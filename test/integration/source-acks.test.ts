import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { check } from "../helpers/check.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { assertExactlyOnce, assertInOrder, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";

/**
 * `sourceAcks: cumulative` (README "Source acks"): an AckAll consumer acked once per run of finished
 * messages, and a change of `sourceAcks` replacing the consumer at its ack floor.
 */

const DURABLE = "relay-a-to-b";

async function consumer(nc: NatsConnection, stream: string) {
  return (await jetstreamManager(nc)).consumers.info(stream, DURABLE);
}

/** The consumer has acked everything up to `last`, with nothing pending. */
async function ackedThrough(nc: NatsConnection, stream: string, last: number, what: string): Promise<void> {
  await check(
    async () => {
      const c = await consumer(nc, stream);
      return c.ack_floor.stream_seq === last && c.num_ack_pending === 0 && c.num_pending === 0;
    },
    { name: `${what}: the consumer's ack floor reaches source seq ${last}`, timeoutMs: 20_000, intervalMs: 100 },
  );
}

const MODES = [
  // A few acks cover thousands of messages: one per run of finished ones.
  { mode: "cumulative", policy: "all", messages: 5_000, acks: (n: number) => n > 0 && n <= 5_000 / 10 },
  // An ack per message: the metric counts every one.
  { mode: "each", policy: "explicit", messages: 500, acks: (n: number) => n === 500 },
] as const;

for (const m of MODES) {
  test(`sourceAcks ${m.mode}: an ack policy ${m.policy} consumer; every id once and in order; the acks sent are counted`, async (t) => {
    const r = await twoRegions(t);
    const { relay } = await startRelay(t, r.yaml(`    sourceAcks: ${m.mode}\n    batchSize: 250\n`), "b");
    const ids = await publishIds(r.nca, r.src, "m", m.messages);
    await waitForCount(r.ncb, r.dst, ids.length, 60_000, `relayed with sourceAcks ${m.mode}`);
    await ackedThrough(r.nca, r.src, ids.length, m.mode);
    assert.equal((await consumer(r.nca, r.src)).config.ack_policy, m.policy);
    await assertExactlyOnce(r.ncb, r.dst, ids);
    await assertInOrder(r.ncb, r.dst, ids);
    const acks = await metricValue(relay, "relay_source_acks_total", { link: "a-to-b" });
    assert.ok(m.acks(acks), `${acks} acks for ${ids.length} messages`);
  });
}

test("changing sourceAcks replaces the consumer at its ack floor: each → cumulative → each, every id once and in order", async (t) => {
  const r = await twoRegions(t);
  const all: string[] = [];
  for (const [round, mode] of (["each", "cumulative", "each"] as const).entries()) {
    const { relay, logs } = await startRelay(t, r.yaml(`    sourceAcks: ${mode}\n`), "b");
    // Published before the relay has started consuming too: the new consumer must start at the floor.
    all.push(...(await publishIds(r.nca, r.src, `r${round}`, 1_500)));
    await waitForCount(r.ncb, r.dst, all.length, 60_000, `round ${round} (${mode})`);
    await ackedThrough(r.nca, r.src, all.length, `round ${round} (${mode})`);
    assert.equal((await consumer(r.nca, r.src)).config.ack_policy, mode === "each" ? "explicit" : "all");
    if (round > 0) {
      assert.ok(
        logs.lines.some((l) => /the consumer was replaced with ack policy/.test(l)),
        `round ${round}: the replacement is logged`,
      );
    }
    await relay.stop(AbortSignal.timeout(10_000));
  }
  await assertExactlyOnce(r.ncb, r.dst, all);
  await assertInOrder(r.ncb, r.dst, all);
});
