/**
 * Every JetStream API request the relay sends to a nats-server 2.9 carries only fields 2.9 knows
 * (issue 39): a second connection on each server records the requests (`$JS.API.>`) while
 * `streams apply` creates the destination, `check --live` reads both sides and a relay runs a link
 * (group bucket, durable consumer, pulls, stream infos, marker reads); every field of every recorded
 * body is checked against the json tags of v2.9.10's request structs
 * (test/fixtures/api/nats-2.9.10-request-fields.json, extracted from nats-server's source). Against a
 * newer server (NATS_SERVER_BIN) the requests go as the client writes them: the test says so and skips.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { closeSessions } from "../../src/nats/region-session.js";
import { runPreflight } from "../../src/preflight/preflight.js";
import { applyPlan } from "../../src/streams/apply.js";
import { planStreams } from "../../src/streams/plan.js";
import { startRelay } from "../helpers/relays.js";
import { publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { connectTo } from "../helpers/streams.js";
import { natsServerVersion, serverSupports } from "../helpers/nats-version.js";

const structs = (JSON.parse(readFileSync(new URL("../fixtures/api/nats-2.9.10-request-fields.json", import.meta.url), "utf8")) as { structs: Record<string, { fields: string[] }> }).structs;
const known = (name: string): ReadonlySet<string> => {
  const s = structs[name];
  assert.ok(s, name);
  return new Set(s.fields);
};

/** The 2.9.10 struct a request body on this API subject is, and the structs of its nested objects. */
function requestStruct(api: string): { readonly root: string; readonly nested: Record<string, string> } | undefined {
  const streamConfig = { root: "StreamConfig", nested: { placement: "Placement", mirror: "StreamSource", sources: "StreamSource", external: "ExternalStream", republish: "RePublish" } };
  const table: [string, { root: string; nested: Record<string, string> }][] = [
    ["CONSUMER.DURABLE.CREATE.", { root: "CreateConsumerRequest", nested: { config: "ConsumerConfig" } }],
    ["CONSUMER.CREATE.", { root: "CreateConsumerRequest", nested: { config: "ConsumerConfig" } }],
    ["CONSUMER.MSG.NEXT.", { root: "JSApiConsumerGetNextRequest", nested: {} }],
    ["STREAM.CREATE.", streamConfig],
    ["STREAM.UPDATE.", streamConfig],
    ["STREAM.INFO.", { root: "JSApiStreamInfoRequest", nested: {} }],
    ["STREAM.MSG.GET.", { root: "JSApiMsgGetRequest", nested: {} }],
    ["DIRECT.GET.", { root: "JSApiMsgGetRequest", nested: {} }],
    ["STREAM.MSG.DELETE.", { root: "JSApiMsgDeleteRequest", nested: {} }],
    ["STREAM.PURGE.", { root: "JSApiStreamPurgeRequest", nested: {} }],
    ["STREAM.NAMES", { root: "JSApiStreamNamesRequest", nested: {} }],
    ["STREAM.LIST", { root: "JSApiStreamNamesRequest", nested: {} }],
    ["CONSUMER.LIST.", { root: "ApiPagedRequest", nested: {} }],
    ["CONSUMER.NAMES.", { root: "ApiPagedRequest", nested: {} }],
  ];
  return table.find(([prefix]) => api.startsWith(prefix))?.[1];
}

/** Fields of `body` (recursively, as dotted paths) that the 2.9.10 struct `name` does not have. */
function unknownFields(body: unknown, name: string, nested: Record<string, string>, path = ""): string[] {
  if (Array.isArray(body)) return body.flatMap((b) => unknownFields(b, name, nested, path));
  if (body === null || typeof body !== "object") return [];
  const fields = known(name);
  const out: string[] = [];
  for (const [key, value] of Object.entries(body)) {
    if (!fields.has(key)) out.push(`${path}${key}`);
    else if (nested[key] !== undefined) out.push(...unknownFields(value, nested[key], nested, `${path}${key}.`));
  }
  return out;
}

interface Recorded {
  readonly api: string;
  readonly body: unknown;
}

function record(nc: NatsConnection, into: Recorded[]): void {
  nc.subscribe("$JS.API.>", {
    callback: (_err, m) => {
      const text = new TextDecoder().decode(m.data);
      into.push({ api: m.subject.slice("$JS.API.".length), body: text.trim() === "" ? undefined : JSON.parse(text) });
    },
  });
}

const onlyOn29 = serverSupports("2.10") ? `skipped: needs a 2.9 server (nats-server ${natsServerVersion() ?? "?"} here: requests to 2.10+ go as the client writes them)` : false;

test("the relay's JetStream API requests to nats-server 2.9.10 carry only 2.9 fields", { skip: onlyOn29 }, async (t) => {
  const r = await twoRegions(t, { createDestination: false });
  const seen: Recorded[] = [];
  for (const url of [r.a.url, r.b.url]) {
    const nc = await connectTo(t, url);
    record(nc, seen);
    await nc.flush();
  }
  const config = r.yaml();
  // streams apply: creates the destination (STREAM.CREATE with a stream config).
  const { plan, sessions } = await planStreams(parseConfigText(config, "relay.yaml", {}), { region: "b" });
  try {
    await applyPlan(plan, sessions, { force: false });
  } finally {
    await closeSessions(sessions.values());
  }
  // check --live: reads both regions.
  await runPreflight(parseConfigText(config, "relay.yaml", {}), { region: "b" });
  // A relay: the group bucket, the durable consumer, its pulls, stream infos, marker reads.
  const ids = await publishIds(r.nca, `${r.src}.o`, "m", 100);
  await startRelay(t, config, "b");
  await waitForCount(r.ncb, r.dst, ids.length, 30_000, "relayed");

  const bodies = seen.filter((s) => s.body !== undefined);
  const apis = new Set(bodies.map((s) => s.api.split(".").slice(0, 3).join(".")));
  for (const wanted of ["CONSUMER.CREATE", "CONSUMER.MSG.NEXT", "STREAM.CREATE", "STREAM.INFO", "STREAM.MSG.GET"]) {
    assert.ok([...apis].some((a) => a.startsWith(wanted)), `recorded a ${wanted} request (got ${[...apis].join(", ")})`);
  }
  const problems: string[] = [];
  for (const s of bodies) {
    const struct = requestStruct(s.api);
    if (!struct) {
      problems.push(`$JS.API.${s.api}: a request with a body this test does not know (${JSON.stringify(s.body)})`);
      continue;
    }
    const unknown = unknownFields(s.body, struct.root, struct.nested);
    if (unknown.length > 0) problems.push(`$JS.API.${s.api}: ${unknown.join(", ")} not in 2.9.10's ${struct.root}`);
  }
  assert.deepEqual([...new Set(problems)], [], `${bodies.length} requests recorded`);
});
