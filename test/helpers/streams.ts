import { connect } from "@nats-io/transport-node";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { StreamConfig } from "@nats-io/jetstream";
import type { NatsConnection, MsgHdrs } from "@nats-io/nats-core";
import { headers as createHeaders, nanos } from "@nats-io/nats-core";
import { deferrals } from "./teardown.js";

/** A test's own client connection; closed when the test ends (on its teardown stack: before its servers stop). */
export async function connectTo(
  t: { after(fn: () => unknown): void },
  servers: string | readonly string[],
  extra: Record<string, unknown> = {},
): Promise<NatsConnection> {
  const nc = await connect({ servers: typeof servers === "string" ? servers : [...servers], maxReconnectAttempts: -1, reconnectTimeWait: 200, ...extra });
  deferrals(t)(() => nc.close());
  return nc;
}

export interface StreamSpec {
  name: string;
  subjects: string[];
  duplicateWindowMs?: number;
  replicas?: number;
  maxAgeMs?: number;
  maxMsgs?: number;
  allowRollup?: boolean;
}

/** How long creating a replicated stream may keep timing out before the test fails (see createStream). */
const REPLICATED_CREATE_MS = 30_000;

export async function createStream(nc: NatsConnection, spec: StreamSpec): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const config = {
    name: spec.name,
    subjects: spec.subjects,
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    num_replicas: spec.replicas ?? 1,
    duplicate_window: nanos(spec.duplicateWindowMs ?? Math.min(120_000, spec.maxAgeMs ?? 120_000)),
    ...(spec.maxAgeMs ? { max_age: nanos(spec.maxAgeMs) } : {}),
    ...(spec.maxMsgs ? { max_msgs: spec.maxMsgs } : {}),
    ...(spec.allowRollup ? { allow_rollup_hdrs: true } : {}),
  };
  // A replicated stream's creation answers once its group elected a leader, which on a loaded machine
  // can outlast one API timeout (seen once: 5 s on a fresh 3-node cluster). Adding the same config
  // again is idempotent, so a timeout is retried, within REPLICATED_CREATE_MS.
  const until = Date.now() + REPLICATED_CREATE_MS;
  for (;;) {
    try {
      await jsm.streams.add(config);
      return;
    } catch (err) {
      if ((spec.replicas ?? 1) === 1 || (err as Error).name !== "TimeoutError" || Date.now() > until) throw err;
    }
  }
}

export interface OutMessage {
  subject: string;
  data?: Uint8Array;
  headers?: Record<string, string>;
}

/** Publishes with PubAcks, `window` at a time; returns when every message is stored. */
export async function publishMany(nc: NatsConnection, count: number, make: (i: number) => OutMessage, window = 256): Promise<void> {
  const js = jetstream(nc);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const m = make(i);
      let h: MsgHdrs | undefined;
      if (m.headers) {
        h = createHeaders();
        for (const [k, v] of Object.entries(m.headers)) h.set(k, v);
      }
      await js.publish(m.subject, m.data ?? new TextEncoder().encode(`payload-${i}`), h ? { headers: h, timeout: 10_000 } : { timeout: 10_000 });
    }
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, worker));
}

export interface StoredMessage {
  seq: number;
  /** When the stream stored it (ms since epoch, the server's clock). */
  time: number;
  subject: string;
  data: string;
  headers: Record<string, string>;
}

/**
 * Every message in a stream, in stream order, up to the last sequence it held when called. Ends on the
 * stream's last sequence, not on the consumer's `pending` (which can read 0 early around a leader change).
 * An ordered consumer that delivers nothing for 10 s (seen once on 2.9.10 after a soak of node kills: it
 * stopped two messages short and never resumed) is replaced by a new one starting after the last
 * message read, until `timeoutMs` is over.
 */
export async function readStream(nc: NatsConnection, stream: string, timeoutMs = 30_000): Promise<StoredMessage[]> {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(stream);
  if (info.state.messages === 0) return [];
  const lastSeq = info.state.last_seq;
  const deadline = Date.now() + timeoutMs;
  const out: StoredMessage[] = [];
  let next = info.state.first_seq;
  while (next <= lastSeq && Date.now() < deadline) {
    const consumer = await js.consumers.get(stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: next }); // ordered consumer
    const iter = await consumer.consume({ max_messages: 1_000 });
    const idle = (): NodeJS.Timeout => setTimeout(() => iter.stop(), Math.min(10_000, Math.max(0, deadline - Date.now())));
    let timer = idle();
    try {
      for await (const m of iter) {
        clearTimeout(timer);
        timer = idle();
        const headers: Record<string, string> = {};
        if (m.headers) for (const [k, v] of m.headers) headers[k] = v.join(",");
        out.push({ seq: m.seq, time: Math.floor(m.info.timestampNanos / 1e6), subject: m.subject, data: m.string(), headers });
        next = m.seq + 1;
        if (m.seq >= lastSeq) break;
      }
    } finally {
      clearTimeout(timer);
      await iter.close();
    }
  }
  return out;
}

/** Changes a stream's config in place (the client merges `cfg` into the current config). */
export async function updateStream(nc: NatsConnection, stream: string, cfg: Partial<StreamConfig>): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.update(stream, cfg);
}

export async function streamCount(nc: NatsConnection, stream: string): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(stream)).state.messages;
}

/** Every id appearing more than once, and every expected id missing. */
export function exactlyOnce(ids: readonly string[], expected: readonly string[]): { missing: string[]; duplicated: string[] } {
  const seen = new Map<string, number>();
  for (const id of ids) seen.set(id, (seen.get(id) ?? 0) + 1);
  return {
    missing: expected.filter((id) => !seen.has(id)),
    duplicated: [...seen].filter(([, n]) => n > 1).map(([id]) => id),
  };
}

/**
 * A link cursor (durable consumer) at the start of `stream`, made before the relay starts: a relay that
 * finds no consumer creates one after what the destination already holds, so a test that wants a
 * cursor to pass over messages again makes it itself (the relay brings its other settings in line).
 * Its ack policy is the one of the link's `sourceAcks` (AckAll for the default, cumulative): one of
 * the other policy would be replaced at its ack floor, and the relay would skip what the destination holds.
 */
export async function createCursorFromStart(
  nc: NatsConnection,
  stream: string,
  durable: string,
  ackPolicy: AckPolicy = AckPolicy.All,
): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add(stream, { durable_name: durable, ack_policy: ackPolicy, deliver_policy: DeliverPolicy.All, max_deliver: -1 });
}
