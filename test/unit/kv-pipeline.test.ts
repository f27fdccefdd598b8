import { test } from "node:test";
import assert from "node:assert/strict";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import type { LastOnSubject } from "../../src/link/stages/common.js";
import type { JetStreamPublisher, PubAck } from "../../src/nats/publisher.js";
import { WireHeaders } from "../../src/nats/wire-headers.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { check } from "../helpers/check.js";
import { testPipeline } from "../helpers/test-pipeline.js";

/**
 * A KV link's last-writer-wins step (src/link/stages/kv-apply.ts) on the pipeline, with a scripted
 * bucket: per-key latest messages, and publishes stored only when their
 * `Nats-Expected-Last-Subject-Sequence` is the key's last sequence (else err_code 10071).
 */

const config = parseConfigText(
  `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - name: a-to-b
    from: { region: a, bucket: cfg }
    to: { region: b, bucket: cfg }
    sourceAcks: each
`,
  "unit",
);

interface Stored {
  readonly seq: number;
  readonly version: string;
  readonly value: string;
}

type Callback = (err: RelayError | null, ack: PubAck | null) => void;

/** The scripted bucket `KV_cfg` in region b. `beforeStore`: runs before a publish is judged (a local write can land). */
function scriptedBucket(beforeStore?: (subject: string) => void) {
  const latest = new Map<string, Stored>();
  let seq = 0;
  let reads = 0;
  const refused: string[] = [];
  const header = (block: string, name: string) => new RegExp(`\\r\\n${name}: ([^\\r]*)\\r\\n`).exec(block)?.[1];
  const local = (subject: string, value: string, version: string) => latest.set(subject, { seq: ++seq, version, value });
  const publisher = {
    inFlight: 0,
    publish(subject: string, data: Uint8Array, headers: { encode(): Uint8Array }, cb: Callback) {
      const block = Buffer.from(headers.encode()).toString("latin1");
      setImmediate(() => {
        beforeStore?.(subject);
        const expected = Number(header(block, "Nats-Expected-Last-Subject-Sequence"));
        const last = latest.get(subject)?.seq ?? 0;
        if (expected !== last) {
          refused.push(subject);
          cb(new RelayError(ErrorCodes.ORDER_REJECTED, `wrong last sequence: ${last}`), null);
          return;
        }
        latest.set(subject, { seq: ++seq, version: header(block, "Relay-KV-Version") ?? "?", value: Buffer.from(data).toString() });
        cb(null, { stream: "KV_cfg", seq, duplicate: false });
      });
    },
  } as unknown as JetStreamPublisher;
  const lastOnSubject = (subject: string): Promise<LastOnSubject | undefined> => {
    reads++;
    const m = latest.get(subject);
    if (!m) return Promise.resolve(undefined);
    const [ns] = m.version.split(" ");
    return Promise.resolve({ seq: m.seq, headers: { get: (n: string) => (n === "Relay-KV-Version" ? m.version : "") }, timeNs: BigInt(ns ?? "0") });
  };
  return { publisher, latest, refused, local, lastOnSubject, reads: () => reads };
}

/** A write of `key` stored in region a at `ns`. */
function write(seq: number, key: string, ns: bigint, value: string): Delivery {
  return {
    subject: `$KV.cfg.${key}`,
    reply: `$JS.ACK.KV_cfg.relay-a-to-b.1.${seq}.${seq}.1764460800000000000.0`,
    streamSequence: seq,
    consumerSequence: seq,
    deliveryCount: 1,
    pending: 0,
    timestampNanos: String(ns),
    headers: new WireHeaders("NATS/1.0\r\nX: y\r\n\r\n"),
    data: Buffer.from(value),
  };
}

function newPipeline(bucket: ReturnType<typeof scriptedBucket>) {
  const link = config.links[0];
  assert.ok(link);
  const { pipeline, metrics, acked } = testPipeline(link, { links: config.links, markers: { lastOnSubject: bucket.lastOnSubject } });
  pipeline.setDestination({ stream: "KV_cfg", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
  pipeline.setPublisher(bucket.publisher);
  const conflicts = async (outcome: string) => (await metrics.kvConflicts.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
  return { pipeline, acked, conflicts };
}

test("writes of one key in one window go one after the other, each expecting the last one's sequence; one read", async (t) => {
  const bucket = scriptedBucket();
  const { pipeline, acked } = newPipeline(bucket);
  t.after(() => pipeline.abandon());
  for (let i = 1; i <= 5; i++) pipeline.push(write(i, "k", 1000n + BigInt(i), `v${i}`));
  await check(() => acked.length === 5, { name: "all five acked", timeoutMs: 5_000 });
  assert.equal(bucket.latest.get("$KV.cfg.k")?.value, "v5");
  assert.equal(bucket.latest.get("$KV.cfg.k")?.seq, 5, "each stored once, none refused");
  assert.deepEqual(bucket.refused, []);
  assert.equal(bucket.reads(), 1, "the key was read once; later writes expected what the link stored");
  assert.equal(pipeline.outcomes.relayed, 5);
});

test("an older write is dropped only on a fresh read of the bucket, as a counted conflict", async (t) => {
  const bucket = scriptedBucket();
  bucket.local("$KV.cfg.k", "newer", "5000 b");
  const { pipeline, acked, conflicts } = newPipeline(bucket);
  t.after(() => pipeline.abandon());
  pipeline.push(write(1, "k", 4000n, "older"));
  pipeline.push(write(2, "j", 4000n, "new key"));
  await check(() => acked.length === 2, { name: "both acked", timeoutMs: 5_000 });
  assert.equal(bucket.latest.get("$KV.cfg.k")?.value, "newer");
  assert.equal(bucket.latest.get("$KV.cfg.j")?.value, "new key");
  assert.equal(await conflicts("remote_older"), 1);
  assert.equal(pipeline.outcomes.stale, 1);
  assert.equal(pipeline.corrections.kv_conflict, 1);
});

test("a local write between the read and the publish is never overwritten: the publish is refused and decided again", async (t) => {
  let landed = false;
  const bucket = scriptedBucket((subject) => {
    if (landed) return;
    landed = true;
    bucket.local(subject, "local", "9000 b"); // lands after the relay's read, before its publish is judged
  });
  const { pipeline, acked, conflicts } = newPipeline(bucket);
  t.after(() => pipeline.abandon());
  pipeline.push(write(1, "k", 4000n, "remote"));
  await check(() => acked.length === 1, { name: "acked", timeoutMs: 5_000 });
  assert.equal(bucket.latest.get("$KV.cfg.k")?.value, "local");
  assert.deepEqual(bucket.refused, ["$KV.cfg.k"]);
  assert.equal(await conflicts("local_write_between"), 1);
  assert.equal(await conflicts("remote_older"), 1);
  assert.equal(pipeline.outcomes.relayed, 0);
});

test("a remote write newer than a local write that landed in between is published again, expecting it", async (t) => {
  let landed = false;
  const bucket = scriptedBucket((subject) => {
    if (landed) return;
    landed = true;
    bucket.local(subject, "local", "3000 b");
  });
  const { pipeline, acked } = newPipeline(bucket);
  t.after(() => pipeline.abandon());
  pipeline.push(write(1, "k", 4000n, "remote"));
  await check(() => acked.length === 1, { name: "acked", timeoutMs: 5_000 });
  assert.equal(bucket.latest.get("$KV.cfg.k")?.value, "remote");
  assert.equal(bucket.latest.get("$KV.cfg.k")?.version, "4000 a");
  assert.equal(pipeline.outcomes.relayed, 1);
});
