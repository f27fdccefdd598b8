/**
 * The checkpoint of a link at rest (link/checkpoint.ts): checked every IDLE_CHECK_EVERY ticks only,
 * while nothing was delivered and no cursor placed since a check that found nothing ack-pending; any
 * activity brings the next tick's check back. Real nats-server; the writer's ticks are driven by hand
 * and the destination moves (another writer) before every tick, so every check writes a checkpoint.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import pino from "pino";
import { uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, publishMany } from "../helpers/streams.js";
import { CheckpointWriter, IDLE_CHECK_EVERY } from "../../src/link/checkpoint.js";
import type { LinkCheckpoint, PositionStore } from "../../src/group/link-position.js";

test("a link at rest checks its checkpoint every IDLE_CHECK_EVERY ticks; a delivery or a placement brings the next check back", async (t) => {
  const servers = withServers(t);
  const a = await servers.startNats();
  const nc = await connectTo(t, a.url);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  await createStream(nc, { name: src, subjects: [`${src}.>`] });
  await createStream(nc, { name: dst, subjects: [`${dst}.>`] });
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add(src, { durable_name: "relay-l", ack_policy: AckPolicy.Explicit });

  const written: LinkCheckpoint[] = [];
  const positions: PositionStore = {
    checkpoint: () => Promise.resolve(written.at(-1)),
    writeCheckpoint: (value) => {
      written.push(value);
      return Promise.resolve();
    },
    explicitStart: () => Promise.resolve(undefined),
    startApplied: () => Promise.resolve(),
    auditState: () => Promise.resolve(undefined),
    writeAuditState: () => Promise.resolve(1),
  };
  let tick: () => void = () => assert.fail("not started");
  let activity = 0;
  const deps = {
    config: { name: "l", durableName: "relay-l", from: { region: "a", stream: src }, to: { region: "a", stream: dst } },
    dest: nc,
    logger: pino({ level: "silent" }),
    metrics: { checkpoints: { inc: () => undefined } },
    ticks: {
      every: (_ms: number, fn: () => void) => {
        tick = fn;
        return () => undefined;
      },
    },
  } as unknown as ConstructorParameters<typeof CheckpointWriter>[0];
  const writer = new CheckpointWriter(deps, positions, { jsm: () => jsm, sourceCreatedMs: () => 1, working: () => true, activity: () => activity });
  writer.start();

  let destMsgs = 0;
  /** Ticks one at a time, another writer moving the destination before each; how many of them checked (and so wrote). */
  const byTicks = async (ticks: number): Promise<number> => {
    let checks = 0;
    for (let i = 0; i < ticks; i++) {
      const before = written.length;
      await publishMany(nc, 1, () => ({ subject: `${dst}.x`, headers: { "Nats-Msg-Id": `d-${++destMsgs}` } }));
      tick();
      // A check the tick started shows as a write (the destination moved): poll until it lands.
      for (let k = 0; k < 50 && written.length === before; k++) await new Promise((r) => setTimeout(r, 10));
      if (written.length > before) checks++;
    }
    return checks;
  };

  // The first tick checks (nothing known yet); then the link is at rest: one check in IDLE_CHECK_EVERY ticks.
  assert.equal(await byTicks(1), 1, "the first tick checks");
  assert.equal(await byTicks(IDLE_CHECK_EVERY - 1), 0, "a link at rest skips the next ticks");
  assert.equal(await byTicks(1), 1, `every ${IDLE_CHECK_EVERY}th tick checks`);
  // A delivery (or a placement): the next tick checks, and again at rest after it.
  activity++;
  assert.equal(await byTicks(1), 1, "activity: the next tick checks");
  assert.equal(await byTicks(2), 0, "at rest again");
  writer.stop();
});
