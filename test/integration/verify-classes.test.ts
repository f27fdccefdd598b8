import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/nats-core";
import { verifyCommand } from "../../src/cli/verify-command.js";
import { parseConfigText } from "../../src/config/load.js";
import type { VerifyReport } from "../../src/verify/report.js";
import { verifyLink } from "../../src/verify/verify.js";
import { withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, publishMany, streamCount } from "../helpers/streams.js";
import { metricValue, startRelay, writeConfig } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";

const servers = withServers({ after });
let a: NatsNode;
let b: NatsNode;
before(async () => {
  [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
});

const VERSIONS = `versions: { entity: "header:Entity-Id", version: "header:Entity-Version" }`;

type Headers = Record<string, string>;

async function streams(t: { after(fn: () => unknown): void }) {
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  /** A config whose link `a-to-b` joins the two streams, with `extra` link keys. */
  const yaml = (extra = "") =>
    linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra }],
    });
  return { src, dst, nca, ncb, yaml };
}

/** One at a time, so that stream order is list order. */
async function publishAll(
  nc: NatsConnection,
  list: readonly { subject: string; headers: Headers }[],
): Promise<void> {
  for (const m of list) await publishMany(nc, 1, () => m, 1);
}

/** What the relay stamps on the copy of source message `seq` with id `id`. */
function relayed(src: string, id: string, seq: number): Headers {
  return { "Nats-Msg-Id": id, "Relay-Origin": "a", "Relay-Path": "a", "Relay-Source": `a ${src} ${seq}` };
}

function entity(id: string, e: string, version: number): Headers {
  return { "Nats-Msg-Id": id, "Entity-Id": e, "Entity-Version": String(version) };
}

/** verifyCommand as the CLI runs it, stdout captured; `--json` output is parsed. */
async function verify(yaml: string, extra: readonly string[] = []) {
  const config = await writeConfig(yaml);
  const run = async (json: boolean) => {
    const lines: string[] = [];
    const original = console.log;
    console.log = (...parts: unknown[]) => void lines.push(parts.map(String).join(" "));
    try {
      const code = await verifyCommand([
        "--config",
        config,
        "--link",
        "a-to-b",
        ...extra,
        ...(json ? ["--json"] : []),
      ]);
      return { code, out: lines.join("\n") };
    } finally {
      console.log = original;
    }
  };
  const json = await run(true);
  const text = await run(false);
  assert.equal(text.code, json.code, "text and --json runs exit alike");
  return { code: json.code, report: JSON.parse(json.out) as VerifyReport, text: text.out };
}

