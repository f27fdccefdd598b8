import { test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { parseConfigText } from "../../src/config/load.js";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import { MemoryGuard } from "../../src/guard/memory-guard.js";
import type { ClaimedItem } from "../../src/guard/types.js";
import type { Delivery } from "../../src/nats/delivery.js";
import type { JetStreamPublisher, PubAck } from "../../src/nats/publisher.js";
import { check } from "../helpers/check.js";
import { testDelivery } from "../helpers/deliveries.js";
import { testPipeline } from "../helpers/test-pipeline.js";

/**
 * The retry judge (src/link/stages/retry-judge.ts) on the pipeline, with a scripted destination: the
 * first attempt of one message fails only after the message behind it was stored — the destination
 * leader dying under a window — so its retry would land after it.
 */

const config = parseConfigText(
  `
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
links:
  - name: a-to-b
    from: { region: a, stream: S }
    to: { region: b, stream: S }
    sourceAcks: each
    guard: { memory: true, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }
`,
  "unit",
);

/** The memory guard; `holdCommits`: commits never finish (a message stays PubAcked and uncommitted). */
class SlowCommits extends MemoryGuard {
  constructor(private readonly holdCommits: boolean) {
    super(
      { idTtlMs: 60_000, claimTtlMs: 60_000 },
      { logger: pino({ level: "silent" }), scope: "b:S", linkName: "a-to-b" },
    );
  }
  override commit(items: readonly ClaimedItem[]): Promise<void> {
    return this.holdCommits ? new Promise<void>(() => {}) : super.commit(items);
  }
}

type Callback = (err: RelayError | null, ack: PubAck | null) => void;

/**
 * Stores every publish, except that the first attempt of `failing` fails once `after` has been stored;
 * `onHeld` runs when that first attempt arrives.
 */
function scriptedDestination(failing: string, after: string, onHeld?: () => void) {
  const published: string[] = [];
  const stored: string[] = [];
  let held: Callback | undefined;
  let seq = 0;
  const publisher = {
    inFlight: 0,
    publish(
      _subject: string,
      _data: Uint8Array,
      headers: { get(k: string): string | undefined },
      cb: Callback,
    ) {
      const id = headers.get("Nats-Msg-Id") ?? "?";
      const first = !published.includes(id);
      published.push(id);
      if (id === failing && first) {
        held = cb;
        onHeld?.();
        return;
      }
      setImmediate(() => {
        stored.push(id);
        cb(null, { stream: "S", seq: ++seq, duplicate: false } as PubAck);
        if (id === after && held) {
          const fail = held;
          held = undefined;
          setImmediate(() => fail(new RelayError(ErrorCodes.PUBLISH_FAILED, "no responders (test)"), null));
        }
      });
    },
  } as unknown as JetStreamPublisher;
  return { publisher, published, stored };
}

const delivery = (seq: number, entity: string, version: number): Delivery =>
  testDelivery(seq, { headers: { "Entity-Id": entity, "Entity-Version": String(version) } });

function newPipeline(guard: MemoryGuard) {
  const link = config.links[0];
  assert.ok(link);
  const { pipeline, metrics, acked } = testPipeline(link, { links: config.links, guard });
  pipeline.setDestination({ stream: "S", maxMessageBytes: 1 << 20, duplicateWindowMs: 120_000 });
  const staleRetries = async () => (await metrics.staleRetries.get()).values[0]?.value ?? 0;
  return { pipeline, acked, metrics, staleRetries };
}

test("a retry whose entity's newer version this link sent (stored, not committed yet) is stale, never published again", async (t) => {
  const { pipeline, acked, staleRetries } = newPipeline(new SlowCommits(true));
  t.after(() => pipeline.abandon());
  const dest = scriptedDestination("m1", "m2");
  pipeline.setPublisher(dest.publisher);
  pipeline.push(delivery(1, "e", 1));
  pipeline.push(delivery(2, "e", 2));
  await check(() => acked.includes(delivery(1, "e", 1).reply), {
    name: "m1 acked as stale",
    timeoutMs: 5_000,
  });
  assert.deepEqual(dest.stored, ["m2"], "e v1 is never stored after e v2");
  assert.deepEqual(dest.published, ["m1", "m2"], "m1 not published again");
  assert.equal(pipeline.corrections.stale_version, 1);
  assert.equal(pipeline.outcomes.stale, 1);
  assert.equal(await staleRetries(), 1);
});

test("a retry whose entity's newer version was committed in the guard meanwhile is stale", async (t) => {
  const guard = new SlowCommits(false);
  const { pipeline, acked, staleRetries } = newPipeline(guard);
  t.after(() => pipeline.abandon());
  // Another writer of the same destination commits e v9 after m1 was claimed, before its first attempt fails.
  const dest = scriptedDestination("m1", "m2", () => {
    void guard.commit([{ id: "other-9", entity: "e", version: 9, token: "other" }]);
  });
  pipeline.setPublisher(dest.publisher);
  pipeline.push(delivery(1, "e", 1));
  pipeline.push(delivery(2, "f", 1));
  await check(() => acked.length === 2, { name: "both finished", timeoutMs: 5_000 });
  assert.deepEqual(dest.stored, ["m2"]);
  assert.equal(pipeline.outcomes.stale, 1);
  assert.equal(await staleRetries(), 1);
});

test("a retry with no newer version of its entity anywhere is published again, after what overtook it", async (t) => {
  const { pipeline, acked, staleRetries } = newPipeline(new SlowCommits(false));
  t.after(() => pipeline.abandon());
  const dest = scriptedDestination("m1", "m2");
  pipeline.setPublisher(dest.publisher);
  pipeline.push(delivery(1, "e", 1));
  pipeline.push(delivery(2, "f", 1));
  await check(() => acked.length === 2, { name: "both relayed", timeoutMs: 5_000 });
  assert.deepEqual(
    dest.stored,
    ["m2", "m1"],
    "the reorder the relay cannot prevent, but no entity goes back",
  );
  assert.equal(pipeline.outcomes.relayed, 2);
  assert.equal(pipeline.outcomes.stale, 0);
  assert.equal(await staleRetries(), 0);
  assert.equal(pipeline.size, 0);
});

test("publishes the server refused (a full destination) stored nothing: the retry of the older version is not stale", async (t) => {
  const { pipeline, acked, staleRetries } = newPipeline(new SlowCommits(false));
  t.after(() => pipeline.abandon());
  const published: string[] = [];
  const stored: string[] = [];
  let seq = 0;
  const refused = new Set<string>();
  pipeline.setPublisher({
    inFlight: 0,
    publish(
      _subject: string,
      _data: Uint8Array,
      headers: { get(k: string): string | undefined },
      cb: Callback,
    ) {
      const id = headers.get("Nats-Msg-Id") ?? "?";
      published.push(id);
      const full = !refused.has(id);
      refused.add(id);
      setImmediate(() => {
        if (full) cb(new RelayError(ErrorCodes.DESTINATION_FULL, "maximum messages exceeded (test)"), null);
        else {
          stored.push(id);
          cb(null, { stream: "S", seq: ++seq, duplicate: false } as PubAck);
        }
      });
    },
  } as unknown as JetStreamPublisher);
  pipeline.push(delivery(1, "e", 1));
  pipeline.push(delivery(2, "e", 2));
  await check(() => acked.length === 2, { name: "both relayed once there is room", timeoutMs: 5_000 });
  assert.deepEqual(stored, ["m1", "m2"]);
  assert.equal(pipeline.outcomes.stale, 0);
  assert.equal(await staleRetries(), 0);
});

test("a retry waits for the answer to a newer version's publish still on its way: stored, the retry is stale", async (t) => {
  const { pipeline, acked, staleRetries } = newPipeline(new SlowCommits(false));
  t.after(() => pipeline.abandon());
  const stored: string[] = [];
  let seq = 0;
  const seen = new Set<string>();
  pipeline.setPublisher({
    inFlight: 0,
    publish(
      _subject: string,
      _data: Uint8Array,
      headers: { get(k: string): string | undefined },
      cb: Callback,
    ) {
      const id = headers.get("Nats-Msg-Id") ?? "?";
      const first = !seen.has(id);
      seen.add(id);
      if (id === "m1" && first) {
        // Refused at once (a leader election: no responders) ...
        setImmediate(() => cb(new RelayError(ErrorCodes.PUBLISH_FAILED, "no responders (test)"), null));
        return;
      }
      // ... while m2 is stored at once, its PubAck 300 ms later (longer than the publish backoff).
      if (!stored.includes(id)) stored.push(id);
      const destSeq = ++seq;
      setTimeout(
        () => cb(null, { stream: "S", seq: destSeq, duplicate: id !== "m2" && !first } as PubAck),
        id === "m2" && first ? 300 : 0,
      );
    },
  } as unknown as JetStreamPublisher);
  pipeline.push(delivery(1, "e", 1));
  pipeline.push(delivery(2, "e", 2));
  await check(() => acked.length === 2, { name: "both finished", timeoutMs: 5_000 });
  assert.deepEqual(stored, ["m2"], "m1 (e v1) never stored after m2 (e v2)");
  assert.equal(pipeline.outcomes.stale, 1);
  assert.equal(await staleRetries(), 1);
});
