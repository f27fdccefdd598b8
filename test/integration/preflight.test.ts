import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AckPolicy, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";
import { parseConfigText } from "../../src/config/load.js";
import { skipsOnSubjectPurge } from "../../src/nats/purge-skips.js";
import type { LinkConfig } from "../../src/config/types.js";
import {
  checkDuplicateWindow,
  checkLoops,
  checkOverlaps,
  checkSubjectsBound,
  checkWindow,
  replayHorizonMs,
} from "../../src/preflight/checks.js";
import type { StreamFact, StreamFacts } from "../../src/nats/stream-facts.js";
import {
  intersects,
  isCoveredBy,
  isSubsetOf,
  isValidPattern,
  patternMatches,
  transformPattern,
} from "../../src/protocol/subjects.js";
import { uniqueName } from "../helpers/check.js";
import { startDelayProxy } from "../helpers/delay-proxy.js";
import { freePort } from "../helpers/local-process.js";
import { RelayProcess, writeConfig } from "../helpers/relays.js";
import { withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";
import { createStream, publishMany } from "../helpers/streams.js";

// ---------------------------------------------------------------------------------------------
// Pure: subject sets

describe("subjects", () => {
  test("isSubsetOf: * is one token, > one or more trailing tokens", () => {
    const yes: [string, string][] = [
      ["a.b", "a.b"],
      ["a.b", "a.*"],
      ["a.*", "a.*"],
      ["a.*", "a.>"],
      ["a.b.c", "a.>"],
      ["a.>", "a.>"],
      ["a.*.>", "a.>"],
      ["a.>", ">"],
      ["a", ">"],
      ["a.b", "*.*"],
      ["a.*.c", "a.*.*"],
      ["a.*.c", "*.>"],
    ];
    const no: [string, string][] = [
      ["a.>", "a.*"], // a.b.c is in a.> only
      ["a.*", "a.b"], // a.x is in a.* only
      ["a", "a.>"], // > needs at least one more token
      ["a.b", "a.b.c"],
      ["a.b.c", "a.b"],
      ["a.*", "b.*"],
      [">", "a.>"],
      ["a.b", "a.c"],
      ["*", "a"],
      ["a.>", "*.*"],
    ];
    for (const [a, b] of yes) assert.ok(isSubsetOf(a, b), `${a} ⊆ ${b}`);
    for (const [a, b] of no) assert.ok(!isSubsetOf(a, b), `${a} ⊄ ${b}`);
  });

  test("isCoveredBy: one pattern, or a union that splits a trailing >", () => {
    assert.ok(isCoveredBy("orders.eu.1", ["x.>", "orders.*.*"]));
    assert.ok(isCoveredBy("a.>", ["a.*", "a.*.>"]), "a.> = a.* ∪ a.*.>");
    assert.ok(isCoveredBy("a.>", ["a.*", "a.*.*", "a.*.*.>"]));
    assert.ok(!isCoveredBy("a.>", ["a.*", "a.*.*"]), "a.x.y.z is left out");
    assert.ok(!isCoveredBy("a.>", ["a.b.>", "a.c.>"]), "a literal cannot cover a *");
    assert.ok(!isCoveredBy("a.*", ["a.b", "a.c"]));
    assert.ok(!isCoveredBy("a.b", []));
    assert.ok(isCoveredBy(">", [">"]));
    assert.ok(!isCoveredBy(">", ["*"]));
    assert.ok(isCoveredBy(">", ["*", "*.>"]));
  });

  test("intersects and patternMatches", () => {
    assert.ok(intersects("a.*", "*.b"));
    assert.ok(intersects("a.>", "*.b.c"));
    assert.ok(intersects(">", "x"));
    assert.ok(!intersects("a.*", "a.*.*"));
    assert.ok(!intersects("a.>", "a"));
    assert.ok(!intersects("a.b", "a.c"));
    assert.ok(intersects("a.b", "a.b"));
    assert.ok(patternMatches("orders.eu.1", "orders.>"));
    assert.ok(!patternMatches("orders", "orders.>"));
  });

  test("transformPattern follows transformSubject on patterns", () => {
    assert.deepEqual(transformPattern("orders.>", { stripPrefix: "orders.", addPrefix: "us.orders." }), [
      "us.orders.>",
    ]);
    assert.deepEqual(transformPattern("S.>", { addPrefix: "relayed." }), ["relayed.S.>"]);
    assert.deepEqual(transformPattern("S.>", {}), ["S.>"]);
    // Only some subjects of *.created start with "orders.": both outcomes.
    assert.deepEqual(transformPattern("*.created", { stripPrefix: "orders." }), ["*.created", "created"]);
    assert.deepEqual(transformPattern(">", { stripPrefix: "orders.", addPrefix: "eu." }), ["eu.>"]);
    assert.deepEqual(transformPattern("payments.>", { stripPrefix: "orders." }), ["payments.>"]);
    // A transform that leaves nothing is reported, not hidden.
    assert.ok(!isValidPattern(transformPattern("orders", { stripPrefix: "orders" })[0] ?? ""));
    assert.ok(
      !isValidPattern("a..b") && !isValidPattern("a.>.b") && !isValidPattern("a*") && isValidPattern("a.*.>"),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Pure: checks on hand-made facts

function configLinks(linksYaml: string): readonly LinkConfig[] {
  const yaml = `regions:\n  a: { servers: ["nats://127.0.0.1:1"] }\n  b: { servers: ["nats://127.0.0.1:2"] }\n  c: { servers: ["nats://127.0.0.1:3"] }\nlinks:\n${linksYaml}`;
  return parseConfigText(yaml, "test.yaml").links;
}

function found(stream: Partial<StreamFacts> & { name: string; subjects: string[] }): StreamFact {
  return {
    kind: "found",
    stream: {
      retention: "limits",
      duplicateWindowMs: 120_000,
      maxAgeMs: 0,
      messages: 0,
      sourced: false,
      ...stream,
    },
  };
}

describe("checks on facts", () => {
  test("overlaps: same source and overlapping filters is an error; a mesh into one stream is fine", () => {
    const links = configLinks(`
  - { name: a1, from: { region: a, stream: S, filter: "S.x.>" }, to: { region: b, stream: S } }
  - { name: a2, from: { region: a, stream: S }, to: { region: b, stream: S } }
  - { name: c1, from: { region: c, stream: S }, to: { region: b, stream: S } }
  - { name: a3, from: { region: a, stream: S, filter: "S.y.>" }, to: { region: c, stream: S } }
`);
    const src = found({ name: "S", subjects: ["S.>"] });
    const [a1, a2, c1] = links as [LinkConfig, LinkConfig, LinkConfig];
    assert.equal(checkOverlaps(a1, links, () => src).level, "error");
    assert.match(checkOverlaps(a2, links, () => src).detail, /a1 also reads a\/S/);
    const mesh = checkOverlaps(c1, links, () => src);
    assert.equal(mesh.level, "ok", mesh.detail);
    assert.match(mesh.detail, /a1, a2 also write into b\/S/);
  });

  test("overlaps: disjoint source filters merged by their transforms is a warning", () => {
    const links = configLinks(`
  - { name: x, from: { region: a, stream: S, filter: "x.>" }, to: { region: b, stream: S, subject: { stripPrefix: "x." } } }
  - { name: y, from: { region: a, stream: S, filter: "y.>" }, to: { region: b, stream: S, subject: { stripPrefix: "y." } } }
`);
    const r = checkOverlaps(links[0]!, links, () => found({ name: "S", subjects: [">"] }));
    assert.equal(r.level, "warning", r.detail);
  });

  test("loops: a cycle is reported as ok, with its path", () => {
    const links = configLinks(`
  - { name: ab, from: { region: a, stream: S }, to: { region: b, stream: S } }
  - { name: bc, from: { region: b, stream: S }, to: { region: c, stream: S } }
  - { name: ca, from: { region: c, stream: S }, to: { region: a, stream: S } }
`);
    const r = checkLoops(links[0]!, links);
    assert.equal(r.level, "ok");
    assert.match(r.detail, /a → b → c → a: loop prevention stops messages returning to their origin/);
    assert.match(checkLoops(links[0]!, links.slice(0, 2)).detail, /no cycle/);
  });

  test("duplicate window: horizon, guard note, max age", () => {
    const [plain, guarded] = configLinks(`
  - { name: p, from: { region: a, stream: S }, to: { region: b, stream: S }, ackWait: 30s }
  - { name: g, from: { region: a, stream: S }, to: { region: b, stream: S }, ackWait: 90s, maxReplayAge: 10m, guard: { memory: true } }
`) as [LinkConfig, LinkConfig];
    assert.equal(replayHorizonMs(plain), 120_000);
    assert.equal(replayHorizonMs(guarded), 600_000);
    assert.equal(checkDuplicateWindow(plain, found({ name: "S", subjects: ["S.>"] })).level, "ok");
    const small = checkDuplicateWindow(
      guarded,
      found({ name: "S", subjects: ["S.>"], duplicateWindowMs: 300_000 }),
    );
    assert.equal(small.level, "warning");
    assert.match(small.detail, /5m < replay horizon 10m/);
    assert.match(small.detail, /guard covers/);
    const aged = checkDuplicateWindow(
      plain,
      found({ name: "S", subjects: ["S.>"], duplicateWindowMs: 300_000, maxAgeMs: 60_000 }),
    );
    assert.equal(aged.level, "warning");
    assert.match(aged.detail, /> max age 1m/);
    // Shorter than 3 leases: what a paused owner already sent can land after the next owner's copy.
    const window = found({ name: "S", subjects: ["S.>"], duplicateWindowMs: 120_000 });
    assert.equal(checkDuplicateWindow(plain, window, 30_000).level, "ok");
    const leases = checkDuplicateWindow(plain, window, 60_000);
    assert.equal(leases.level, "warning");
    assert.match(leases.detail, /2m < 3 × group\.lease 1m: what an owner paused past its lease/);
    assert.match(leases.fix ?? "", /at least 3m, or shorten group\.lease/);
  });

  test("pull window: where the window starts, the cap it may grow to and what the measured round trip needs; a cap below that across a WAN warns", () => {
    const [plain, guarded, narrow] = configLinks(`
  - { name: p, from: { region: a, stream: S }, to: { region: b, stream: S } }
  - { name: g, from: { region: a, stream: S }, to: { region: b, stream: S }, guard: { memory: true } }
  - { name: n, from: { region: a, stream: S }, to: { region: b, stream: S }, inFlight: 1024 }
`) as [LinkConfig, LinkConfig, LinkConfig];
    const region = (rttMs?: number) => ({ ok: true as const, server: "a-1", maxPayload: 1024 * 1024, ...(rttMs !== undefined ? { rttMs } : {}) });
    const stream = found({ name: "S", subjects: ["S.>"], messages: 1_000, bytes: 1_000 * 1_024 });
    // Defaults: across a WAN it starts at the cap, 16384; 10,000 msgs/s over 300 ms needs 6,000.
    const wan = checkWindow(plain, stream, region(300));
    assert.equal(wan.level, "ok");
    assert.match(wan.detail, /^starts at 16384 messages and sizes itself to the round trip, up to 16384 \(inFlight 16384\); round trip from here 300 ms: 10000 msgs\/s needs ~6000, the cap allows ~54613 msgs\/s$/);
    // A smaller inFlight holds it below that across the WAN: a warning with the value that would do.
    const held = checkWindow(narrow, stream, region(300));
    assert.equal(held.level, "warning");
    assert.match(held.fix ?? "", /links\[n\]\.inFlight: 6000/);
    assert.equal(checkWindow(narrow, stream, region(1)).level, "ok", "on a LAN the window is not what limits the link");
    // Large messages: inFlightBytes over the average size is the cap.
    const large = checkWindow(plain, found({ name: "S", subjects: ["S.>"], messages: 100, bytes: 100 * 256 * 1024 }), region(300));
    assert.equal(large.level, "warning");
    assert.match(large.detail, /up to 500 \(inFlightBytes 32 MiB over messages of ~256 KiB on average\)/);
    assert.match(large.fix ?? "", /links\[p\]\.inFlightBytes: 1500MiB/);
    // A guarded link starts at its cap.
    assert.match(checkWindow(guarded, stream, region(40)).detail, /^starts at 2048 messages/);
    assert.match(checkWindow(plain, stream, region()).detail, /round trip to a not measured/);
    assert.equal(checkWindow(plain, stream, { ok: false, reason: "down" }).level, "skipped");
    assert.equal(checkWindow(plain, { kind: "missing" }, region(40)).level, "skipped");
  });

  test("subjects bound: union coverage and a transform that empties subjects", () => {
    const [link, bad] = configLinks(`
  - { name: t, from: { region: a, stream: S, filter: "orders.>" }, to: { region: b, stream: S, subject: { stripPrefix: "orders.", addPrefix: "us." } } }
  - { name: u, from: { region: a, stream: S, filter: "orders" }, to: { region: b, stream: S, subject: { stripPrefix: "orders" } } }
`) as [LinkConfig, LinkConfig];
    const src = found({ name: "S", subjects: ["orders.>"] });
    assert.equal(
      checkSubjectsBound(link, src, found({ name: "S", subjects: ["us.*", "us.*.>"] })).level,
      "ok",
    );
    const r = checkSubjectsBound(link, src, found({ name: "S", subjects: ["us.*"] }));
    assert.equal(r.level, "error");
    assert.match(r.fix ?? "", /jetstream-relay streams apply --config <your config> --region b \(adds us\.> to S\)/);
    assert.equal(
      checkSubjectsBound(
        bad,
        found({ name: "S", subjects: ["orders"] }),
        found({ name: "S", subjects: [">"] }),
      ).level,
      "error",
    );
  });
});

// ---------------------------------------------------------------------------------------------
// End to end: the CLI against real servers

const conns: NatsConnection[] = [];
// Registered before withServers' hook, so the test's connections close before their servers stop.
after(async () => {
  for (const nc of conns) await nc.close();
});
const servers = withServers({ after });
let a: NatsNode;
let b: NatsNode;
let nca: NatsConnection;
let ncb: NatsConnection;

before(async () => {
  [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  [nca, ncb] = await Promise.all([connect({ servers: a.url }), connect({ servers: b.url })]);
  conns.push(nca, ncb);
  // Every link's default dead-letter subject relay.dlq.<link> is captured in both regions.
  await createStream(nca, { name: "RELAY_DLQ", subjects: ["relay.dlq.>"] });
  await createStream(ncb, { name: "RELAY_DLQ", subjects: ["relay.dlq.>"] });
});

interface Row {
  readonly name: string;
  readonly level: string;
  readonly detail: string;
  fix?: string;
}

/** The rows of `link`'s table in the CLI output. */
function rowsOf(out: string, link: string): Row[] {
  const lines = out.split("\n");
  const start = lines.findIndex((l) => l.startsWith(`link ${link}: `));
  assert.ok(start >= 0, `a table for link ${link} in:\n${out}`);
  const rows: Row[] = [];
  for (const line of lines.slice(start + 2)) {
    if (line.trim() === "") break;
    const fix = /^\s+fix: (.*)$/.exec(line);
    if (fix) {
      const last = rows[rows.length - 1];
      if (last) last.fix = fix[1];
      continue;
    }
    const m = /^ {2}(\S.*?)\s{2,}(ok|warning|error|skipped)(?:\s{2,}(.*))?$/.exec(line);
    assert.ok(m, `a table row: ${JSON.stringify(line)}`);
    rows.push({ name: m[1] ?? "", level: m[2] ?? "", detail: m[3] ?? "" });
  }
  return rows;
}

function row(out: string, link: string, check: string): Row {
  const r = rowsOf(out, link).find((x) => x.name === check);
  assert.ok(r, `row "${check}" for link ${link} in:\n${out}`);
  return r;
}

async function check(yaml: string, ...args: string[]) {
  const path = await writeConfig(yaml);
  const started = Date.now();
  const p = new RelayProcess(["check", "--config", path, "--live", ...args]);
  const code = await p.exited;
  return { code, out: p.stdout.join(""), err: p.stderr.join(""), ms: Date.now() - started };
}

function regions(extra = ""): string {
  return `regions:\n  a: { servers: ["${a.url}"] }\n  b: { servers: ["${b.url}"] }\n${extra}`;
}

/** One link a → b, stream `stream` on both sides, with `more` YAML lines under the link. */
function oneLink(stream: string, more = "", to = stream): string {
  return `${regions()}links:\n  - name: a-to-b\n    from: { region: a, stream: ${stream} }\n    to: { region: b, stream: ${to} }\n${more}`;
}

async function streams(name: string, opts: { dest?: boolean; destWindowMs?: number } = {}): Promise<void> {
  await createStream(nca, { name, subjects: [`${name}.>`] });
  if (opts.dest !== false)
    await createStream(ncb, {
      name,
      subjects: [`${name}.>`],
      ...(opts.destWindowMs ? { duplicateWindowMs: opts.destWindowMs } : {}),
    });
}

describe("check --live", () => {
  test("a healthy two-region config: exit 0, every row ok", async () => {
    const s = uniqueName("HEALTHY");
    await streams(s);
    const redis = await servers.startRedis({ appendonly: true });
    // b → a relays the same stream back; its durable already exists with a backlog.
    const jsm = await jetstreamManager(ncb);
    await jsm.consumers.add(s, { durable_name: "relay-b-to-a", ack_policy: AckPolicy.Explicit });
    await publishMany(ncb, 3, (i) => ({ subject: `${s}.${i}` }));
    const yaml = `${regions()}links:
  - name: a-to-b
    from: { region: a, stream: ${s} }
    to: { region: b, stream: ${s} }
  - name: b-to-a
    from: { region: b, stream: ${s} }
    to: { region: a, stream: ${s} }
    guard: { redis: { url: "${redis.url}" } }
`;
    const r = await check(yaml);
    assert.equal(r.code, 0, r.out + r.err);
    for (const link of ["a-to-b", "b-to-a"]) {
      const rows = rowsOf(r.out, link);
      assert.equal(rows.length, link === "b-to-a" ? 16 : 14, `checks for ${link}`);
      for (const x of rows) assert.equal(x.level, "ok", `${link} / ${x.name}: ${x.detail}`);
    }
    assert.match(
      row(r.out, "a-to-b", "loops").detail,
      /loop prevention stops messages returning to their origin/,
    );
    assert.match(row(r.out, "a-to-b", "guard").detail, /broker dedup only/);
    assert.match(row(r.out, "b-to-a", "guard").detail, /AOF on/);
    assert.match(row(r.out, "b-to-a", "guard").detail, /\(Redis \d+\.\d+\.\d+\)/, "the guard row names the Redis version it checked");
    assert.match(row(r.out, "b-to-a", "durable consumer").detail, /3 pending/);
    // The source region row names the server's version, and what a subject purge does before 2.10.11.
    const version = nca.info?.version ?? "";
    const source = row(r.out, "a-to-b", "source region").detail;
    assert.ok(source.includes(`(nats-server ${version})`), source);
    assert.equal(/jumps consumers over other subjects' stored messages/.test(source), skipsOnSubjectPurge(version), source);
    assert.ok(!row(r.out, "a-to-b", "destination region").detail.includes("jumps consumers"), "the purge note is the source's alone");
    // On loopback the window is not what limits a link: ok, with the round trip it was measured over.
    // Loopback starts at two batches (1000); a loaded machine may time its round trip at 10 ms or more (a WAN).
    assert.match(row(r.out, "a-to-b", "pull window").detail, /^starts at (1000|16384) messages and sizes itself to the round trip, up to 16384 \(inFlight 16384\); round trip from here \d+ ms: 10000 msgs\/s needs ~\d+, the cap allows ~\d+ msgs\/s$/);
    assert.match(row(r.out, "a-to-b", "durable consumer").detail, /does not exist yet/);
    // The offline lines are still there.
    assert.match(r.out, /region b: .* runs 1 link/);
    assert.match(r.out, /live check: 2 links, 0 errors, 0 warnings/);
  });

  test("a link read across a WAN with a window cap below what the round trip needs: the pull window row warns with the round trip measured through it", async () => {
    const s = uniqueName("WAN");
    await streams(s);
    const wan = await startDelayProxy({ port: Number(new URL(a.url).port), oneWayMs: 25 });
    try {
      const yaml = `regions:\n  a: { servers: ["nats://127.0.0.1:${wan.port}"] }\n  b: { servers: ["${b.url}"] }\nlinks:\n  - name: a-to-b\n    from: { region: a, stream: ${s} }\n    to: { region: b, stream: ${s} }\n    inFlight: 600\n`;
      const r = await check(yaml);
      assert.equal(r.code, 0, `a warning alone does not fail the check: ${r.out}${r.err}`);
      const w = row(r.out, "a-to-b", "pull window");
      assert.equal(w.level, "warning", w.detail);
      const m = /round trip from here (\d+) ms: 10000 msgs\/s needs ~(\d+), the cap allows ~(\d+) msgs\/s$/.exec(w.detail);
      assert.ok(m, w.detail);
      assert.ok(Number(m[1]) >= 50, `the round trip goes through the 50 ms proxy: ${m[1]} ms`);
      assert.equal(Number(m[3]), Math.round(600_000 / Number(m[1])));
      assert.match(w.fix ?? "", new RegExp(`links\\[a-to-b\\]\\.inFlight: ${m[2]}`));
      assert.equal((await check(yaml, "--strict")).code, 1, "--strict fails on the warning");
    } finally {
      await wan.close();
    }
  });

  test("a partitioned link: a durable row per partition; a subject without a partition number below count is an error", async () => {
    const s = uniqueName("PART");
    await streams(s);
    await publishMany(nca, 8, (i) => ({ subject: `${s}.${i % 4}.k${i}` }));
    const yaml = `${regions()}links:
  - name: a-to-b
    from: { region: a, stream: ${s}, filter: "${s}.*.>" }
    to: { region: b, stream: ${s} }
    partitions: { count: 4, token: 2 }
`;
    const good = await check(yaml);
    assert.equal(good.code, 0, good.out + good.err);
    assert.equal(row(good.out, "a-to-b", "partitions").level, "ok");
    assert.match(row(good.out, "a-to-b", "partitions").detail, /4 partitions at token 2 .* \(p0: 2, p1: 2, p2: 2, p3: 2\)/);
    const durables = rowsOf(good.out, "a-to-b").filter((x) => x.name === "durable consumer").map((x) => x.detail);
    assert.equal(durables.length, 4);
    for (let p = 0; p < 4; p++) assert.ok(durables.some((d) => d.includes(`relay-a-to-b-p${p} on`)), `partition ${p}: ${durables.join(" | ")}`);

    await publishMany(nca, 3, (i) => ({ subject: `${s}.${i === 0 ? "7" : "x"}.stray${i}` }));
    const bad = await check(yaml);
    assert.equal(bad.code, 2, bad.out + bad.err);
    const r = row(bad.out, "a-to-b", "partitions");
    assert.equal(r.level, "error");
    assert.match(r.detail, /3 messages on 3 subjects .* have no partition number below 4 at token 2/);
  });

  test("missing destination stream: error with the streams apply fix, exit 2", async () => {
    const s = uniqueName("NODEST");
    await streams(s, { dest: false });
    const r = await check(oneLink(s));
    assert.equal(r.code, 2, r.out + r.err);
    const dest = row(r.out, "a-to-b", "destination stream");
    assert.equal(dest.level, "error");
    assert.match(dest.detail, /does not exist/);
    assert.match(
      dest.fix ?? "",
      new RegExp(`jetstream-relay streams apply --config <your config> --region b \\(creates ${s} with subjects ${s}\\.>, file storage, limits retention, duplicate window 2m\\)`),
    );
    assert.equal(row(r.out, "a-to-b", "destination retention").level, "skipped");
    assert.equal(row(r.out, "a-to-b", "source stream").level, "ok");
  });

  test("interest retention destination: error, exit 2", async () => {
    const s = uniqueName("INTEREST");
    await createStream(nca, { name: s, subjects: [`${s}.>`] });
    await (
      await jetstreamManager(ncb)
    ).streams.add({
      name: s,
      subjects: [`${s}.>`],
      retention: RetentionPolicy.Interest,
      storage: StorageType.File,
    });
    const r = await check(oneLink(s));
    assert.equal(r.code, 2, r.out + r.err);
    const ret = row(r.out, "a-to-b", "destination retention");
    assert.equal(ret.level, "error");
    assert.match(ret.detail, /interest\/work-queue destinations can ack a message they dropped/);
    assert.match(ret.fix ?? "", /jetstream-relay streams apply --config <your config> --region b --force changes interest → limits/);
  });

  test("to.order strict: ok for the destination's only writer; an error naming the subjects beyond the link's otherwise", async () => {
    const s = uniqueName("STRICT");
    await streams(s);
    const yaml = oneLink(s).replace(`to: { region: b, stream: ${s} }`, `to: { region: b, stream: ${s}, order: strict }`);
    assert.ok(yaml.includes("order: strict"), yaml);
    const good = await check(yaml);
    assert.equal(good.code, 0, good.out + good.err);
    assert.match(row(good.out, "a-to-b", "strict order").detail, /only writer/);
    const jsm = await jetstreamManager(ncb);
    const info = await jsm.streams.info(s);
    await jsm.streams.update(s, { ...info.config, subjects: [`${s}.>`, `${s}-other.>`] });
    const bad = await check(yaml);
    assert.equal(bad.code, 2, bad.out + bad.err);
    const order = row(bad.out, "a-to-b", "strict order");
    assert.equal(order.level, "error");
    assert.match(order.detail, new RegExp(`binds ${s}-other\\.> beyond the link's subjects`));
    assert.match(order.fix ?? "", /destination stream of its own/);
  });

  test("duplicate window 10s with ackWait 30s: warning, exit 0; exit 1 with --strict", async () => {
    const s = uniqueName("WINDOW");
    await streams(s, { destWindowMs: 10_000 });
    const yaml = oneLink(s, "    ackWait: 30s\n");
    const r = await check(yaml);
    assert.equal(r.code, 0, r.out + r.err);
    const w = row(r.out, "a-to-b", "duplicate window");
    assert.equal(w.level, "warning");
    assert.match(w.detail, /10s < replay horizon 2m/);
    assert.match(w.fix ?? "", new RegExp(`jetstream-relay streams apply --config <your config> --region b \\(raises ${s}'s duplicate window to 2m\\)`));
    const others = rowsOf(r.out, "a-to-b").filter((x) => x.name !== "duplicate window");
    for (const x of others) assert.equal(x.level, "ok", `${x.name}: ${x.detail}`);
    const strict = await check(yaml, "--strict");
    assert.equal(strict.code, 1, strict.out + strict.err);
  });

  test("subjects not bound after a transform: error, exit 2", async () => {
    const s = uniqueName("UNBOUND");
    await streams(s);
    const r = await check(oneLink(s, "", `${s}, subject: { addPrefix: "relayed." }`));
    assert.equal(r.code, 2, r.out + r.err);
    const bound = row(r.out, "a-to-b", "subjects bound");
    assert.equal(bound.level, "error");
    assert.match(bound.detail, new RegExp(`relayed\\.${s}\\.> not bound to b/${s}`));
    assert.match(bound.detail, /publishes would get no responders/);
    assert.match(
      bound.fix ?? "",
      new RegExp(`jetstream-relay streams apply --config <your config> --region b \\(adds relayed\\.${s}\\.> to ${s}\\)`),
    );
  });

  test("two links from the same source into the same destination, overlapping subjects: error, exit 2", async () => {
    const s = uniqueName("OVERLAP");
    await streams(s);
    const yaml = `${regions()}links:
  - { name: all, from: { region: a, stream: ${s} }, to: { region: b, stream: ${s} } }
  - { name: some, from: { region: a, stream: ${s}, filter: "${s}.x.>" }, to: { region: b, stream: ${s} } }
`;
    const r = await check(yaml);
    assert.equal(r.code, 2, r.out + r.err);
    for (const [link, other] of [
      ["all", "some"],
      ["some", "all"],
    ] as const) {
      const o = row(r.out, link, "overlapping links");
      assert.equal(o.level, "error");
      assert.match(o.detail, new RegExp(`${other} also reads a/${s} .* relayed twice`));
    }
  });

  test("Redis guard with appendonly no: warning, exit 0; exit 1 with --strict", async () => {
    const s = uniqueName("NOAOF");
    await streams(s);
    const redis = await servers.startRedis({ appendonly: false, password: "redis-s3cret-pw" });
    const yaml = oneLink(s, `    guard: { redis: { url: "${redis.url}" } }\n`);
    const r = await check(yaml);
    assert.equal(r.code, 0, r.out + r.err);
    const g = row(r.out, "a-to-b", "guard");
    assert.equal(g.level, "warning");
    assert.match(g.detail, /versions would not survive a Redis restart/);
    assert.match(g.fix ?? "", /appendonly yes/);
    assert.ok(!(r.out + r.err).includes("redis-s3cret-pw"), "no password in the output");
    const strict = await check(yaml, "--strict");
    assert.equal(strict.code, 1, strict.out + strict.err);
  });

  test("an unreachable region: error rows, exit 2, fast, no secret printed", async () => {
    const s = uniqueName("UNREACH");
    await createStream(ncb, { name: s, subjects: [`${s}.>`] });
    const port = await freePort(); // free a moment ago: nothing listens there
    const yaml = `regions:
  a: { servers: ["nats://relay:nats-s3cret-pw@127.0.0.1:${port}"] }
  b: { servers: ["${b.url}"] }
links:
  - { name: a-to-b, from: { region: a, stream: ${s} }, to: { region: b, stream: ${s} } }
`;
    const r = await check(yaml);
    assert.equal(r.code, 2, r.out + r.err);
    assert.ok(r.ms < 15_000, `done in ${r.ms} ms`);
    const region = row(r.out, "a-to-b", "source region");
    assert.equal(region.level, "error");
    assert.match(region.detail, new RegExp(`not reachable: region a \\(nats://127\\.0\\.0\\.1:${port}\\)`));
    assert.equal(row(r.out, "a-to-b", "source stream").level, "skipped");
    assert.equal(row(r.out, "a-to-b", "destination stream").level, "ok");
    assert.ok(!(r.out + r.err).includes("nats-s3cret-pw"), "no password in the output");
  });

  test("--region limits the links; an unknown region is a usage error", async () => {
    const s = uniqueName("REGION");
    await streams(s);
    const yaml = `${regions()}links:
  - { name: a-to-b, from: { region: a, stream: ${s} }, to: { region: b, stream: ${s} } }
  - { name: b-to-a, from: { region: b, stream: NOPE }, to: { region: a, stream: NOPE } }
`;
    const r = await check(yaml, "--region", "b");
    assert.equal(r.code, 0, r.out + r.err);
    assert.ok(!r.out.includes("link b-to-a:"), "only links into b");
    assert.match(r.out, /live check: 1 link, 0 errors/);
    const bad = await check(yaml, "--region", "zz");
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--region zz is not a region of the config \(known: a, b\)/);
  });
});
