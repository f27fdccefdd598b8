import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import type { SourceAcks } from "../../src/nats/source-acks.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { ACK_BATCH, ACK_EVERY_MS, SourceAckStage } from "../../src/link/stages/source-ack.js";
import type { Entry } from "../../src/link/entry.js";

const link = parseConfigText(
  `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
`,
  "unit",
).links[0]!;

/** A stage over a window that holds seq 1,000 throughout (never drained), with a clock the test moves. */
function stage() {
  const acked: string[] = [];
  const deadlines: number[] = [];
  const clock = { now: 0 };
  const held = new Map<number, Entry>([[1000, { seq: 1000, dseq: 1000 } as Entry]]);
  const s = new SourceAckStage({
    link,
    acks: { ack: (reply: string) => acked.push(reply) > 0 } as unknown as SourceAcks,
    metrics: createMetrics(undefined, { defaultMetrics: false }),
    owns: () => true,
    window: { bySeq: held, size: 1, remove: () => false, lowestHeld: () => ({ seq: 1000, dseq: 1000 }) } as never,
    ledger: { done: () => undefined },
    versions: { settled: () => undefined },
    sent: { release: () => undefined },
    tally: { count: () => undefined, counters: { replayAge: { observe: () => undefined } } } as never,
    scheduler: { schedule: () => undefined, scheduleAt: (until: number) => deadlines.push(until) },
    drained: () => undefined,
    clock: () => clock.now,
  });
  const finish = (seq: number) => s.finish({ seq, dseq: seq, reply: `ack.${seq}`, sourceMs: 0 } as Entry, "relayed");
  return { s, acked, deadlines, clock, finish };
}

test("cumulative acks of a trickle: one ack per ACK_EVERY_MS, not one per turn of the pump; a deadline makes sure the last one goes", () => {
  const { s, acked, deadlines, clock, finish } = stage();
  assert.equal(link.sourceAcks, "cumulative");
  finish(1);
  s.flush();
  assert.deepEqual(acked, ["ack.1"], "the first goes at once");
  clock.now = 2;
  finish(2);
  s.flush();
  clock.now = 4;
  finish(3);
  s.flush();
  assert.deepEqual(acked, ["ack.1"], "within ACK_EVERY_MS of the last ack: waiting");
  assert.ok(deadlines.length > 0, "the pump is woken for it");
  clock.now = ACK_EVERY_MS;
  s.flush();
  assert.deepEqual(acked, ["ack.1", "ack.3"], "one ack covers 2 and 3");
});

test("cumulative acks: ACK_BATCH finished messages are acked at once, and a drain or a failing link acks whatever waits", () => {
  const { s, acked, clock, finish } = stage();
  finish(1);
  s.flush();
  clock.now = 1;
  for (let seq = 2; seq < 2 + ACK_BATCH; seq++) finish(seq);
  s.flush();
  assert.deepEqual(acked, ["ack.1", `ack.${1 + ACK_BATCH}`], "a batch's worth goes without waiting");
  clock.now = 2;
  finish(500);
  s.flush(true);
  assert.equal(acked.at(-1), "ack.500", "forced (drained, or the link fails): at once");
});
