import { test } from "node:test";
import assert from "node:assert/strict";
import { pullWindow } from "../../src/nats/pull-window.js";

test("pullWindow: the client buffers the whole window and pulls again once a batch of it has arrived", () => {
  assert.deepEqual(pullWindow(500, 1024), { max_messages: 1024, threshold_messages: 524 });
  assert.deepEqual(pullWindow(100, 2048), { max_messages: 2048, threshold_messages: 1948 });
  // batchSize = inFlight: no threshold of 0 (the client would read it as "use the default").
  assert.deepEqual(pullWindow(1024, 1024), { max_messages: 1024 });
});