test("versions the guard dropped as stale are superseded, not missing: exit 0 (also with --since)", async (t) => {
  const { src, ncb, nca, dst, yaml } = await streams(t);
  const config = yaml(`    guard: { memory: true, ${VERSIONS} }\n`);
  // Source seqs 1-30 fresh (versions 10-39 of e-0..e-4), 31-50 stale (versions 0-19), 51-80 fresh again:
  // the stale ones lie below the relayed horizon, where a message the destination lacks counts as missing.
  const fresh = (prefix: string, from: number) =>
    Array.from({ length: 30 }, (_, i) => ({
      subject: `${src}.x`,
      headers: entity(`${prefix}-${i}`, `e-${i % 5}`, from + i),
    }));
  await publishAll(nca, [
    ...fresh("f", 10),
    ...Array.from({ length: 20 }, (_, j) => ({
      subject: `${src}.x`,
      headers: entity(`s-${j}`, `e-${j % 5}`, j),
    })),
    ...fresh("g", 40),
  ]);
  const { relay } = await startRelay(t, config, "b");
  await check(
    async () =>
      (await streamCount(ncb, dst)) === 60 &&
      (await metricValue(relay, "relay_corrections_total", { kind: "stale_version" })) === 20,
    { name: "60 relayed, 20 dropped as stale", timeoutMs: 30_000 },
  );

  const r = await verify(config);
  assert.equal(r.code, 0, r.text);
  assert.equal(r.report.agree, true);
  assert.equal(r.report.missing.count, 0);
  assert.equal(r.report.superseded?.count, 20);
  // e-0's newest delivered version before source seq 31 is 35 (f-25).
  assert.deepEqual(r.report.superseded?.examples[0], {
    id: "s-0",
    sourceSeq: 31,
    entity: "e-0",
    version: 0,
    heldVersion: 35,
  });
  assert.equal(r.report.delivered.count, 60);
  assert.deepEqual(r.report.differences, {
    unexpected: { missing: 0, duplicated: 0, outOfOrder: 0, versionsBackwards: 0 },
    expected: { notYetRelayed: 0, deadLettered: 0, superseded: 20, notForwarded: 0, badNotConfirmed: 0 },
  });
  assert.match(
    r.text,
    /superseded \(the destination held the entity at this version or newer\): 20\n {2}s-0 \(source seq 31\): e-0 version 0, the destination held 35\n/,
  );
  assert.match(r.text, /result: AGREE \(expected differences: 20 superseded; /);

  // --since after all of that: the versions that make the new stale ones stale were stored before the window.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const cut = new Date();
  await new Promise((resolve) => setTimeout(resolve, 50));
  await publishAll(nca, [
    ...Array.from({ length: 10 }, (_, j) => ({
      subject: `${src}.x`,
      headers: entity(`t-${j}`, `e-${j % 5}`, 20 + j),
    })),
    ...Array.from({ length: 5 }, (_, i) => ({
      subject: `${src}.x`,
      headers: entity(`h-${i}`, `e-${i}`, 100 + i),
    })),
  ]);
  await check(
    async () =>
      (await streamCount(ncb, dst)) === 65 &&
      (await metricValue(relay, "relay_corrections_total", { kind: "stale_version" })) === 30,
    { name: "5 more relayed, 10 more dropped as stale", timeoutMs: 30_000 },
  );
  // No clock slack: every destination copy before the window is read for its version only.
  const recent = await verifyLink(parseConfigText(config, "t.yaml"), "a-to-b", {
    since: cut,
    clockSlackMs: 1,
  });
  assert.equal(recent.agree, true, JSON.stringify(recent));
  assert.deepEqual([recent.source.examined, recent.destination.examined], [15, 5]);
  assert.deepEqual([recent.superseded?.count, recent.missing.count, recent.delivered.count], [10, 0, 5]);
});

test("dead-lettered messages are found on the dead-letter stream; copies relayed before versions are not bad: exit 0", async (t) => {
  const { src, ncb, nca, dst, yaml } = await streams(t);
  const dlqSubject = `dlq.${uniqueName("d")}`;
  const dlqStream = uniqueName("DLQ");
  await createStream(ncb, { name: dlqStream, subjects: [dlqSubject] });

  // 20 messages without entity headers, relayed before guard.versions was configured.
  await publishMany(nca, 20, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `p-${i}` } }), 1);
  const before = await startRelay(t, yaml(), "b");
  await check(async () => (await streamCount(ncb, dst)) === 20, {
    name: "20 relayed without versions",
    timeoutMs: 30_000,
  });
  await before.relay.stop(AbortSignal.timeout(5_000));

  // Then versions and a dead-letter subject: 5 of 15 new messages lack their entity (bad, dead-lettered).
  const config = yaml(
    `    onBadMessage: { deadLetter: "${dlqSubject}" }\n    guard: { memory: true, ${VERSIONS} }\n`,
  );
  await publishAll(
    nca,
    Array.from({ length: 15 }, (_, i) => ({
      subject: `${src}.x`,
      headers: i % 3 === 0 ? { "Nats-Msg-Id": `b-${i}` } : entity(`v-${i}`, `e-${i}`, 1),
    })),
  );
  await startRelay(t, config, "b");
  await check(async () => (await streamCount(ncb, dst)) === 30 && (await streamCount(ncb, dlqStream)) === 5, {
    name: "10 relayed, 5 dead-lettered",
    timeoutMs: 30_000,
  });

  const r = await verify(config);
  assert.equal(r.code, 0, r.text);
  assert.deepEqual(
    {
      forwardable: r.report.source.forwardable,
      bad: r.report.source.bad,
      badButPresent: r.report.source.badButPresent,
    },
    { forwardable: 10, bad: 5, badButPresent: 20 },
  );
  assert.deepEqual(r.report.deadLetter, {
    status: "read",
    subject: dlqSubject,
    stream: dlqStream,
    records: 5,
  });
  assert.equal(r.report.deadLettered.count, 5);
  assert.deepEqual(r.report.deadLettered.examples[0], { id: "b-0", sourceSeq: 21 });
  assert.equal(r.report.badNotConfirmed.count, 0);
  assert.equal(r.report.delivered.count, 30);
  assert.equal(r.report.missing.count, 0);
  assert.match(
    r.text,
    /5 bad under the current config, 20 bad under the current config but held by the destination/,
  );
  assert.match(
    r.text,
    /dead-lettered \(on the dead-letter stream, not in the destination\): 5\n {2}b-0 \(source seq 21\)\n/,
  );
  assert.match(r.text, /result: AGREE \(expected differences: 5 dead-lettered; /);

  // A config whose dead-letter subject no stream captures cannot confirm them: bad, not confirmed.
  const unconfirmed = await verify(
    yaml(
      `    onBadMessage: { deadLetter: "${dlqSubject}.elsewhere" }\n    guard: { memory: true, ${VERSIONS} }\n`,
    ),
  );
  assert.equal(unconfirmed.code, 0, unconfirmed.text);
  assert.equal(unconfirmed.report.deadLetter.status, "no-stream");
  assert.deepEqual([unconfirmed.report.deadLettered.count, unconfirmed.report.badNotConfirmed.count], [0, 5]);
  assert.match(unconfirmed.text, /result: AGREE \(expected differences: 5 bad, not confirmed; /);
});

