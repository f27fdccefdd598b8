import { test } from "node:test";
import assert from "node:assert/strict";
import { installShutdown } from "../../src/lifecycle/shutdown.js";
import { createLogger } from "../../src/observability/logger.js";
import { check } from "../helpers/check.js";

const logger = createLogger({ level: "silent" });

function harness(drain: (deadline: AbortSignal) => Promise<void>, graceMs = 60_000, marginMs = 50) {
  const exits: number[] = [];
  const uninstall = installShutdown({ graceMs, marginMs, logger, drain, exit: (c) => exits.push(c), signals: ["SIGUSR2"] });
  return { exits, uninstall };
}

test("a signal drains and exits 0", async (t) => {
  let deadline: AbortSignal | undefined;
  const { exits, uninstall } = harness(async (d) => {
    deadline = d;
  });
  t.after(uninstall);
  process.emit("SIGUSR2", "SIGUSR2");
  await check(() => exits.length === 1, { name: "exit called" });
  assert.deepEqual(exits, [0]);
  assert.equal(deadline?.aborted, false, "the grace deadline was not reached");
});

test("a second signal forces exit 1 while the drain still runs", async (t) => {
  const { exits, uninstall } = harness(() => new Promise(() => undefined));
  t.after(uninstall);
  process.emit("SIGUSR2", "SIGUSR2");
  process.emit("SIGUSR2", "SIGUSR2");
  assert.deepEqual(exits, [1]);
});

test("the grace period aborts the drain's deadline, and a drain that still hangs is cut with exit 1", async (t) => {
  let deadline: AbortSignal | undefined;
  const { exits, uninstall } = harness((d) => {
    deadline = d;
    return new Promise(() => undefined);
  }, 100);
  t.after(uninstall);
  process.emit("SIGUSR2", "SIGUSR2");
  await check(() => deadline?.aborted, { name: "deadline aborted after the grace period", timeoutMs: 2_000 });
  await check(() => exits.length === 1, { name: "watchdog exit", timeoutMs: 2_000 });
  assert.deepEqual(exits, [1]);
});
