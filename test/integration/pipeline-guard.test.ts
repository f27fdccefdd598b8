import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import { MemoryGuard } from "../../src/guard/memory-guard.js";
import type { ClaimedItem, ClaimResult, Guard, GuardItem } from "../../src/guard/types.js";
import { Pipeline } from "../../src/link/pipeline.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { JetStreamPublisher } from "../../src/nats/publisher.js";
import { SourceAcks } from "../../src/nats/source-acks.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, readStream } from "../helpers/streams.js";

/**
 * The memory guard, except that its first claim call runs and then fails as if its reply were lost
 * (what a Redis command timeout after the script ran looks like to the relay).
 */
class FirstReplyLost implements Guard {
  readonly kind = "memory" as const;
  readonly tokens: (string | undefined)[] = [];
  constructor(private readonly inner: MemoryGuard) {}
  start(): Promise<void> {
    return this.inner.start();
  }
  async claim(items: readonly GuardItem[], token?: string): Promise<ClaimResult[]> {
    this.tokens.push(token);
    const results = await this.inner.claim(items, token);
    if (this.tokens.length === 1) throw new RelayError(ErrorCodes.GUARD_UNAVAILABLE, "claim reply lost (test)");
    return results;
  }
  commit(items: readonly ClaimedItem[]): Promise<void> {
    return this.inner.commit(items);
  }
  release(items: readonly ClaimedItem[]): Promise<void> {
    return this.inner.release(items);
  }
  stop(): Promise<void> {
    return this.inner.stop();
  }
}

/** Records what the pipeline acks and naks; the acks still go out (to subjects nobody listens on). */
class RecordingAcks extends SourceAcks {
  readonly acked: string[] = [];
  readonly naked: string[] = [];
  override ack(reply: string): boolean {
    this.acked.push(reply);
    return super.ack(reply);
  }
  override nak(reply: string, delayMs?: number): boolean {
    this.naked.push(reply);
    return super.nak(reply, delayMs);
  }
}

test("a claim call that ran but failed is retried with its token: the claims are ours, nothing waits for the claim TTL", async (t) => {
  const nats = await withServers(t).startNats();
  const nc = await connectTo(t, nats.url);
  const dst = uniqueName("DST");
  await createStream(nc, { name: dst, subjects: [`${dst}.>`] });
  const config = parseConfigText(
    `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["${nats.url}"] }
links:
  - { name: a-to-b, from: { region: a, stream: SRC }, to: { region: b, stream: ${dst} }, guard: { memory: true }, sourceAcks: each }
`,
    "test",
  );
  const link = config.links[0];
  assert.ok(link);
  const logger = pino({ level: "silent" });
  const guard = new FirstReplyLost(new MemoryGuard({ idTtlMs: 60_000, claimTtlMs: 60_000 }, { logger, scope: `b:${dst}`, linkName: "a-to-b" }));
  const acks = new RecordingAcks(nc);
  const publisher = new JetStreamPublisher(nc, 5_000);
  t.after(() => publisher.close());
  const pipeline = new Pipeline({
    link,
    links: config.links,
    guard,
    acks,
    metrics: createMetrics(undefined, { defaultMetrics: false }),
    logger,
    events: { publishTrouble: () => {}, guardTrouble: () => {}, healthy: () => {}, halt: () => {}, destinationRestarted: () => {} },
    markers: { findStored: () => Promise.resolve(new Map()), storedAt: () => Promise.resolve(undefined), lastSeq: () => Promise.resolve(0) },
    owns: () => true,
  });
  pipeline.setPublisher(publisher);
  pipeline.setDestination({ stream: dst, maxMessageBytes: 1024 * 1024, duplicateWindowMs: 120_000 });
  const delivery = (seq: number): Delivery => ({
    subject: `${dst}.x`,
    reply: `$JS.ACK.SRC.relay-a-to-b.1.${seq}.${seq}.1764460800000000000.0`,
    streamSequence: seq,
    consumerSequence: seq,
    deliveryCount: 1,
    pending: 0,
    timestampNanos: "1764460800000000000",
    headers: new WireHeaders(`NATS/1.0\r\nNats-Msg-Id: m${seq}\r\n\r\n`),
    data: new TextEncoder().encode(`payload-${seq}`),
  });
  for (const seq of [1, 2, 3]) pipeline.push(delivery(seq));

  await check(() => acks.acked.length === 3, { name: "all three acked after the retry", timeoutMs: 10_000 });
  assert.deepEqual(acks.naked, [], "no message was taken for another relay's claim");
  assert.ok(guard.tokens.length >= 2 && guard.tokens[0] !== undefined, `claim calls: ${guard.tokens.length}`);
  assert.equal(guard.tokens[1], guard.tokens[0], "the retry carries the failed call's token");
  const stored = await readStream(nc, dst);
  assert.deepEqual(
    stored.map((m) => m.headers["Nats-Msg-Id"]),
    ["m1", "m2", "m3"],
  );
});