test("copies stored in another order than their source are out of order: exit 1; partitions only compare within", async (t) => {
  const { src, ncb, nca, dst, yaml } = await streams(t);
  await publishAll(
    nca,
    Array.from({ length: 6 }, (_, i) => ({
      subject: `${src}.${i % 2}.x`,
      headers: { "Nats-Msg-Id": `m-${i}` },
    })),
  );
  // Source seq 3 stored after 4; partition 0 (seqs 1, 3, 5) and 1 (2, 4, 6) are each in order.
  await publishAll(
    ncb,
    [0, 1, 3, 2, 4, 5].map((i) => ({ subject: `${src}.${i % 2}.x`, headers: relayed(src, `m-${i}`, i + 1) })),
  );

  const whole = await verify(yaml());
  assert.equal(whole.code, 1, whole.text);
  assert.deepEqual(whole.report.outOfOrder, {
    scope: "link",
    count: 1,
    examples: [{ id: "m-2", sourceSeq: 3, destSeq: 4, afterSourceSeq: 4, afterDestSeq: 3 }],
  });
  assert.deepEqual([whole.report.missing.count, whole.report.duplicated.count], [0, 0]);
  assert.match(
    whole.text,
    /out of order \(over the whole link, by source seq\): 1\n {2}m-2 \(source seq 3, dest seq 4\) stored after source seq 4 \(dest seq 3\)\n/,
  );
  assert.match(whole.text, /result: DIFFER \(1 out of order; /);

  const partitioned = linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [] }).replace(
    "links:\n",
    `links:
  - name: a-to-b
    from: { region: a, stream: ${src}, filter: "${src}.*.>" }
    to: { region: b, stream: ${dst} }
    partitions: { count: 2, token: 2 }
`,
  );
  const within = await verify(partitioned);
  assert.equal(within.code, 0, within.text);
  assert.deepEqual(within.report.outOfOrder, { scope: "partition", count: 0, examples: [] });

  // Partition 0's seq 7 and 9: stored 9 then 7.
  await publishAll(
    nca,
    [6, 7, 8].map((i) => ({ subject: `${src}.0.x`, headers: { "Nats-Msg-Id": `m-${i}` } })),
  );
  await publishAll(
    ncb,
    [6, 8, 7].map((i) => ({ subject: `${src}.0.x`, headers: relayed(src, `m-${i}`, i + 1) })),
  );
  const swapped = await verify(partitioned);
  assert.equal(swapped.code, 1, swapped.text);
  assert.deepEqual(swapped.report.outOfOrder.examples, [
    { id: "m-7", sourceSeq: 8, destSeq: 9, afterSourceSeq: 9, afterDestSeq: 8, partition: "0" },
  ]);
  assert.match(swapped.text, /stored after source seq 9 \(dest seq 8\) in partition 0\n/);
});

