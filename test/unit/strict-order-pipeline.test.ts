/**
 * `to.order: strict` on the pipeline (src/link/stages/strict-order.ts), against a scripted destination
 * that does what nats-server does with a publish: a `Nats-Msg-Id` it has is answered as a duplicate
 * first, then `Nats-Expected-Last-Sequence` is checked against its last sequence (10071 when it
 * differs). One publish of a window is lost while the later ones reach the server; in the second case
 * the lost publish is not lost but late: it reaches the server after the relay timed it out.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import type { Delivery } from "../../src/nats/delivery.js";
import type { JetStreamPublisher, PubAck } from "../../src/nats/publisher.js";
import { check } from "../helpers/check.js";
import { testDelivery } from "../helpers/deliveries.js";
import { testPipeline } from "../helpers/test-pipeline.js";

const config = parseConfigText(
  `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - name: a-to-b
    from: { region: a, stream: S }
    to: { region: b, stream: S, order: strict }
    sourceAcks: each
`,
  "unit",
);

type Callback = (err: RelayError | null, ack: PubAck | null) => void;

const decoder = new TextDecoder();
function headerOf(headers: { encode(): Uint8Array }, key: string): string | undefined {
  for (const line of decoder.decode(headers.encode()).split("\r\n")) {
    const i = line.indexOf(":");
    if (i > 0 && line.slice(0, i).toLowerCase() === key.toLowerCase()) return line.slice(i + 1).trim();
  }
  return undefined;
}

/** A stream as the server keeps it: ids in store order, dedup, the expected-last-sequence check. */
class Stream {
  readonly ids: string[] = [];
  private readonly seqOf = new Map<string, number>();
  readonly refusals: number[] = [];

  apply(id: string, expected: string | undefined): { ack?: PubAck; err?: RelayError } {
    const dup = this.seqOf.get(id);
    if (dup !== undefined) return { ack: { stream: "S", seq: dup, duplicate: true } };
    if (expected !== undefined && Number(expected) !== this.ids.length) {
      this.refusals.push(Number(expected));
      return { err: new RelayError(ErrorCodes.ORDER_REJECTED, `destination rejected S.x: wrong last sequence: ${this.ids.length} (code 400, err_code 10071)`) };
    }
    this.ids.push(id);
    this.seqOf.set(id, this.ids.length);
    return { ack: { stream: "S", seq: this.ids.length, duplicate: false } };
  }
}

/** Every publish reaches `stream`, except the first attempt of `lost`: timed out, and with `late` stored after that. */
function destination(stream: Stream, lost: string, late: boolean, before?: (stream: Stream) => void) {
  const seen = new Set<string>();
  const publisher = {
    inFlight: 0,
    publish(_subject: string, _data: Uint8Array, headers: { encode(): Uint8Array }, cb: Callback) {
      const id = headerOf(headers, "Nats-Msg-Id") ?? "?";
      const expected = headerOf(headers, "Nats-Expected-Last-Sequence");
      assert.ok(expected !== undefined, `${id} carries Nats-Expected-Last-Sequence`);
      if (id === lost && !seen.has(id)) {
        seen.add(id);
        setTimeout(() => {
          cb(new RelayError(ErrorCodes.PUBLISH_TIMEOUT, "no PubAck (test)"), null);
          if (late) setTimeout(() => stream.apply(id, expected), 1);
        }, 30);
        return;
      }
      seen.add(id);
      setImmediate(() => {
        before?.(stream);
        const { ack, err } = stream.apply(id, expected);
        cb(err ?? null, ack ?? null);
      });
    },
  } as unknown as JetStreamPublisher;
  return publisher;
}

const delivery = (seq: number): Delivery => testDelivery(seq);

async function run(late: boolean, opts: { owns?: () => boolean; logger?: pino.Logger; before?: (stream: Stream) => void; count?: number } = {}) {
  const link = config.links[0];
  assert.ok(link);
  const stream = new Stream();
  const { pipeline, metrics, acked } = testPipeline(link, {
    links: config.links,
    ...(opts.logger ? { logger: opts.logger } : {}),
    ...(opts.owns ? { owns: opts.owns } : {}),
    markers: {
      findStored: (from, wanted) => {
        const found = new Map<number, number>();
        stream.ids.forEach((id, i) => {
          const seq = Number(id.slice(1));
          if (i + 1 >= from && wanted.has(seq)) found.set(seq, i + 1);
        });
        return Promise.resolve(found);
      },
      lastSeq: () => Promise.resolve(stream.ids.length),
    },
  });
  pipeline.setDestination({ stream: "S", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
  pipeline.setPublisher(destination(stream, "m4", late, opts.before));
  const count = opts.count ?? 20;
  for (let seq = 1; seq <= count; seq++) pipeline.push(delivery(seq));
  if (opts.owns) return { stream, rejections: 0, expected: [] };
  await check(() => acked.length === count, { name: `${count} acked`, timeoutMs: 10_000 });
  const rejections = (await metrics.orderRejections.get()).values[0]?.value ?? 0;
  return { stream, rejections, expected: Array.from({ length: count }, (_, i) => `m${i + 1}`) };
}

test("strict order: a publish lost while later ones reach the server: refused behind it, resumed from the destination, each once in order", async () => {
  const { stream, rejections, expected } = await run(false);
  assert.deepEqual(stream.ids, expected);
  assert.equal(rejections, 16, "every publish behind the lost one was refused");
});

test("strict order: the lost publish is late, stored after it timed out: found by its marker or answered as a duplicate, never stored twice or out of order", async () => {
  const { stream, rejections, expected } = await run(true);
  assert.deepEqual(stream.ids, expected);
  assert.ok(rejections >= 16, `${rejections}`);
});

test("strict order: an ex-owner's publishes, after another owner moved the stream on, are refused by the server and it says it was fenced", async () => {
  const lines: string[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => lines.push(line) });
  let owns = true;
  let moved = false;
  await run(false, {
    count: 3,
    logger,
    owns: () => owns,
    // The lease lapses with the window on its way, and the new owner stores a message first.
    before: (stream) => {
      if (moved) return;
      moved = true;
      owns = false;
      stream.apply("new-owner-1", undefined);
    },
  });
  await check(() => lines.some((l) => l.includes("fenced by the server")), { name: "the fenced line", timeoutMs: 5_000 });
  const fenced = JSON.parse(lines.find((l) => l.includes("fenced by the server")) ?? "{}") as Record<string, unknown>;
  assert.equal(fenced["expectedLastSeq"], 0);
  assert.equal(fenced["destinationLastSeq"], 1);
});
