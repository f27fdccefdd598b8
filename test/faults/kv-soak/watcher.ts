import { setTimeout as delay } from "node:timers/promises";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { StoredMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseNanos } from "../../../src/protocol/headers.js";
import { parseKvVersion } from "../../../src/protocol/kv-version.js";
import type { KvOp } from "./writers.js";
import { WRITE_HEADER } from "./writers.js";

/**
 * What a region's bucket stored, in stream order, as it was stored: an ordered consumer over the
 * bucket's stream from its first message, on the test's own connection, independent of the relays.
 * A message the bucket removed before the consumer read it (history, a purge's rollup) is a hole in
 * the sequence; the soak reads what is left at the end (`readRest`) and counts the holes.
 */
export interface Observed {
  readonly seq: number;
  readonly key: string;
  /** Its store time in this region (ns). */
  readonly storedNs: bigint;
  /** Its `Test-Write` id ("" when it has none: not a writer's). */
  readonly id: string;
  readonly op: KvOp;
  readonly value: string;
  /** Its `Relay-KV-Version` (`<ns> <region>`), when a relay stored it; "" for a local write. */
  readonly carried: string;
  /** Its `Relay-Origin`, when a relay stored it. */
  readonly origin: string;
}

export interface BucketWatcher {
  readonly region: string;
  /** Every message seen, by sequence. */
  readonly seen: ReadonlyMap<number, Observed>;
  /** The highest sequence seen (0: none). */
  readonly lastSeq: number;
  /** Consumers started again after one ended (a stopped server, a reconnect). */
  readonly restarts: number;
  stop(): Promise<void>;
}

function observe(m: { seq: number; subject: string; data: Uint8Array; headers?: { get(k: string): string }; timestampNanos: bigint }, prefix: string): Observed {
  const h = (k: string) => m.headers?.get(k) ?? "";
  const op = h("KV-Operation");
  return {
    seq: m.seq,
    key: m.subject.slice(prefix.length),
    storedNs: m.timestampNanos,
    id: h(WRITE_HEADER),
    op: op === "DEL" || op === "PURGE" ? op : "PUT",
    value: new TextDecoder().decode(m.data),
    carried: h("Relay-KV-Version"),
    origin: h("Relay-Origin"),
  };
}

/** A message read directly (a get by sequence or by subject). */
function observeStored(m: StoredMsg, bucket: string): Observed {
  const timestampNanos = parseNanos(m.timestamp);
  if (timestampNanos === undefined) throw new Error(`KV_${bucket} seq ${m.seq}: unreadable timestamp ${m.timestamp}`);
  return observe({ seq: m.seq, subject: m.subject, data: m.data, headers: { get: (k: string) => m.header?.get(k) ?? "" }, timestampNanos }, `$KV.${bucket}.`);
}

/** Watches region `region`'s bucket from its first message until `stop()`. */
export function watchBucket(nc: NatsConnection, region: string, bucket: string): BucketWatcher {
  const stream = `KV_${bucket}`;
  const prefix = `$KV.${bucket}.`;
  const seen = new Map<number, Observed>();
  let lastSeq = 0;
  let restarts = 0;
  let stopped = false;
  let current: { stop(): void } | undefined;
  const run = async (): Promise<void> => {
    const js = jetstream(nc);
    while (!stopped) {
      try {
        const consumer = await js.consumers.get(stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: lastSeq + 1 });
        const iter = await consumer.consume({ max_messages: 1_000 });
        current = iter;
        if (stopped) iter.stop();
        for await (const m of iter) {
          if (m.seq <= lastSeq) continue;
          seen.set(m.seq, observe(m, prefix));
          lastSeq = m.seq;
        }
      } catch {
        // a stopped server or a reconnect: start again after the last message seen
      }
      if (!stopped) {
        restarts++;
        await delay(200);
      }
    }
  };
  const done = run();
  return {
    region,
    seen,
    get lastSeq() {
      return lastSeq;
    },
    get restarts() {
      return restarts;
    },
    stop: async () => {
      stopped = true;
      current?.stop();
      await done;
    },
  };
}

/** Every message left in the bucket's stream now (by direct reads of each sequence the watcher missed). */
export async function readRest(nc: NatsConnection, bucket: string, seen: ReadonlyMap<number, Observed>): Promise<{ rest: Observed[]; holes: number; lastSeq: number }> {
  const jsm = await jetstreamManager(nc);
  const stream = `KV_${bucket}`;
  const info = await jsm.streams.info(stream);
  const rest: Observed[] = [];
  let holes = 0;
  for (let seq = 1; seq <= info.state.last_seq; seq++) {
    if (seen.has(seq)) continue;
    const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
    if (!m) {
      holes++;
      continue;
    }
    rest.push(observeStored(m, bucket));
  }
  return { rest, holes, lastSeq: info.state.last_seq };
}

/** The version a stored message is judged by: its carried `Relay-KV-Version`, else its store time here. */
export function versionOfObserved(o: Observed, region: string): { ns: bigint; region: string } {
  return (o.carried !== "" ? parseKvVersion(o.carried) : undefined) ?? { ns: o.storedNs, region };
}

/** Each key's latest entry in the bucket now (the last message of each key's subject, read at once). */
export async function latestEntries(nc: NatsConnection, bucket: string, keys: readonly string[]): Promise<Map<string, Observed>> {
  const jsm = await jetstreamManager(nc);
  const out = new Map<string, Observed>();
  const got = await Promise.all(keys.map((key) => jsm.streams.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${key}` })));
  got.forEach((m, i) => {
    if (m) out.set(keys[i] as string, observeStored(m, bucket));
  });
  return out;
}

/** Keys whose latest entry differs between the regions: "" when they all agree. */
export function disagreement(latest: ReadonlyMap<string, ReadonlyMap<string, Observed>>, keys: readonly string[]): string {
  const out: string[] = [];
  for (const key of keys) {
    const seen = [...latest].map(([region, m]) => {
      const o = m.get(key);
      return [region, o ? `${o.id} ${o.op} ${o.carried || `${o.storedNs} ${region}`}` : "none"] as const;
    });
    if (new Set(seen.map(([, s]) => s)).size > 1) out.push(`${key}: ${seen.map(([r, s]) => `${r}=${s}`).join(", ")}`);
  }
  return out.length === 0 ? "" : `${out.length} keys differ, e.g. ${out.slice(0, 5).join("; ")}`;
}
