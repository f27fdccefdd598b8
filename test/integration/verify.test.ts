import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers as createHeaders } from "@nats-io/nats-core";
import { verifyCommand } from "../../src/cli/verify-command.js";
import { isRelayError } from "../../src/errors.js";
import { parseConfigText } from "../../src/config/load.js";
import type { VerifyReport } from "../../src/verify/report.js";
import { parseSince } from "../../src/verify/since.js";
import { sourceSubject } from "../../src/verify/verify.js";
import { HashedKeyTable } from "../../src/verify/hash-table.js";
import { readStream } from "../../src/nats/stream-reader.js";
import { copyPayload, fastHeadersAvailable, headersOf, lastTokenNumber } from "../../src/nats/wire-headers.js";
import { withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";
import { check, uniqueName } from "../helpers/check.js";
import { connectTo, createStream, publishMany, streamCount } from "../helpers/streams.js";
import { startRelay, writeConfig } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";

const servers = withServers({ after });
let a: NatsNode;
let b: NatsNode;
before(async () => {
  [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
});

const VERSIONS = `    guard: { memory: true, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }\n`;

/** A source and a destination stream (fresh names) and a config whose link `a-to-b` joins them. */
async function setup(
  t: { after(fn: () => unknown): void },
  opts: { dupWindowMs?: number; versions?: boolean } = {},
) {
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, {
    name: dst,
    subjects: [`${src}.>`],
    ...(opts.dupWindowMs ? { duplicateWindowMs: opts.dupWindowMs } : {}),
  });
  const yaml = linkYaml({
    regions: { a: [a.url], b: [b.url] },
    links: [
      {
        name: "a-to-b",
        from: "a",
        fromStream: src,
        to: "b",
        toStream: dst,
        ...(opts.versions ? { extra: VERSIONS } : {}),
      },
      { name: "b-to-a", from: "b", fromStream: dst, to: "a", toStream: src },
    ],
  });
  return { src, dst, nca, ncb, yaml, config: await writeConfig(yaml) };
}

type Headers = Record<string, string>;

/** What the relay stamps on the copy of source message `seq` (1-based) with id `id`. */
function relayed(src: string, id: string, seq: number, extra: Headers = {}): Headers {
  return {
    "Nats-Msg-Id": id,
    "Relay-Origin": "a",
    "Relay-Path": "a",
    "Relay-Source": `a ${src} ${seq}`,
    ...extra,
  };
}

async function publishAll(nc: NatsConnection, subject: string, list: readonly Headers[]): Promise<void> {
  // One at a time: the destination must hold them in this order.
  for (const h of list) await publishMany(nc, 1, () => ({ subject, headers: h }), 1);
}

/** verifyCommand as the CLI runs it, with stdout captured; `--json` output is parsed. */
async function verify(
  args: readonly string[],
): Promise<{ code: number; out: string; report: VerifyReport | undefined }> {
  const lines: string[] = [];
  const original = console.log;
  console.log = (...parts: unknown[]) => void lines.push(parts.map(String).join(" "));
  let code: number;
  try {
    code = await verifyCommand(args);
  } finally {
    console.log = original;
  }
  const out = lines.join("\n");
  return { code, out, report: args.includes("--json") ? (JSON.parse(out) as VerifyReport) : undefined };
}

test("since, subject inversion and the hashed id table, without servers", () => {
  const now = Date.parse("2026-11-30T12:00:00Z");
  assert.equal(parseSince("1h", now).toISOString(), "2026-11-30T11:00:00.000Z");
  assert.equal(parseSince("1h30m", now).toISOString(), "2026-11-30T10:30:00.000Z");
  assert.equal(parseSince("2026-11-30T09:00:00.123456789+01:00").toISOString(), "2026-11-30T08:00:00.123Z");
  for (const bad of ["yesterday", "30", "2026-11-30", ""]) {
    assert.throws(
      () => parseSince(bad),
      (err) => isRelayError(err, "USAGE"),
      bad,
    );
  }
  const config = parseConfigText(
    `regions: { a: { servers: ["nats://x:1"] }, b: { servers: ["nats://x:2"] } }
links:
  - { name: l, from: { region: a, stream: S }, to: { region: b, stream: S, subject: { stripPrefix: "orders.", addPrefix: "us.orders." } } }`,
    "t.yaml",
  );
  assert.equal(sourceSubject("us.orders.42.updated", config.links[0]!), "orders.42.updated");

  const table = new HashedKeyTable();
  for (let i = 0; i < 100_000; i++) table.put(`id-${i}`);
  assert.equal(table.size, 100_000);
  assert.equal(table.put("id-99999"), 99_999);
  assert.equal(table.created, false);
  assert.equal(table.get("id-12345"), 12_345);
  assert.equal(table.get("id-100000"), -1);
});

test("a real relay's output agrees (exit 0); a message deleted from the destination is missing (exit 1)", async (t) => {
  const { src, dst, nca, ncb, yaml, config } = await setup(t);
  await publishMany(nca, 300, (i) => ({
    subject: `${src}.o.${i % 3}`,
    headers: { "Nats-Msg-Id": `order-${i}` },
  }));
  await startRelay(t, yaml, "b");
  await check(async () => (await streamCount(ncb, dst)) === 300, { name: "300 relayed", timeoutMs: 30_000 });

  const ok = await verify(["--config", config, "--link", "a-to-b", "--json"]);
  assert.equal(ok.code, 0, ok.out);
  assert.equal(ok.report?.agree, true);
  assert.deepEqual(
    [
      ok.report?.source.examined,
      ok.report?.source.forwardable,
      ok.report?.destination.fromLink,
      ok.report?.destination.lastRelayedSourceSeq,
    ],
    [300, 300, 300, 300],
  );
  assert.equal(ok.report?.backwards, undefined, "no guard.versions on this link");

  const jsm = await jetstreamManager(ncb);
  await jsm.streams.deleteMessage(dst, 120);
  const bad = await verify(["--config", config, "--link", "a-to-b", "--json"]);
  assert.equal(bad.code, 1);
  assert.equal(bad.report?.missing.count, 1);
  assert.deepEqual(bad.report?.missing.examples, [{ id: "order-119", sourceSeq: 120 }]);
  assert.equal(bad.report?.duplicated.count, 0);
});

test("in-flight, loop and other-link messages are not differences; the text report says so", async (t) => {
  const { src, nca, ncb, config } = await setup(t);
  // Source: 10 own messages, and 2 that came from region b (b-to-a would not send them back).
  await publishMany(nca, 10, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } }));
  await publishAll(nca, `${src}.x`, [
    { "Nats-Msg-Id": "from-b-1", "Relay-Origin": "b" },
    { "Nats-Msg-Id": "from-b-2", "Relay-Origin": "b" },
  ]);
  // Destination: the first 7 relayed, plus local traffic (local ids are not this link's business).
  await publishAll(ncb, `${src}.x`, [
    ...Array.from({ length: 7 }, (_, i) => relayed(src, `m-${i}`, i + 1)),
    { "Nats-Msg-Id": "from-b-1" },
    { "Nats-Msg-Id": "from-b-2" },
  ]);
  const r = await verify(["--config", config, "--link", "a-to-b"]);
  assert.equal(r.code, 0, r.out);
  // First seq 1: nothing was removed by retention, and the summary does not say so.
  assert.match(r.out, /source a\/SRC_\w+: 12 examined \(stream first seq 1, last seq 12\)\n/);
  assert.match(r.out, /10 forwarded by this link, 2 not forwarded/);
  assert.match(
    r.out,
    /destination b\/DST_\w+: 9 examined, 7 relayed over this link, last Relay-Source seq 7/,
  );
  assert.match(
    r.out,
    /not yet relayed \(newer than the destination's last Relay-Source seq 7\): 3 \(from source seq 8\)\n {2}m-7\n {2}m-8\n {2}m-9\n/,
  );
  assert.match(r.out, /missing: 0\nduplicated: 0\n/);
  assert.match(r.out, /result: AGREE/);
});