test("a truly missing message exits 1 next to loop-filtered ones, which are counted apart by reason", async (t) => {
  const { src, ncb, nca, dst } = await streams(t);
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url], c: ["nats://127.0.0.1:1"] },
    links: [
      { name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra: "    maxHops: 2\n" },
      { name: "c-to-b", from: "c", fromStream: "C", to: "b", toStream: dst },
      { name: "b-to-a", from: "b", fromStream: dst, to: "a", toStream: src },
    ],
  });
  const own = (i: number) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } });
  await publishAll(nca, [
    ...[0, 1, 2, 3, 4, 5].map(own),
    { subject: `${src}.x`, headers: { "Nats-Msg-Id": "loop", "Relay-Origin": "b", "Relay-Path": "b" } },
    { subject: `${src}.x`, headers: { "Nats-Msg-Id": "far", "Relay-Origin": "x", "Relay-Path": "x,y" } },
    { subject: `${src}.x`, headers: { "Nats-Msg-Id": "via-a", "Relay-Origin": "c", "Relay-Path": "c" } },
    ...[6, 7, 8, 9].map(own),
  ]);
  // Every own message but m-3 (source seq 4); own messages 6-9 are source seqs 10-13.
  const seqOf = (i: number) => (i < 6 ? i + 1 : i + 4);
  await publishAll(
    ncb,
    [0, 1, 2, 4, 5, 6, 7, 8, 9].map((i) => ({
      subject: `${src}.x`,
      headers: relayed(src, `m-${i}`, seqOf(i)),
    })),
  );

  const r = await verify(yaml);
  assert.equal(r.code, 1, r.text);
  assert.deepEqual(r.report.missing, { count: 1, examples: [{ id: "m-3", sourceSeq: 4 }] });
  assert.deepEqual(r.report.notForwarded, {
    count: 3,
    loop: 1,
    maxHops: 1,
    directRoute: 1,
    examples: [
      { id: "loop", sourceSeq: 7 },
      { id: "far", sourceSeq: 8 },
      { id: "via-a", sourceSeq: 9 },
    ],
  });
  assert.equal(r.report.source.forwardable, 10);
  assert.match(
    r.text,
    /not forwarded \(loop-filtered or redundant route\): 3 \(1 loop, 1 over maxHops, 1 delivered by a direct link\)\n/,
  );
  assert.match(r.text, /result: DIFFER \(1 missing; expected differences: 3 not forwarded; /);

  // Progress: one line per phase on a terminal, ending at done = total; nothing when not a terminal.
  const writes: string[] = [];
  const config = parseConfigText(yaml, "t.yaml");
  await verifyLink(config, "a-to-b", { progress: { isTTY: true, write: (s) => (writes.push(s), true) } });
  const drawn = writes.join("");
  assert.match(drawn, new RegExp(`verify a-to-b: destination b/${dst}: 9/9 msgs \\(100%\\)`));
  assert.match(drawn, new RegExp(`verify a-to-b: source a/${src}: 13/13 msgs \\(100%\\)`));
  assert.doesNotMatch(drawn, /dead letters/, "no stream captures the dead-letter subject: nothing to read");
  const piped: string[] = [];
  await verifyLink(config, "a-to-b", { progress: { isTTY: false, write: (s) => (piped.push(s), true) } });
  assert.deepEqual(piped, []);
});

test("dead-letter records in the destination stream itself are dead letters, not copies", async (t) => {
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const dlqSubject = `dlq.${uniqueName("d")}`;
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`, dlqSubject] });
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [
      {
        name: "a-to-b",
        from: "a",
        fromStream: src,
        to: "b",
        toStream: dst,
        extra: `    onBadMessage: { deadLetter: "${dlqSubject}" }\n    guard: { memory: true, ${VERSIONS} }\n`,
      },
    ],
  });
  await publishAll(nca, [
    { subject: `${src}.x`, headers: entity("v-0", "e-0", 1) },
    { subject: `${src}.x`, headers: { "Nats-Msg-Id": "b-1" } },
    { subject: `${src}.x`, headers: { "Nats-Msg-Id": "b-2" } },
    { subject: `${src}.x`, headers: entity("v-3", "e-3", 1) },
  ]);
  const record = (id: string, seq: number, by: string) => ({
    ...relayed(src, id, seq),
    "Relay-Dead-Letter-Reason": "missing entity (header Entity-Id)",
    "Relay-Dead-Letter-Link": by,
  });
  await publishAll(ncb, [
    {
      subject: `${src}.x`,
      headers: { ...relayed(src, "v-0", 1), "Entity-Id": "e-0", "Entity-Version": "1" },
    },
    { subject: dlqSubject, headers: record("b-1", 2, "a-to-b") },
    // Another link's record (here of this link's message b-2) does not count for this one.
    { subject: dlqSubject, headers: record("b-2", 3, "c-to-b") },
    {
      subject: `${src}.x`,
      headers: { ...relayed(src, "v-3", 4), "Entity-Id": "e-3", "Entity-Version": "1" },
    },
  ]);

  const r = await verify(yaml);
  assert.equal(r.code, 0, r.text);
  assert.deepEqual(r.report.deadLetter, { status: "read", subject: dlqSubject, stream: dst, records: 1 });
  assert.deepEqual(r.report.deadLettered, { count: 1, examples: [{ id: "b-1", sourceSeq: 2 }] });
  assert.deepEqual(r.report.badNotConfirmed, { count: 1, examples: [{ id: "b-2", sourceSeq: 3 }] });
  assert.deepEqual(
    [r.report.destination.examined, r.report.destination.fromLink, r.report.delivered.count],
    [2, 2, 2],
  );
  assert.equal(r.report.duplicated.count, 0);
});
