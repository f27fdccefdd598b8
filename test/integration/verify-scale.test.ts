import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers } from "@nats-io/nats-core";
import { verifyCommand } from "../../src/cli/verify-command.js";
import { fillStream } from "../helpers/fill.js";
import type { VerifyReport } from "../../src/verify/report.js";
import { check } from "../helpers/check.js";
import { streamCount } from "../helpers/streams.js";
import { writeConfig } from "../helpers/relays.js";
import { linkYaml, twoRegions } from "../helpers/scenario.js";

const COUNT = 50_000;
const IN_FLIGHT = 100; // the last source messages have no copy yet
const payload = new TextEncoder().encode("x".repeat(64));

/** Headers of source message i (0-based), and of its copy when `relayedFrom` names the source stream. */
function headersOf(i: number, relayedFrom?: string, version = Math.floor(i / 1_000)) {
  const h = headers();
  h.set("Nats-Msg-Id", `s-${i}`);
  h.set("Entity-Id", `e-${i % 1_000}`);
  h.set("Entity-Version", String(version));
  if (relayedFrom) {
    h.set("Relay-Origin", "a");
    h.set("Relay-Path", "a");
    h.set("Relay-Source", `a ${relayedFrom} ${i + 1}`);
  }
  return h;
}

/** Pipelined publishing, in order on one connection (so stream seq = i + 1). */
async function fill(nc: NatsConnection, subject: string, count: number, make: (i: number) => ReturnType<typeof headers>): Promise<void> {
  await fillStream(nc, subject, count, { payload, headers: make, timeoutMs: 30_000 });
}

test("50,000 messages a side: exact counts of missing, duplicated, backwards and in-flight", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t, { dstDuplicateWindowMs: 1_000 });
  const config = await writeConfig(linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [{
      name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst,
      extra: `    guard: { memory: true, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`,
    }],
  }));

  const wrongVersion = 7 + 20 * 1_000; // entity e-7's version 20, stored as 3: 19 → 3 goes backwards
  await Promise.all([
    fill(nca, `${src}.x`, COUNT, (i) => headersOf(i)),
    fill(ncb, `${src}.x`, COUNT - IN_FLIGHT, (i) => headersOf(i, src, i === wrongVersion ? 3 : undefined)),
  ]);
  const jsm = await jetstreamManager(ncb);
  for (const i of [100, 25_000, 49_000]) await jsm.streams.deleteMessage(dst, i + 1);
  const js = jetstream(ncb);
  for (const i of [10, 20]) {
    await check(async () => !(await js.publish(`${src}.x.0`, payload, { headers: headersOf(i, src) })).duplicate, {
      name: `s-${i} stored a second time after the 1 s duplicate window`,
      timeoutMs: 10_000,
      intervalMs: 200,
    });
  }
  assert.equal(await streamCount(ncb, dst), COUNT - IN_FLIGHT - 3 + 2);

  const lines: string[] = [];
  const log = console.log;
  console.log = (...parts: unknown[]) => void lines.push(parts.map(String).join(" "));
  const started = performance.now();
  let code: number;
  try {
    code = await verifyCommand(["--config", config, "--link", "a-to-b", "--json"]);
  } finally {
    console.log = log;
  }
  const seconds = (performance.now() - started) / 1000;
  t.diagnostic(`verify of ${COUNT} + ${COUNT - IN_FLIGHT} messages: ${seconds.toFixed(2)} s`);
  const r = JSON.parse(lines.join("\n")) as VerifyReport;
  assert.equal(code, 1);
  assert.deepEqual(
    { examined: r.source.examined, forwardable: r.source.forwardable, destExamined: r.destination.examined, fromLink: r.destination.fromLink },
    { examined: COUNT, forwardable: COUNT, destExamined: COUNT - IN_FLIGHT - 1, fromLink: COUNT - IN_FLIGHT - 1 },
  );
  assert.equal(r.destination.lastRelayedSourceSeq, COUNT - IN_FLIGHT);
  assert.deepEqual({ count: r.notYetRelayed.count, firstSeq: r.notYetRelayed.firstSeq }, { count: IN_FLIGHT, firstSeq: COUNT - IN_FLIGHT + 1 });
  assert.equal(r.notYetRelayed.examples.length, 20);
  assert.deepEqual(r.missing, {
    count: 3,
    examples: [{ id: "s-100", sourceSeq: 101 }, { id: "s-25000", sourceSeq: 25_001 }, { id: "s-49000", sourceSeq: 49_001 }],
  });
  assert.deepEqual(r.duplicated, { count: 2, extraCopies: 2, examples: [{ id: "s-10", copies: 2 }, { id: "s-20", copies: 2 }] });
  // The two replayed duplicates carry their entities' version 0 after version 49: backwards too.
  assert.deepEqual(r.backwards, {
    count: 3,
    events: 3,
    entitiesChecked: 1_000,
    examples: [
      { entity: "e-7", before: 19, after: 3, beforeSeq: 7 + 19 * 1_000 + 1, afterSeq: wrongVersion + 1 },
      { entity: "e-10", before: 49, after: 0, beforeSeq: 10 + 49 * 1_000 + 1, afterSeq: COUNT - IN_FLIGHT + 1 },
      { entity: "e-20", before: 49, after: 0, beforeSeq: 20 + 49 * 1_000 + 1, afterSeq: COUNT - IN_FLIGHT + 2 },
    ],
  });
});
