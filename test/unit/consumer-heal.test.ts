import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { healConsumer } from "../../src/link/consumer-heal.js";
import type { LinkConfig } from "../../src/config/types.js";

/**
 * The stall heal's consumer step (src/link/consumer-heal.ts) with a stand-in for the client's consumer
 * API: on 2.14+ the consumer is reset in place (nothing deleted); where the client refuses the reset
 * (an older server: "consumer reset requires server 2.14.0", thrown before any request) the ack floor
 * is read and the durable deleted. The reset itself needs nats-server 2.14+, which this machine lacks.
 */
const config = { from: { stream: "SRC" }, durableName: "relay-a" } as unknown as LinkConfig;
const logger = pino({ level: "silent" });
const info = { ack_floor: { stream_seq: 41 }, delivered: { stream_seq: 45 } };

test("2.14+: the consumer is reset in place to its ack floor + 1, not deleted", async () => {
  const calls: string[] = [];
  const jsm = {
    consumers: {
      reset: (stream: string, name: string) => (calls.push(`reset ${stream} ${name}`), Promise.resolve({ reset_seq: 42 })),
      info: () => (calls.push("info"), Promise.resolve(info)),
      delete: () => (calls.push("delete"), Promise.resolve(true)),
    },
  };
  assert.deepEqual(await healConsumer(jsm as never, config, 7, logger), { reset: true, resetSeq: 42 });
  assert.deepEqual(calls, ["reset SRC relay-a"]);
});

test("an older server: the ack floor is read, then the durable deleted, and the cursor is told where it was", async () => {
  const calls: string[] = [];
  const jsm = {
    consumers: {
      reset: () => Promise.reject(new Error("consumer reset requires server 2.14.0")),
      info: () => (calls.push("info"), Promise.resolve(info)),
      delete: () => (calls.push("delete"), Promise.resolve(true)),
    },
  };
  assert.deepEqual(await healConsumer(jsm as never, config, 7, logger), { reset: false, healed: { ackFloor: 41, delivered: 45, sourceCreatedMs: 7 } });
  assert.deepEqual(calls, ["info", "delete"]);
});

test("a reset the server refuses for another reason is not a delete: the error goes up (the next step heals)", async () => {
  const calls: string[] = [];
  const jsm = {
    consumers: {
      reset: () => Promise.reject(new Error("consumer not found")),
      info: () => (calls.push("info"), Promise.resolve(info)),
      delete: () => (calls.push("delete"), Promise.resolve(true)),
    },
  };
  await assert.rejects(healConsumer(jsm as never, config, 7, logger), /consumer not found/);
  assert.deepEqual(calls, []);
});
