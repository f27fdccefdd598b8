import assert from "node:assert/strict";
import { test } from "node:test";
import { Progress, describeProgress } from "../../src/observability/progress.js";

function sink(isTTY: boolean) {
  const writes: string[] = [];
  return { isTTY, writes, write: (t: string) => (writes.push(t), true) };
}

test("describeProgress: done/total, percent, rate and ETA", () => {
  assert.equal(
    describeProgress({ done: 12_000, total: 300_000, elapsedMs: 2_000 }),
    "12,000/300,000 msgs (4%), 6,000 msgs/s, ETA 48s",
  );
  assert.equal(
    describeProgress({ done: 600_000, total: 6_600_000, elapsedMs: 1_000 }, "ids"),
    "600,000/6,600,000 ids (9%), 600,000 ids/s, ETA 10s",
  );
  assert.equal(
    describeProgress({ done: 10, total: 3_610, elapsedMs: 1_000 }),
    "10/3,610 msgs (0%), 10 msgs/s, ETA 6m00s",
  );
  assert.equal(describeProgress({ done: 500, elapsedMs: 1_000 }), "500 msgs, 500 msgs/s");
});

test("Progress draws on a terminal, at most once per interval, and ends the line", () => {
  let now = 0;
  const out = sink(true);
  const p = new Progress({ label: "verify x", stream: out, intervalMs: 100, now: () => now });
  now = 50;
  p.update(10, 100);
  now = 60;
  p.update(20, 100); // within the interval: not drawn
  now = 200;
  p.update(40, 100);
  p.finish();
  assert.equal(out.writes.length, 4);
  assert.match(out.writes[0]!, /^\rverify x: 10\/100 msgs \(10%\)/);
  assert.match(out.writes[1]!, /^\rverify x: 40\/100 msgs \(40%\), 200 msgs\/s, ETA 1s/);
  assert.equal(out.writes[3], "\n");
});

test("Progress writes nothing when the stream is not a terminal", () => {
  const out = sink(false);
  const p = new Progress({ label: "verify x", stream: out, intervalMs: 0 });
  p.update(1, 2);
  p.finish();
  assert.equal(p.active, false);
  assert.deepEqual(out.writes, []);
});
