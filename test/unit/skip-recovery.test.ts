/**
 * The read-back of a jump (link/skip-recovery.ts), against a stream given as the sequences it holds:
 * what is stored in the range is taken in order, each hole is reported gone once, a halt on a gone
 * range stops it, a stream that no longer exists makes the rest gone, and deliveries held meanwhile
 * are handed back in order.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { JetStreamApiError } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import { parseConfigText } from "../../src/config/load.js";
import { SkipRecovery } from "../../src/link/skip-recovery.js";
import type { Delivery } from "../../src/nats/delivery.js";
import { createLogger } from "../../src/observability/logger.js";

const config = parseConfigText(
  ["regions:", "  a: { servers: [nats://127.0.0.1:1] }", "  b: { servers: [nats://127.0.0.1:2] }", "links:", "  - name: a-to-b", "    from: { region: a, stream: SRC }", "    to: { region: b, stream: DST }", ""].join("\n"),
  "test.yaml",
).links[0]!;

/** A source that holds `stored` (or has lost its stream): STREAM.MSG.GET with next_by_subj. */
function source(stored: readonly number[] | "no stream") {
  const asked: number[] = [];
  const jsm = {
    streams: {
      getMessage: async (_stream: string, q: { seq: number }) => {
        asked.push(q.seq);
        if (stored === "no stream") throw new JetStreamApiError({ code: 404, err_code: 10059, description: "stream not found" });
        const seq = stored.find((s) => s >= q.seq);
        return seq === undefined ? null : { seq, subject: `SRC.${seq}`, header: undefined, data: new Uint8Array([seq]), timestamp: "2026-12-07T10:00:00.123456789Z" };
      },
    },
  } as unknown as JetStreamManager;
  return { jsm, asked };
}

function recovery(jsm: JetStreamManager, haltAt?: number) {
  const taken: number[] = [];
  const gone: string[] = [];
  let readBack = 0;
  const r = new SkipRecovery({
    config,
    logger: createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, cb) => cb() }), secrets: [] }),
    signal: new AbortController().signal,
    metrics: { skipsReadBack: { inc: () => readBack++ } } as never,
    jsm: () => jsm,
    owns: () => true,
    room: () => true,
    take: (d) => taken.push(d.streamSequence),
    gone: (from, to) => (gone.push(`${from}-${to}`), haltAt === undefined || from < haltAt),
    fail: (err) => assert.fail(err.message),
  });
  return { r, taken, gone, readBack: () => readBack };
}

describe("SkipRecovery", () => {
  it("takes what the stream still holds in the range, in order, one read each, and reports each hole once", async () => {
    const { jsm, asked } = source([3, 4, 7, 12]);
    const x = recovery(jsm);
    await x.r.readBack(2, 10);
    assert.deepEqual(x.taken, [3, 4, 7]);
    assert.deepEqual(x.gone, ["2-2", "5-6", "8-10"]);
    assert.deepEqual(asked, [2, 4, 5, 8], "a read per message found, and one past the last");
    assert.equal(x.readBack(), 3);
  });

  it("a halt on a gone range stops the read-back there", async () => {
    const x = recovery(source([3, 4, 7]).jsm, 5);
    await x.r.readBack(2, 10);
    assert.deepEqual(x.taken, [3, 4]);
    assert.deepEqual(x.gone, ["2-2", "5-6"]);
  });

  it("a stream that no longer exists: the rest of the range is gone", async () => {
    const x = recovery(source("no stream").jsm);
    await x.r.readBack(2, 10);
    assert.deepEqual(x.taken, []);
    assert.deepEqual(x.gone, ["2-10"]);
  });

  it("deliveries that come while a jump is read back wait, then go on in order after what was read back", async () => {
    const x = recovery(source([5, 9]).jsm);
    const resumed: number[] = [];
    const d = (seq: number) => ({ streamSequence: seq }) as Delivery;
    x.r.hold(4, 9, d(10), (queued) => resumed.push(...queued.map((q) => q.streamSequence)));
    assert.equal(x.r.holding, true);
    x.r.offer(d(11));
    x.r.offer(d(12));
    await x.r.settled();
    assert.equal(x.r.holding, false);
    assert.deepEqual(x.taken, [5, 9]);
    assert.deepEqual(resumed, [10, 11, 12]);
  });
});