test("an id stored twice in the destination after its duplicate window is reported duplicated", async (t) => {
  const { src, dst, nca, ncb, config } = await setup(t, { dupWindowMs: 1_000 });
  await publishMany(nca, 5, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `m-${i}` } }));
  await publishAll(
    ncb,
    `${src}.x`,
    Array.from({ length: 5 }, (_, i) => relayed(src, `m-${i}`, i + 1)),
  );
  await publishAll(ncb, `${src}.x`, [{ "Nats-Msg-Id": "local-1" }, { "Nats-Msg-Id": "local-1" }]); // deduplicated: one copy
  // Re-publish until the broker stores it again, i.e. until the 1 s window has passed.
  const js = jetstream(ncb);
  const again = async (h: Headers) => {
    const hdrs = createHeaders();
    for (const [k, v] of Object.entries(h)) hdrs.set(k, v);
    return !(await js.publish(`${src}.x`, undefined, { headers: hdrs })).duplicate;
  };
  await check(() => again(relayed(src, "m-3", 4)), {
    name: "m-3 stored a second time",
    timeoutMs: 10_000,
    intervalMs: 200,
  });
  await check(() => again({ "Nats-Msg-Id": "local-1" }), {
    name: "local-1 stored a second time",
    timeoutMs: 10_000,
    intervalMs: 200,
  });
  assert.equal(await streamCount(ncb, dst), 8);

  const r = await verify(["--config", config, "--link", "a-to-b", "--json"]);
  assert.equal(r.code, 1);
  assert.equal(r.report?.duplicated.count, 1, "local-1 did not come over this link and is not in the source");
  assert.equal(r.report?.duplicated.extraCopies, 1);
  assert.deepEqual(r.report?.duplicated.examples, [{ id: "m-3", copies: 2 }]);
  assert.equal(r.report?.missing.count, 0);
});

