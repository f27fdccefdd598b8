import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/nats-core";
import { check, uniqueName } from "./check.js";
import { withServers } from "./servers.js";
import type { HasAfter } from "./servers.js";
import { connectTo, createStream, exactlyOnce, publishMany, readStream, streamCount } from "./streams.js";
import type { NatsNode, ServerBackend } from "./types.js";

/**
 * The group settings `linkYaml` writes when its `extra` has no `group:` section of its own. Every test's
 * servers are new, so each relay start meets a group bucket younger than `group.lease` and takes no
 * lease until the bucket is that old (lease-contender.ts `youngBucket`, relay_lease_holdoffs_total):
 * with the default 5 s lease, 5 s per relay start. A test that is not about leases runs with this shorter
 * one: 3 s, renewed every 500 ms, so an owner still outlives a renewal 2 s late (a busy machine); with
 * 2 s a test process relaying 20,000 messages lost a lease at a load of 12 on 2 cores. A test about
 * leases, their timing or the hold-off, or one that takes the bucket's region away or witnesses "not
 * restarted" by a lease, writes its own `group:` section (`DEFAULT_GROUP`: the defaults).
 */
export const TEST_GROUP = "group: { lease: 3s, renew: 500ms }";

/** The defaults written out (group.lease 5 s, group.renew 1 s), for tests whose reasoning rests on them. */
export const DEFAULT_GROUP = "group: { lease: 5s, renew: 1s }";

export function linkYaml(opts: {
  regions: Record<string, readonly string[]>;
  links: readonly { name: string; from: string; fromStream: string; to: string; toStream: string; extra?: string }[];
  extra?: string;
}): string {
  const regions = Object.entries(opts.regions)
    .map(([name, urls]) => `  ${name}: { servers: [${urls.map((u) => `"${u}"`).join(", ")}] }`)
    .join("\n");
  const links = opts.links
    .map(
      (l) => `  - name: ${l.name}
    from: { region: ${l.from}, stream: ${l.fromStream} }
    to: { region: ${l.to}, stream: ${l.toStream} }
    ackWait: 5s
    publishTimeout: 2s
${/^\s*audit:/m.test(l.extra ?? "") ? "" : "    audit: { after: 2s }\n"}${l.extra ?? ""}`,
    )
    .join("\n");
  // `extra` may bring its own top-level log and group sections.
  const log = /^log:/m.test(opts.extra ?? "") ? "" : "log: { level: info }\n";
  const group = /^group:/m.test(opts.extra ?? "") ? "" : `${TEST_GROUP}\n`;
  return `regions:\n${regions}\nlinks:\n${links}\n${opts.extra ?? ""}\n${log}${group}shutdown: { grace: 10s }\n`;
}

/**
 * Publishes `count` messages with ids `${prefix}-${i}` on `${subjectPrefix}.<i % 5>`. Each carries an
 * entity (`Test-Entity: <prefix>-e<i % 5>`, one per subject and prefix) and a version counting up in
 * publish order (`Test-Version: i`; calls that continue a prefix pass `from`), so the fault checker sees
 * a version going backwards wherever order breaks.
 */
export async function publishIds(nc: NatsConnection, subjectPrefix: string, prefix: string, count: number, from = 0): Promise<string[]> {
  await publishMany(nc, count, (i) => ({
    subject: `${subjectPrefix}.${(i + from) % 5}`,
    headers: { "Nats-Msg-Id": `${prefix}-${i + from}`, "Test-Entity": `${prefix}-e${(i + from) % 5}`, "Test-Version": String(i + from) },
  }));
  return Array.from({ length: count }, (_, i) => `${prefix}-${i + from}`);
}

export async function waitForCount(nc: NatsConnection, stream: string, atLeast: number, timeoutMs: number, what = ""): Promise<void> {
  await check(async () => (await streamCount(nc, stream)) >= atLeast, {
    name: `${stream} holds >= ${atLeast} messages ${what}`.trim(),
    timeoutMs,
    intervalMs: 100,
  });
}

/** Asserts every expected id is in the stream exactly once (and nothing else is). */
export async function assertExactlyOnce(nc: NatsConnection, stream: string, expected: readonly string[]): Promise<void> {
  const stored = await readStream(nc, stream);
  const ids = stored.map((m) => m.headers["Nats-Msg-Id"] ?? "");
  const { missing, duplicated } = exactlyOnce(ids, expected);
  assert.deepEqual({ missing: missing.slice(0, 10), duplicated: duplicated.slice(0, 10) }, { missing: [], duplicated: [] });
  assert.equal(stored.length, expected.length, "no extra messages");
}

/** Asserts the ids appear in the given order (ids present more than once count at first appearance). */
export async function assertInOrder(nc: NatsConnection, stream: string, expected: readonly string[]): Promise<void> {
  const stored = await readStream(nc, stream);
  const ids = stored.map((m) => m.headers["Nats-Msg-Id"] ?? "");
  assert.deepEqual(ids, [...expected]);
}

export interface TwoRegions {
  readonly a: NatsNode;
  readonly b: NatsNode;
  /** Source stream in region a and destination stream in region b, both capturing `${src}.>`. */
  readonly src: string;
  readonly dst: string;
  readonly nca: NatsConnection;
  readonly ncb: NatsConnection;
  readonly servers: ServerBackend;
  /** Config of one link a-to-b between the two streams; `extra` adds indented link keys. */
  yaml(extra?: string, topLevel?: string): string;
}

/** The most common setup: two single-node regions, a source and a destination stream, clients on both. */
export async function twoRegions(
  t: HasAfter,
  opts: {
    srcMaxAgeMs?: number;
    srcDuplicateWindowMs?: number;
    dstDuplicateWindowMs?: number;
    allowRollup?: boolean;
    /** false: the destination stream is not created (the test creates it later). */
    createDestination?: boolean;
  } = {},
): Promise<TwoRegions> {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  const rollup = opts.allowRollup ? { allowRollup: true } : {};
  await createStream(nca, {
    name: src,
    subjects: [`${src}.>`],
    ...rollup,
    ...(opts.srcMaxAgeMs ? { maxAgeMs: opts.srcMaxAgeMs } : {}),
    ...(opts.srcDuplicateWindowMs ? { duplicateWindowMs: opts.srcDuplicateWindowMs } : {}),
  });
  if (opts.createDestination !== false) {
    await createStream(ncb, { name: dst, subjects: [`${src}.>`], ...rollup, ...(opts.dstDuplicateWindowMs ? { duplicateWindowMs: opts.dstDuplicateWindowMs } : {}) });
  }
  const yaml = (extra = "", topLevel = "") =>
    linkYaml({
      regions: { a: [a.url], b: [b.url] },
      links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst, extra }],
      extra: topLevel,
    });
  return { a, b, src, dst, nca, ncb, servers, yaml };
}
