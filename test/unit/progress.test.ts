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

test("CatchUpLog: one line per interval while catching up, with drain rate and ETA; none when live", async () => {
  const { CatchUpLog } = await import("../../src/link/progress-log.js");
  const lines: { fields: Record<string, unknown>; msg: string }[] = [];
  const logger = { info: (fields: Record<string, unknown>, msg: string) => lines.push({ fields, msg }) } as never;
  let now = 0;
  const log = new CatchUpLog(logger, 1_000, () => now);
  const reading = (messages: number, ageSeconds: number) => ({ messages, ageSeconds }) as never;
  log.observe("catching-up", reading(10_000, 60));
  now = 500;
  log.observe("catching-up", reading(9_000, 59)); // within the interval
  now = 1_000;
  log.observe("catching-up", reading(8_000, 50));
  now = 2_000;
  log.observe("catching-up", reading(8_500, 50)); // producers outrun the relay
  now = 3_000;
  log.observe("live", reading(0, 0));
  now = 5_000;
  log.observe("live", reading(0, 0));
  assert.equal(lines.length, 2);
  assert.deepEqual(lines[0]!.fields, { backlogMessages: 8_000, backlogAgeSeconds: 50, drainRate: 2_000, etaSeconds: 4 });
  assert.equal(lines[0]!.msg, "catching up: 8000 messages behind, oldest 50 s old, shrinking by 2000/s, about 4 s to go");
  assert.equal(lines[1]!.fields["etaSeconds"], undefined);
  assert.match(lines[1]!.msg, /backlog not shrinking$/);
});
