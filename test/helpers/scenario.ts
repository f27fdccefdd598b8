import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/nats-core";
import { check } from "./check.js";
import { exactlyOnce, publishMany, readStream, streamCount } from "./streams.js";

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
${l.extra ?? ""}`,
    )
    .join("\n");
  return `regions:\n${regions}\nlinks:\n${links}\n${opts.extra ?? ""}\nlog: { level: info }\nshutdown: { grace: 10s }\n`;
}

/** Publishes `count` messages with ids `${prefix}-${i}` on `${subjectPrefix}.<i % 5>`. */
export async function publishIds(nc: NatsConnection, subjectPrefix: string, prefix: string, count: number, from = 0): Promise<string[]> {
  await publishMany(nc, count, (i) => ({ subject: `${subjectPrefix}.${(i + from) % 5}`, headers: { "Nats-Msg-Id": `${prefix}-${i + from}` } }));
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
