import { test } from "node:test";
import assert from "node:assert/strict";
import { maxMessageBytes, pullWindow } from "../../src/nats/pull-window.js";

const MiB = 1024 * 1024;

test("pullWindow: pulls of batchSize outstanding over the window; the window never more than inFlightBytes of the largest messages, never less than a batch", () => {
  // Small messages allowed (a stream max_msg_size of 1 KiB): the whole inFlight.
  assert.deepEqual(pullWindow({ batchSize: 500, inFlight: 1024, inFlightBytes: 64 * MiB }, 1024), { max_messages: 1024, threshold_messages: 524 });
  // 1 GiB of window for 1 MiB messages: 1024, capped at inFlight.
  assert.deepEqual(pullWindow({ batchSize: 100, inFlight: 2048, inFlightBytes: 1024 * MiB }, MiB), { max_messages: 1024, threshold_messages: 924 });
  // The defaults (64 MiB, 1 MiB max_payload): one batch, as a single pull would have been.
  assert.deepEqual(pullWindow({ batchSize: 500, inFlight: 1024, inFlightBytes: 64 * MiB }, MiB), { max_messages: 500 });
  // 2 MiB for 1 MiB messages is 2, below the batch: one batch.
  assert.deepEqual(pullWindow({ batchSize: 2, inFlight: 100, inFlightBytes: 2 * MiB }, MiB), { max_messages: 2 });
  // Unknown size: inFlight.
  assert.deepEqual(pullWindow({ batchSize: 500, inFlight: 1024, inFlightBytes: 64 * MiB }, 0), { max_messages: 1024, threshold_messages: 524 });
});

test("maxMessageBytes: the stream's max_msg_size when set, else the server's max_payload", () => {
  assert.equal(maxMessageBytes(4096, MiB), 4096);
  assert.equal(maxMessageBytes(-1, MiB), MiB);
  assert.equal(maxMessageBytes(undefined, 8 * MiB), 8 * MiB);
  assert.equal(maxMessageBytes(undefined, undefined), 0);
});
