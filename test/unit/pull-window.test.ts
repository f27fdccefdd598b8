import { test } from "node:test";
import assert from "node:assert/strict";
import { windowPerSecond } from "../../src/nats/pull-window.js";

test("windowPerSecond: one window per round trip; unknown without a round trip", () => {
  assert.equal(windowPerSecond(500, 40), 12_500);
  assert.equal(windowPerSecond(8_192, 300), 27_307);
  assert.equal(windowPerSecond(500, undefined), undefined);
  assert.equal(windowPerSecond(500, 0), undefined);
});