test("versions 5, 7, 6 of one entity in the destination are reported as going backwards", async (t) => {
  const { src, nca, ncb, config } = await setup(t, { versions: true });
  const v = (entity: string, version: number) => ({ "Entity-Id": entity, "Entity-Version": String(version) });
  const sourceOrder: [string, number][] = [
    ["e1", 5],
    ["e2", 1],
    ["e1", 6],
    ["e2", 2],
    ["e1", 7],
    ["e2", 3],
  ];
  await publishAll(
    nca,
    `${src}.x`,
    sourceOrder.map(([e, n], i) => ({ "Nats-Msg-Id": `m-${i}`, ...v(e, n) })),
  );
  // The destination stored e1's 7 (source seq 5) before its 6 (source seq 3).
  await publishAll(
    ncb,
    `${src}.x`,
    [0, 1, 4, 3, 2, 5].map((i) => relayed(src, `m-${i}`, i + 1, v(sourceOrder[i]![0], sourceOrder[i]![1]))),
  );

  const r = await verify(["--config", config, "--link", "a-to-b", "--json"]);
  assert.equal(r.code, 1, JSON.stringify(r.report));
  assert.deepEqual(r.report?.backwards, {
    count: 1,
    events: 1,
    entitiesChecked: 2,
    examples: [{ entity: "e1", before: 7, after: 6, beforeSeq: 3, afterSeq: 5 }],
  });
  assert.equal(r.report?.missing.count, 0);
  assert.equal(r.report?.duplicated.count, 0);
  const text = await verify(["--config", config, "--link", "a-to-b"]);
  assert.match(
    text.out,
    /versions went backwards: 1 entities \(1 times; 2 entities checked\)\n {2}e1: version 7 \(dest seq 3\) then 6 \(dest seq 5\)/,
  );
});

test("--since leaves out older messages on both sides", async (t) => {
  const { src, dst, nca, ncb, config } = await setup(t);
  await publishMany(nca, 5, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `old-${i}` } }));
  await publishAll(
    ncb,
    `${src}.x`,
    Array.from({ length: 5 }, (_, i) => relayed(src, `old-${i}`, i + 1)),
  );
  await new Promise((r) => setTimeout(r, 20));
  const cut = new Date();
  await new Promise((r) => setTimeout(r, 20));
  await publishMany(nca, 4, (i) => ({ subject: `${src}.x`, headers: { "Nats-Msg-Id": `new-${i}` } }));
  await publishAll(
    ncb,
    `${src}.x`,
    Array.from({ length: 4 }, (_, i) => relayed(src, `new-${i}`, i + 6)),
  );
  await (await jetstreamManager(ncb)).streams.deleteMessage(dst, 2); // old-1

  const recent = await verify([
    "--config",
    config,
    "--link",
    "a-to-b",
    "--since",
    cut.toISOString(),
    "--json",
  ]);
  assert.equal(recent.code, 0, recent.out);
  assert.equal(recent.report?.since, cut.toISOString());
  assert.deepEqual([recent.report?.source.examined, recent.report?.destination.examined], [4, 4]);

  const hour = await verify(["--config", config, "--link", "a-to-b", "--since", "1h", "--json"]);
  assert.equal(hour.code, 1);
  assert.deepEqual(hour.report?.missing.examples, [{ id: "old-1", sourceSeq: 2 }]);
  assert.deepEqual([hour.report?.source.examined, hour.report?.destination.examined], [9, 8]);
});

test("usage errors: unknown link (listing the links), bad --since, no --link", async () => {
  const config = await writeConfig(
    linkYaml({
      regions: { a: ["nats://127.0.0.1:1"], b: ["nats://127.0.0.1:2"] },
      links: [
        { name: "a-to-b", from: "a", fromStream: "S", to: "b", toStream: "S" },
        { name: "b-to-a", from: "b", fromStream: "S", to: "a", toStream: "S" },
      ],
    }),
  );
  await assert.rejects(verifyCommand(["--config", config, "--link", "nope"]), (err) => {
    assert.ok(isRelayError(err, "USAGE"));
    assert.match(err.message, /unknown link "nope" \(links in the config: a-to-b, b-to-a\)/);
    return true;
  });
  await assert.rejects(
    verifyCommand(["--config", config, "--link", "a-to-b", "--since", "last week"]),
    (err) => isRelayError(err, "USAGE"),
  );
  await assert.rejects(
    verifyCommand(["--config", config]),
    (err) => isRelayError(err, "USAGE") && /--link is required/.test(err.message),
  );
  await assert.rejects(verifyCommand(["--config", "/nonexistent.yaml", "--link", "x"]), (err) =>
    isRelayError(err, "CONFIG_INVALID"),
  );
});

