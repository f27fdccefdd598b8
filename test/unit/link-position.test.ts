import { test } from "node:test";
import assert from "node:assert/strict";
import { parseLinkArgs } from "../../src/cli/link-command.js";
import { isRelayError } from "../../src/errors.js";
import {
  checkpointKey,
  parseCheckpoint,
  parseExplicitStart,
  startKey,
} from "../../src/group/link-position.js";
import { destSubjectsOf } from "../../src/link/cursor.js";
import { parseConfigText } from "../../src/config/load.js";
import type { StreamInfo } from "@nats-io/jetstream";

const usageError = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (err: unknown) => isRelayError(err) && err.code === "USAGE" && pattern.test(err.message));

test("checkpoint and explicit start: keys beside the lease's, values parsed strictly (never guessed from)", () => {
  assert.equal(checkpointKey("a.ORDERS.relay-orders"), "_checkpoint.a.ORDERS.relay-orders");
  assert.equal(startKey("a.ORDERS.relay-orders"), "_start.a.ORDERS.relay-orders");
  const cp = { sourceCreatedMs: 1, sourceSeq: 100, destCreatedMs: 2, destSeq: 250_100, at: "t" };
  assert.deepEqual(parseCheckpoint(JSON.stringify(cp)), cp);
  assert.equal(parseCheckpoint(JSON.stringify({ ...cp, sourceSeq: -1 })), undefined);
  assert.equal(parseCheckpoint(JSON.stringify({ ...cp, destSeq: "5" })), undefined);
  assert.equal(parseCheckpoint("not json"), undefined);
  assert.deepEqual(parseExplicitStart('{"seq":101,"by":"ops@host","at":"t","reason":"lost"}'), {
    seq: 101,
    by: "ops@host",
    at: "t",
    reason: "lost",
  });
  assert.deepEqual(parseExplicitStart('{"seq":"startAt"}'), { seq: "startAt", by: "", at: "", reason: "" });
  assert.equal(parseExplicitStart('{"seq":"new"}'), undefined);
  assert.equal(parseExplicitStart('{"seq":0}'), undefined);
  assert.equal(parseExplicitStart('{"seq":1.5}'), undefined);
  assert.equal(parseExplicitStart("null"), undefined);
});

test("link start-at: needs a link and --seq N >= 1; --seq belongs to start-at only", () => {
  assert.deepEqual(parseLinkArgs(["start-at", "orders", "--seq", "101", "--config", "c.yaml"]), {
    sub: "start-at",
    link: "orders",
    config: "c.yaml",
    json: false,
    help: false,
    seq: 101,
  });
  assert.equal(parseLinkArgs(["start-at", "orders", "--as-configured", "--config", "c.yaml"]).seq, "startAt");
  usageError(
    () => parseLinkArgs(["start-at", "orders", "--as-configured", "--seq", "5", "--config", "c.yaml"]),
    /not both/,
  );
  usageError(
    () => parseLinkArgs(["resume", "orders", "--as-configured", "--config", "c.yaml"]),
    /--as-configured belongs to start-at/,
  );
  usageError(() => parseLinkArgs(["start-at", "orders", "--config", "c.yaml"]), /--seq N is required/);
  usageError(
    () => parseLinkArgs(["start-at", "orders", "--seq", "0", "--config", "c.yaml"]),
    /--seq N is required/,
  );
  usageError(
    () => parseLinkArgs(["start-at", "orders", "--seq", "x", "--config", "c.yaml"]),
    /--seq N is required/,
  );
  usageError(() => parseLinkArgs(["start-at", "--seq", "5", "--config", "c.yaml"]), /name the link/);
  usageError(
    () => parseLinkArgs(["pause", "orders", "--seq", "5", "--reason", "r", "--config", "c.yaml"]),
    /--seq belongs to start-at/,
  );
});

test("the subjects a link writes in its destination: its filter or its source's subjects, through its transform", () => {
  const config = parseConfigText(
    `regions:
  a: { servers: ["nats://a:4222"] }
  b: { servers: ["nats://b:4222"] }
links:
  - name: all
    from: { region: a, stream: ORDERS }
    to: { region: b, stream: DST, subject: { addPrefix: "a." } }
  - name: some
    from: { region: a, stream: ORDERS, filter: "orders.eu.>" }
    to: { region: b, stream: DST }
`,
    "test.yaml",
    {},
  );
  const [all, some] = config.links;
  assert.ok(all && some);
  const info = { config: { subjects: ["orders.>", "refunds.>"] } } as unknown as StreamInfo;
  assert.deepEqual(destSubjectsOf(all, info), ["a.orders.>", "a.refunds.>"]);
  assert.deepEqual(destSubjectsOf(some, info), ["orders.eu.>"]);
  assert.equal(
    destSubjectsOf(all, { config: { subjects: [] } } as unknown as StreamInfo),
    undefined,
    "a stream that only sources others",
  );
  assert.equal(destSubjectsOf(all, undefined), undefined);
});
