/**
 * API requests trimmed to nats-server 2.9's fields on a connection to a server older than 2.10 (issue
 * 39): the code's field lists are the json tags of v2.9.10's request structs
 * (test/fixtures/api/nats-2.9.10-request-fields.json, extracted from nats-server's source).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { atLeast, CONSUMER_CONFIG_2_9, requestFor, shapeOf, STREAM_CONFIG_2_9 } from "../../src/nats/api-fields.js";
import type { Shape } from "../../src/nats/api-fields.js";

const structs = (JSON.parse(readFileSync(new URL("../fixtures/api/nats-2.9.10-request-fields.json", import.meta.url), "utf8")) as { structs: Record<string, { fields: string[] }> }).structs;
const fieldsOf = (name: string): string[] => [...(structs[name]?.fields ?? [])].sort();
const keys = (s: Shape | true | undefined): string[] => (s === undefined || s === true ? [] : Object.keys(s).sort());

test("the field lists are v2.9.10's structs", () => {
  assert.deepEqual(keys(CONSUMER_CONFIG_2_9), fieldsOf("ConsumerConfig"));
  assert.deepEqual(keys(STREAM_CONFIG_2_9), fieldsOf("StreamConfig"));
  assert.deepEqual(keys(STREAM_CONFIG_2_9.placement), fieldsOf("Placement"));
  assert.deepEqual(keys(STREAM_CONFIG_2_9.mirror), fieldsOf("StreamSource"));
  assert.deepEqual(keys(STREAM_CONFIG_2_9.republish), fieldsOf("RePublish"));
  const api: [string, string][] = [
    ["$JS.API.CONSUMER.CREATE.S.d", "CreateConsumerRequest"],
    ["$JS.API.CONSUMER.DURABLE.CREATE.S.d", "CreateConsumerRequest"],
    ["$JS.API.CONSUMER.MSG.NEXT.S.d", "JSApiConsumerGetNextRequest"],
    ["$JS.API.STREAM.INFO.S", "JSApiStreamInfoRequest"],
    ["$JS.API.STREAM.MSG.GET.S", "JSApiMsgGetRequest"],
    ["$JS.API.DIRECT.GET.S", "JSApiMsgGetRequest"],
    ["$JS.API.STREAM.MSG.DELETE.S", "JSApiMsgDeleteRequest"],
    ["$JS.API.STREAM.PURGE.S", "JSApiStreamPurgeRequest"],
    ["$JS.API.STREAM.NAMES", "JSApiStreamNamesRequest"],
    ["$JS.hub.API.STREAM.CREATE.S", "StreamConfig"],
  ];
  for (const [subject, struct] of api) assert.deepEqual(keys(shapeOf(subject)), fieldsOf(struct), subject);
  assert.equal(shapeOf("orders.1"), undefined);
  assert.equal(shapeOf("$JS.API.INFO"), undefined);
});

test("a consumer create to 2.9.10 loses the client's action and pedantic (2.10, 2.11) and keeps the rest; 2.10+ gets it as written", () => {
  const body = {
    config: { durable_name: "d", ack_policy: "all", metadata: { a: "1" }, pause_until: "2026-01-01T00:00:00Z" },
    stream_name: "S",
    action: "create",
    pedantic: false,
  };
  const bytes = new TextEncoder().encode(JSON.stringify(body));
  const old = requestFor("$JS.API.CONSUMER.CREATE.S.d", bytes, "2.9.10");
  assert.deepEqual(old.removed.sort(), ["action", "config.metadata", "config.pause_until", "pedantic"]);
  assert.deepEqual(JSON.parse(Buffer.from(old.data ?? []).toString()), { config: { durable_name: "d", ack_policy: "all" }, stream_name: "S" });
  for (const version of ["2.10.0", "2.11.4", "2.12.0-RC.2", "2.14.5", undefined]) {
    const same = requestFor("$JS.API.CONSUMER.CREATE.S.d", bytes, version);
    assert.equal(same.data, bytes, String(version));
    assert.deepEqual(same.removed, []);
  }
  // Lists of objects (sources) are trimmed item by item; what 2.9 knows is left untouched (the same bytes).
  const stream = new TextEncoder().encode(JSON.stringify({ name: "D", sources: [{ name: "A", subject_transforms: [] }], compression: "s2" }));
  assert.deepEqual(requestFor("$JS.API.STREAM.CREATE.D", stream, "2.9.10").removed.sort(), ["compression", "sources.subject_transforms"]);
  const plain = new TextEncoder().encode(JSON.stringify({ last_by_subj: "x" }));
  assert.equal(requestFor("$JS.API.STREAM.MSG.GET.S", plain, "2.9.10").data, plain);
  assert.equal(requestFor("orders.1", bytes, "2.9.10").data, bytes, "not an API subject");
});

test("server versions", () => {
  assert.equal(atLeast("2.9.10", 2, 10), false);
  assert.equal(atLeast("2.10.0", 2, 10), true);
  assert.equal(atLeast("v2.11.0-RC.1", 2, 10), true);
  assert.equal(atLeast("3.0.0", 2, 10), true);
  assert.equal(atLeast(undefined, 2, 10), true, "unknown: nothing trimmed");
});
