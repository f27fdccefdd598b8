/**
 * The facts of the start row (start-checks.ts), read only for a link whose durable consumer does not
 * exist: the destination's record of the link, by the rule the link itself places its cursor with
 * (link/cursor.ts), and, without one, where its `startAt` starts and how many messages wait from there.
 * Those are counted by the server itself: a short-lived ephemeral consumer with the link's filter and
 * start, deleted at once (gone after 10 s in any case); it is never pulled from.
 */
import { AckPolicy } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { nanos } from "@nats-io/nats-core";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, isRelayError } from "../errors.js";
import { MAX_SCAN } from "../link/cursor.js";
import { markerSource } from "../link/source-stream.js";
import { cursorStartOf } from "../link/start-at.js";
import { lastStoredSourceSeq } from "../nats/destination-markers.js";
import type { LastStored } from "../nats/destination-markers.js";
import { deliverFrom } from "../nats/durable-consumer.js";
import type { ConsumerFact, StartFact } from "./facts.js";

export interface StartSessions {
  readonly source?: JetStreamManager | undefined;
  readonly dest?: NatsConnection | undefined;
  readonly destDomain?: string | undefined;
}

export async function readStart(s: StartSessions, link: LinkConfig, consumer: ConsumerFact): Promise<StartFact> {
  if (consumer.kind !== "missing" || !s.source || !s.dest) return { kind: "unreachable" };
  try {
    const info = await s.source.streams.info(link.from.stream);
    const source = { ...markerSource(link, info), link: link.name };
    const last = await lastStoredSourceSeq(s.dest, { stream: link.to.stream, source, maxScan: MAX_SCAN, ...(s.destDomain ? { domain: s.destDomain } : {}) }).catch(
      (err: unknown): LastStored => {
        // A destination stream that does not exist yet holds nothing.
        if (isRelayError(err, ErrorCodes.STREAM_NOT_FOUND)) return { sourceSeq: undefined, destSeq: undefined, scanned: 0, complete: true };
        throw err;
      },
    );
    if (last.sourceSeq !== undefined) return { kind: "record", afterSeq: last.sourceSeq, streamLastSeq: info.state.last_seq };
    const from = link.startAt === "new" ? { startSeq: info.state.last_seq + 1, messages: 0 } : await countFrom(s.source, link);
    return { kind: "start-at", ...from, complete: last.complete, scanned: last.scanned };
  } catch (err) {
    return { kind: "failed", reason: err instanceof Error ? err.message : String(err) };
  }
}

/** Where a consumer with the link's filter and `startAt` starts, and what it has pending there. */
async function countFrom(jsm: JetStreamManager, link: LinkConfig): Promise<{ startSeq: number; messages: number }> {
  const stream = link.from.stream;
  const info = await jsm.consumers.add(stream, {
    ...deliverFrom(cursorStartOf(link.startAt)),
    ack_policy: AckPolicy.Explicit,
    inactive_threshold: nanos(10_000),
    mem_storage: true,
    description: `jetstream-relay check: where link ${link.name} starts`,
    ...(link.from.filterSubject ? { filter_subject: link.from.filterSubject } : {}),
  });
  try {
    return { startSeq: info.delivered.stream_seq + 1, messages: info.num_pending };
  } finally {
    await jsm.consumers.delete(stream, info.name).catch(() => undefined);
  }
}
