/**
 * The servers that jump consumers over stored messages on a subject purge (nats-server #5075, fixed in
 * 2.10.11), and what the link's inspector does with a jump on one: it asks for a read-back instead of
 * reporting a gap, also for an ack floor the server moved over what this relay was delivered.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { parseConfigText } from "../../src/config/load.js";
import { SourceInspector } from "../../src/link/source-inspector.js";
import { skipsOnSubjectPurge } from "../../src/nats/purge-skips.js";
import { createLogger } from "../../src/observability/logger.js";

describe("skipsOnSubjectPurge", () => {
  it("is true before 2.10.11 and false from it on (an unreadable version is taken as fixed)", () => {
    for (const v of ["2.9.10", "2.9.25", "v2.10.0", "2.10.10", "1.4.0"]) assert.equal(skipsOnSubjectPurge(v), true, v);
    for (const v of ["2.10.11", "2.10.29", "2.11.0", "2.12.1-RC.2", "3.0.0", undefined, "dev"]) assert.equal(skipsOnSubjectPurge(v), false, String(v));
  });
});

function inspector(version: string | (() => string | undefined), kv = false) {
  const [from, to] = kv ? ["{ region: a, bucket: cfg }", "{ region: b, bucket: cfg }"] : ["{ region: a, stream: SRC }", "{ region: b, stream: DST }"];
  const cfg = parseConfigText(
    ["regions:", "  a: { servers: [nats://127.0.0.1:1] }", "  b: { servers: [nats://127.0.0.1:2] }", "links:", "  - name: a-to-b", `    from: ${from}`, `    to: ${to}`, ""].join("\n"),
    "test.yaml",
  );
  const gaps: number[] = [];
  const i = new SourceInspector({
    config: cfg.links[0]!,
    metrics: { gapMessages: { inc: (_l: unknown, n: number) => gaps.push(n) }, sourceClockOffset: { set: () => undefined }, kvSuperseded: { inc: () => undefined } } as never,
    logger: createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, cb) => cb() }), secrets: [] }),
    fail: () => undefined,
    requestResync: () => undefined,
    sourceVersion: typeof version === "string" ? () => version : version,
  });
  return { i, gaps };
}

describe("SourceInspector on a server that skips on a subject purge", () => {
  it("a jump in the deliveries is a range to read back, not a gap; what the read-back finds gone is", () => {
    const { i, gaps } = inspector("2.9.10");
    i.placed({ created: true, startSeq: 1, deliveredStreamSeq: 0, ackFloor: 0 });
    assert.equal(i.delivered(1, true), "take");
    const verdict = i.delivered(9, true);
    assert.ok(typeof verdict === "object", "a range to read back");
    assert.deepEqual([verdict.fromSeq, verdict.toSeq], [2, 8]);
    assert.deepEqual(gaps, [], "nothing reported before the read-back");
    assert.equal(i.gone(4, 5), true);
    assert.deepEqual(gaps, [2]);
    assert.deepEqual(i.gaps.map((g) => [g.fromSeq, g.toSeq]), [[4, 5]]);
  });

  it("before the server's version is known, a jump is read back; once known, the last version known stands while the connection forgets it", () => {
    let version: string | undefined;
    const { i, gaps } = inspector(() => version);
    i.placed({ created: true, startSeq: 1, deliveredStreamSeq: 0, ackFloor: 0 });
    i.delivered(1, true);
    assert.equal(typeof i.delivered(5, true), "object", "unknown: read back");
    version = "2.11.0";
    assert.equal(i.delivered(9, true), "take", "a fixed server: a gap at once");
    version = undefined; // reconnecting
    assert.equal(i.delivered(12, true), "take", "the last version known stands");
    assert.deepEqual(gaps, [3, 2]);
  });

  it("on a fixed server the same jump is a gap at once", () => {
    const { i, gaps } = inspector("2.10.11");
    i.placed({ created: true, startSeq: 1, deliveredStreamSeq: 0, ackFloor: 0 });
    i.delivered(1, true);
    assert.equal(i.delivered(9, true), "take");
    assert.deepEqual(gaps, [7]);
  });

  it("an ack floor above what this relay was delivered is read back when the cursor is placed, unless the link was another relay's meanwhile", () => {
    const { i } = inspector("2.9.10");
    i.placed({ created: false, deliveredStreamSeq: 0, ackFloor: 0 });
    i.delivered(1, true);
    i.delivered(2, true);
    const skipped = i.placed({ created: false, deliveredStreamSeq: 2, ackFloor: 40 });
    assert.deepEqual(skipped && [skipped.fromSeq, skipped.toSeq], [3, 40]);
    assert.equal(i.placed({ created: false, deliveredStreamSeq: 40, ackFloor: 40 }), undefined, "read back once");
    i.tenureEnded();
    assert.equal(i.placed({ created: false, deliveredStreamSeq: 90, ackFloor: 90 }), undefined, "another owner acked 41-90");
    assert.equal(inspector("2.9.10").i.placed({ created: false, deliveredStreamSeq: 5, ackFloor: 5 }), undefined, "a relay that was delivered nothing yet and has no checkpoint knows nothing of the floor");
    const stream = inspector("2.9.10").i;
    assert.equal(stream.needsReference, false, "a stream link's last owner may have relayed beyond the duplicate window: no checkpoint reference");
    assert.equal(stream.placed({ created: false, deliveredStreamSeq: 70, ackFloor: 70, checkpointSeq: 50 }), undefined);
    const fresh = inspector("2.9.10", true).i;
    assert.equal(fresh.needsReference, true);
    const behind = fresh.placed({ created: false, deliveredStreamSeq: 70, ackFloor: 70, checkpointSeq: 50 });
    assert.deepEqual(behind && [behind.fromSeq, behind.toSeq], [51, 70], "a fresh relay of a KV link judges the floor by the last checkpoint");
    assert.equal(fresh.needsReference, false);
    assert.equal(inspector("2.10.11", true).i.needsReference, false, "a fixed server needs no reference");
    const noCheckpoint = inspector("2.9.10", true).i.placed({ created: false, deliveredStreamSeq: 30, ackFloor: 30 });
    assert.deepEqual(noCheckpoint && [noCheckpoint.fromSeq, noCheckpoint.toSeq], [1, 30], "no checkpoint yet: from the stream's start");
    assert.equal(inspector("2.9.10", true).i.placed({ created: true, startSeq: 31, deliveredStreamSeq: 30, ackFloor: 30 }), undefined, "a consumer this relay created where it chose: nothing skipped");
  });
});
