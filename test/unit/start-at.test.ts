/**
 * startAt (README "Where a new link starts"): its config errors, the reload decision, where a link
 * without a record starts (and where it starts again in the same process), the consumer it asks for,
 * the gap baseline of a consumer created at new or a time, and the start row of `check --live`.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { DeliverPolicy } from "@nats-io/jetstream";
import type { ConsumerInfo } from "@nats-io/jetstream";
import { ConfigError, parseConfigText } from "../../src/config/load.js";
import { planReload } from "../../src/config/diff.js";
import type { LinkConfig, RelayConfig } from "../../src/config/types.js";
import { LinkStart, describeStartAt } from "../../src/link/start-at.js";
import { SourceInspector } from "../../src/link/source-inspector.js";
import { durableConfig } from "../../src/nats/durable-consumer.js";
import { createLogger } from "../../src/observability/logger.js";
import { checkStart } from "../../src/preflight/checks.js";
import type { ConsumerFact, StartFact } from "../../src/preflight/checks.js";

const BASE = `regions:
  a: { servers: ["nats://a1:4222"] }
  b: { servers: ["nats://b1:4222"] }
links:
  - name: a-to-b
    from: { region: a, stream: ORDERS }
    to: { region: b, stream: ORDERS }
`;
const parse = (more = ""): RelayConfig => parseConfigText(BASE + more, "test.yaml", {});
const linkWith = (startAt: string): LinkConfig => {
  const link = parse(`    startAt: ${startAt}\n`).links[0];
  assert.ok(link);
  return link;
};

function problems(more: string): readonly string[] {
  try {
    parse(more);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  return assert.fail("expected the config to be rejected");
}

describe("startAt config", () => {
  it("defaults to earliest; new, a past time (compiled to UTC) and a seq are taken", () => {
    assert.equal(parse().links[0]?.startAt, "earliest");
    assert.equal(linkWith("new").startAt, "new");
    assert.deepEqual(linkWith(`{ time: "2024-03-01T12:00:00+02:00" }`).startAt, { time: "2024-03-01T10:00:00.000Z" });
    assert.deepEqual(linkWith("{ seq: 42 }").startAt, { seq: 42 });
  });

  it("names the path and the problem of every bad value", () => {
    const future = new Date(Date.now() + 3_600_000).toISOString();
    assert.deepEqual(problems(`    startAt: { time: "${future}" }\n`), [
      `links[0].startAt.time: "${future}" is in the future: a link can only start at a time that has passed (use "new" to start with the next message stored)`,
    ]);
    assert.deepEqual(problems(`    startAt: { time: "yesterday" }\n`), ['links[0].startAt.time: must be an RFC 3339 time such as "2026-01-02T15:04:05Z" (got "yesterday")']);
    assert.deepEqual(problems(`    startAt: { time: "2024-02-30T00:00:00Z" }\n`), ['links[0].startAt.time: must be an RFC 3339 time such as "2026-01-02T15:04:05Z" (got "2024-02-30T00:00:00Z")']);
    assert.deepEqual(problems("    startAt: { seq: 0 }\n"), ["links[0].startAt.seq: must be an integer from 1 to 9007199254740991 (got 0)"]);
    assert.deepEqual(problems("    startAt: { seq: -5 }\n"), ["links[0].startAt.seq: must be an integer from 1 to 9007199254740991 (got -5)"]);
    const rule = 'links[0].startAt: must be "earliest", "new", { time: <RFC 3339 time> } or { seq: <source sequence> }';
    assert.deepEqual(problems("    startAt: latest\n"), [`${rule} (got "latest")`]);
    assert.deepEqual(problems("    startAt: 5\n"), [`${rule} (got 5)`]);
    assert.deepEqual(problems("    startAt: { seq: 5, time: \"2024-01-01T00:00:00Z\" }\n"), ["links[0].startAt: give exactly one of time or seq"]);
    assert.deepEqual(problems("    startAt: {}\n"), ["links[0].startAt: give exactly one of time or seq"]);
    assert.deepEqual(problems("    startAt: { sequence: 5 }\n"), ["links[0].startAt.sequence: unknown key (allowed: time, seq)"]);
  });

  it("a reload that changes only startAt does not restart the link; with another change it does", () => {
    const plan = planReload(parse(), parse("    startAt: new\n"), "b");
    assert.deepEqual(plan.unchanged, ["a-to-b"]);
    assert.deepEqual(plan.changed, []);
    assert.equal(plan.effective.links[0]?.startAt, "new", "the new value is the config's from now on");
    const both = planReload(parse(), parse("    startAt: new\n    ackWait: 10s\n"), "b");
    assert.deepEqual(both.changed.map((u) => u.startAt), ["new"]);
  });
});

describe("where a link without a record starts", () => {
  const info = (deliveredStreamSeq: number) => ({ delivered: { stream_seq: deliveredStreamSeq } }) as ConsumerInfo;

  it("each startAt asks for its deliver policy", () => {
    const policy = (startAt: string) => {
      const link = linkWith(startAt);
      const c = durableConfig(link, new LinkStart().choose(link, 1).start);
      return [c.deliver_policy, c.opt_start_seq, c.opt_start_time];
    };
    assert.deepEqual(policy("earliest"), [DeliverPolicy.All, undefined, undefined]);
    assert.deepEqual(policy("new"), [DeliverPolicy.New, undefined, undefined]);
    assert.deepEqual(policy(`{ time: "2024-03-01T10:00:00Z" }`), [DeliverPolicy.StartTime, undefined, "2024-03-01T10:00:00.000Z"]);
    assert.deepEqual(policy("{ seq: 7 }"), [DeliverPolicy.StartSequence, 7, undefined]);
    assert.equal(describeStartAt(linkWith("{ seq: 7 }").startAt), "seq 7");
  });

  it("in one process, a consumer lost before the link has a record starts again where the link first started", () => {
    const link = linkWith("new");
    const start = new LinkStart();
    assert.equal(start.choose(link, 1).start, "new");
    start.created(link, info(100), 1); // the server started it at 101
    const again = start.choose(link, 1);
    assert.equal(again.start, 101, "not a new 'now': what was stored since is not skipped");
    assert.match(again.why, /startAt new, as the link first started in this process, at source seq 101/);
    // A source stream recreated since: everything in it was stored after the link first ran.
    assert.equal(start.choose(link, 2).start, undefined);
    // earliest remembers nothing: it starts from the start every time.
    const earliest = linkWith("earliest");
    const e = new LinkStart();
    e.created(earliest, info(0), 1);
    assert.equal(e.choose(earliest, 1).start, undefined);
  });

  it("a consumer created at new or a time reports nothing before its start as a gap, and holes after its first delivery still count", () => {
    const found: string[] = [];
    const inspector = new SourceInspector({
      config: linkWith("new"),
      metrics: { gapMessages: { inc: () => undefined }, sourceClockOffset: { set: () => undefined } } as never,
      logger: createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, cb) => cb() }), secrets: [] }),
      fail: () => undefined,
      requestResync: () => undefined,
      sourceVersion: () => "2.11.0",
    });
    const reading = { ackFloor: 0, streamFirstSeq: 4, streamMessages: 7, pending: 0, ackPending: 0, messages: 0, ageSeconds: 0, deliveredSeq: 10, streamLastSeq: 10, at: "" };
    inspector.placed({ created: true, deliveredStreamSeq: 10, skippedTo: 10, ackFloor: 10 });
    inspector.inspect(reading); // a server that reports ack floor 0 for a new consumer: 1-3 are not the link's
    assert.equal(inspector.gaps.length, 0);
    assert.equal(inspector.delivered(11, true), "take");
    assert.equal(inspector.delivered(14, true), "take", "a hole after the first delivery is a gap");
    for (const g of inspector.gaps) found.push(`${g.fromSeq}-${g.toSeq}`);
    assert.deepEqual(found, ["12-13"]);
  });
});

describe("check --live: the start row", () => {
  const missing: ConsumerFact = { kind: "missing" };
  const row = (startAt: string, consumer: ConsumerFact, fact: StartFact) => checkStart(linkWith(startAt), consumer, fact);

  it("a link with a consumer goes on from its ack floor, whatever startAt says", () => {
    const r = row("new", { kind: "found", consumer: { filterSubjects: [], numPending: 5, numAckPending: 2, ackFloorStreamSeq: 40, ackFloorConsumerSeq: 40 } }, { kind: "unreachable" });
    assert.equal(r.name, "start");
    assert.equal(r.level, "ok");
    assert.equal(r.detail, "relay-a-to-b exists: the link goes on after a/ORDERS seq 40 (its ack floor), 7 messages to relay; startAt new applies only to a link without a record");
  });

  it("a link whose destination holds its markers starts after the last one", () => {
    const r = row("{ seq: 3 }", missing, { kind: "record", afterSeq: 90, streamLastSeq: 100 });
    assert.equal(r.level, "ok");
    assert.equal(r.detail, "no consumer, but the destination holds the link's messages up to a/ORDERS seq 90: the link starts after it, 10 messages to relay; startAt seq 3 does not apply");
  });

  it("a new link starts where startAt says, with the messages waiting from there", () => {
    assert.equal(
      row("new", missing, { kind: "start-at", startSeq: 101, messages: 0, complete: true, scanned: 0 }).detail,
      "a new link (no consumer, the destination holds none of its messages): startAt new starts it with the next message stored (after seq 100), 0 messages to relay now",
    );
    assert.equal(
      row(`{ time: "2024-03-01T10:00:00Z" }`, missing, { kind: "start-at", startSeq: 61, messages: 40, complete: true, scanned: 12 }).detail,
      "a new link (no consumer, the destination holds none of its messages): startAt time 2024-03-01T10:00:00.000Z starts it at a/ORDERS seq 61, 40 messages to relay now",
    );
    const partial = row("earliest", missing, { kind: "start-at", startSeq: 1, messages: 100, complete: false, scanned: 200_000 });
    assert.equal(partial.level, "warning");
    assert.match(partial.detail, /none of its messages in the last 200000 destination messages \(the relay reads no further\)\): startAt earliest starts it at a\/ORDERS seq 1, 100 messages/);
    assert.ok(partial.fix);
  });

  it("says when it could not tell, and skips what it could not read", () => {
    const failed = row("new", missing, { kind: "failed", reason: "permissions violation" });
    assert.equal(failed.level, "warning");
    assert.match(failed.detail, /cannot tell where the link starts: permissions violation/);
    assert.equal(row("new", { kind: "unreachable" }, { kind: "unreachable" }).level, "skipped");
    assert.equal(row("new", { kind: "failed", reason: "x" }, { kind: "unreachable" }).level, "skipped");
    assert.equal(row("new", missing, { kind: "unreachable" }).level, "skipped");
  });
});