test("WireHeaders reads what the client's MsgHdrs reads, and the fast path is in use", async (t) => {
  const nca = await connectTo(t, a.url);
  const name = uniqueName("HDR");
  await createStream(nca, { name, subjects: [`${name}.>`] });
  await publishAll(nca, `${name}.x`, [
    {
      "Nats-Msg-Id": "id-1",
      "Relay-Source": "a S 7",
      "X-Spaced": "  padded value ",
      "x-lower": "lower",
      "Entity-Id": "e:1",
    },
  ]);
  await publishMany(nca, 1, () => ({ subject: `${name}.y` })); // no headers at all (headers_only adds one)
  const seen: { fast: boolean; pairs: [string, string | undefined][] }[] = [];
  await readStream({ nc: nca, region: "a", stream: name }, {}, (m) => {
    const keys = [
      "Nats-Msg-Id",
      "Relay-Source",
      "X-Spaced",
      "x-lower",
      "X-Lower",
      "Entity-Id",
      "Entity",
      "Absent",
      "Nats-Msg-Size",
    ];
    const fast = headersOf(m);
    for (const k of keys) assert.equal(fast?.get(k) ?? "", m.headers?.get(k) ?? "", `${k} of seq ${m.seq}`);
    seen.push({ fast: fastHeadersAvailable(m), pairs: keys.map((k) => [k, fast?.get(k)]) });
  });
  assert.equal(seen.length, 2);
  assert.ok(
    seen.every((s) => s.fast),
    "the raw header block is reachable (nats-core internals unchanged)",
  );
  assert.deepEqual(seen[0]?.pairs.slice(0, 3), [
    ["Nats-Msg-Id", "id-1"],
    ["Relay-Source", "a S 7"],
    ["X-Spaced", "padded value"],
  ]);
});

test("copyPayload: the payload's bytes, with and without headers, in a buffer of its own", async (t) => {
  const nca = await connectTo(t, a.url);
  const name = uniqueName("PAY");
  await createStream(nca, { name, subjects: [`${name}.>`] });
  await publishMany(nca, 2, (i) => ({
    subject: `${name}.x`,
    data: new TextEncoder().encode(`payload ${i} ${"x".repeat(i * 300)}`),
    ...(i === 0 ? { headers: { "Nats-Msg-Id": "p-0", "X-Other": "v" } } : {}),
  }), 1);
  const consumer = await jetstream(nca).consumers.get(name);
  for (const seq of [1, 2]) {
    const m = await consumer.next({ expires: 5_000 });
    assert.ok(m, `message ${seq} read`);
    assert.equal(m.seq, seq);
    assert.equal(m.headers !== undefined, seq === 1, `seq ${seq} ${seq === 1 ? "has" : "has no"} headers`);
    const payload = copyPayload(m);
    assert.equal(Buffer.from(payload).toString(), `payload ${seq - 1} ${"x".repeat((seq - 1) * 300)}`);
    assert.equal(Buffer.from(payload).toString("hex"), Buffer.from(m.data).toString("hex"));
    assert.notEqual(payload.buffer, m.data.buffer, "a copy, not a view of the client's read buffer");
  }
});

test("lastTokenNumber: the number a reply subject ends with, read from the client's bytes as from its string", async (t) => {
  const nca = await connectTo(t, a.url);
  const prefix = uniqueName("inbox");
  const got: { subject: string; n: number; raw: boolean }[] = [];
  const sub = nca.subscribe(`${prefix}.*`, {
    callback: (_err, m) => {
      got.push({ subject: m.subject, n: lastTokenNumber(m), raw: (m as unknown as { _msg?: { subject?: unknown } })._msg?.subject instanceof Uint8Array });
    },
  });
  for (const token of ["0", "12345678901", "x1", "1x"]) nca.publish(`${prefix}.${token}`);
  await nca.flush();
  await check(() => got.length === 4, { name: "four replies", timeoutMs: 5_000 });
  sub.unsubscribe();
  assert.deepEqual(
    got.map((g) => [g.subject.slice(prefix.length + 1), g.n]),
    [["0", 0], ["12345678901", 12345678901], ["x1", Number.NaN], ["1x", Number.NaN]],
  );
  assert.ok(got.every((g) => g.raw), "the raw subject is reachable (nats-core internals unchanged)");
  // Without the client's internals: the same from the subject string.
  const plain = (subject: string) => lastTokenNumber({ subject } as unknown as Parameters<typeof lastTokenNumber>[0]);
  assert.equal(plain(`${prefix}.77`), 77);
  assert.ok(Number.isNaN(plain(`${prefix}.7a`)));
});
