import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { DurationError, formatDuration, parseDuration } from "../../src/config/durations.js";

void describe("parseDuration", () => {
  void it("parses every unit and combinations, largest unit first", () => {
    const cases: [string, number][] = [
      ["250ms", 250],
      ["30s", 30_000],
      ["5m", 300_000],
      ["1h", 3_600_000],
      ["1d", 86_400_000],
      ["1h30m", 5_400_000],
      ["2m30s500ms", 150_500],
      ["1.5s", 1_500],
      ["0s", 0],
      [" 10s ", 10_000],
    ];
    for (const [text, ms] of cases) assert.equal(parseDuration(text), ms, text);
  });

  void it("refuses plain numbers, and says to add a unit", () => {
    assert.throws(() => parseDuration(30), {
      name: "DurationError",
      message: 'must be a duration with a unit, e.g. "30s" (got 30)',
    });
    assert.throws(() => parseDuration("30"), {
      message: 'must be a duration with a unit, e.g. "30s" (got "30")',
    });
    assert.throws(() => parseDuration(0), /e\.g\. "0s"/);
  });

  void it("refuses anything else", () => {
    for (const bad of ["", "s", "10x", "-1s", "1 s", "30m1h", "1s1s", "1h 30m", "0.5ms", "1e3ms", "400d"]) {
      assert.throws(() => parseDuration(bad), DurationError, JSON.stringify(bad));
    }
    assert.throws(() => parseDuration(true), /must be a duration string/);
    assert.throws(() => parseDuration(null), DurationError);
  });
});

void describe("formatDuration", () => {
  void it("writes durations the way the config does, and round-trips", () => {
    assert.equal(formatDuration(0), "0s");
    assert.equal(formatDuration(250), "250ms");
    assert.equal(formatDuration(5_400_000), "1h30m");
    assert.equal(formatDuration(90_061_001), "1d1h1m1s1ms");
    for (const ms of [1, 999, 1_000, 61_000, 86_400_000, 123_456_789])
      assert.equal(parseDuration(formatDuration(ms)), ms);
  });
});
