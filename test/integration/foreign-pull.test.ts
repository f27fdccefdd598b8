import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JsMsg } from "@nats-io/jetstream";
import { check } from "../helpers/check.js";
import { startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { parseConfigText } from "../../src/config/load.js";
import { durableConfig } from "../../src/nats/durable-consumer.js";
import { assertDelivery, checkDelivery, readSource } from "../faults/checker.js";

/**
 * A pull the link did not make takes deliveries from its durable: an ex-owner woken from a pause whose
 * client re-pulls before its lease timer has fired (DESIGN §9), or an operator's `nats consumer next`.
 * Those messages sit ack-pending at the source, and JetStream would redeliver them only after the ack
 * wait, behind everything newer. The owner sees the gap in the consumer's delivery sequence — also
 * when the very first delivery after placing the cursor is not the next one — and moves the cursor
 * back so they go first.
 */

const MESSAGES = 2_000;
const STOLEN = 5;

test("a foreign pull takes the first deliveries after the cursor is placed: they still reach the destination first, in order", async (t) => {
  const r = await twoRegions(t);
  const yaml = r.yaml();
  const link = parseConfigText(yaml, "test.yaml").links[0];
  if (!link) throw new Error("the config has no link");
  // The durable as the relay itself would create it, so the relay keeps it (no replacement).
  const jsm = await jetstreamManager(r.nca);
  await jsm.consumers.add(r.src, durableConfig(link));
  // The ex-owner's pull: waiting on the consumer before the relay's own pulls, so it is served first.
  const stolen: JsMsg[] = [];
  const foreign = await (await jetstream(r.nca).consumers.get(r.src, link.durableName)).fetch({ max_messages: STOLEN, expires: 30_000 });
  const taking = (async () => {
    for await (const m of foreign) stolen.push(m); // never acked: it went to sleep again
  })();
  const { relay } = await startRelay(t, yaml, "b");
  await check(() => ["catching-up", "live"].includes(relay.status().links[0]?.state ?? ""), { name: "the link consumes", timeoutMs: 20_000 });
  await publishIds(r.nca, r.src, "m", MESSAGES);
  await check(() => stolen.length === STOLEN, { name: `the foreign pull took its ${STOLEN} messages`, timeoutMs: 10_000 });
  // Waiting requests are served in turn: the foreign pull has the consumer's first delivery, the
  // relay's first one comes after it.
  const seqs = stolen.map((m) => m.seq);
  assert.ok(seqs.includes(1) && seqs.every((s) => s <= 2 * STOLEN), `the foreign pull was served from the first delivery on (it got ${seqs.join(", ")})`);
  await waitForCount(r.ncb, r.dst, MESSAGES, 60_000, "every message relayed");
  const report = await checkDelivery({ fault: "foreign pull before the first delivery", dest: r.ncb, stream: r.dst, source: await readSource(r.nca, r.src) });
  assertDelivery(report);
  await taking.catch(() => undefined);
});
