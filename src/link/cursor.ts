import type { ConsumerInfo, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, isRelayError } from "../errors.js";
import { ackPolicyOf, createDurable, readDurable } from "../nats/durable-consumer.js";
import { findStoredSourceSeqs, lastStoredSourceSeq } from "../nats/destination-markers.js";
import type { LastStored, SourceRef } from "../nats/destination-markers.js";
import { describeStartAt, LinkStart, startsAtFirstDelivery } from "./start-at.js";

export interface CursorDeps {
  readonly link: LinkConfig;
  /** JetStream API of the source region. */
  readonly jsm: JetStreamManager;
  /** The destination region's connection, and its JetStream domain. */
  readonly dest: NatsConnection;
  readonly destDomain?: string;
  readonly logger: Logger;
  readonly signal?: AbortSignal;
  /** Where the link first started in this process (a link without a record starts at its `startAt`). */
  readonly start?: LinkStart;
}

export interface CursorPosition {
  readonly info: ConsumerInfo;
  /** The consumer did not exist: a new one was created (at `startSeq`). */
  readonly created: boolean;
  /** It existed with messages a previous owner held: it was moved back to its ack floor + 1. */
  readonly repositioned: boolean;
  /** Where a new or moved cursor starts (undefined: the start of the stream, or not moved). */
  readonly startSeq?: number;
  /**
   * A new cursor placed by `startAt` new or a time: nothing at or below this source seq is the link's
   * (no gap there), and its first delivery sets the gap baseline.
   */
  readonly skippedTo?: number;
  /** Source seq → destination seq of this link's messages above the ack floor already in the destination. */
  readonly stored: ReadonlyMap<number, number>;
  /** The highest source sequence `stored` speaks for (0 when nothing was read). */
  readonly storedUpTo: number;
  /** The highest source sequence the previous owner had been delivered (0 when not repositioned): its claims are taken over. */
  readonly heldUpTo: number;
}

/** Messages read at most from the destination when positioning a cursor (native sourcing reads all). */
export const MAX_SCAN = 200_000;

/**
 * Places the link's source cursor before it consumes (DESIGN §2.1, ordered recovery):
 * - no consumer (first start, deleted by an operator, lost with its stream's state): a new one starts
 *   after the last source sequence the destination holds for this link (its newest `Relay-Source`
 *   marker), never at the start of a stream the destination already has;
 * - a consumer with ack-pending messages, when this process holds none of them (it just started, or
 *   took the link over): those were held by a process that died or was stopped. JetStream would deliver
 *   newer messages at once and those only after their ack wait, so they would land after newer ones:
 *   the cursor is moved back to ack floor + 1, and the ones the destination already holds are read
 *   from it, so they are acked without a second copy, however long ago they were stored.
 * The caller owns the link: nobody else consumes from the durable meanwhile.
 */
export async function positionCursor(deps: CursorDeps, source: SourceRef, holdsNothing: boolean): Promise<CursorPosition> {
  const { link, jsm, logger } = deps;
  const existing = await readDurable(jsm, link);
  // Markers naming another link are not this one's (two links from one source may write the same subjects).
  const markers = { stream: link.to.stream, source: { ...source, link: link.name }, ...(deps.destDomain ? { domain: deps.destDomain } : {}), ...(deps.signal ? { signal: deps.signal } : {}) };
  if (!existing) {
    const last = await lastStored(deps.dest, { ...markers, maxScan: MAX_SCAN });
    if (last.sourceSeq === undefined) return createAtStartAt(deps, last, source.createdMs);
    const startSeq = last.sourceSeq + 1;
    const info = await createDurable(jsm, link, startSeq);
    const ignored = link.startAt === "earliest" ? "" : ` (startAt ${describeStartAt(link.startAt)} does not apply: the destination holds the link's record)`;
    logger.info({ durable: link.durableName, startSeq, destSeq: last.destSeq, startAt: describeStartAt(link.startAt) }, `no source consumer: created one starting after source seq ${startSeq - 1}, the last the destination holds for this link${ignored}`);
    return { info, created: true, repositioned: false, startSeq, stored: new Map(), storedUpTo: 0, heldUpTo: 0 };
  }
  // A consumer's ack policy cannot be changed: `sourceAcks` changed, it is replaced at its ack floor.
  const policyChanged = existing.config.ack_policy !== ackPolicyOf(link);
  if (link.startAt !== "earliest" && (deps.start?.tellOnce() ?? true)) {
    logger.info({ durable: link.durableName, startAt: describeStartAt(link.startAt), ackFloor: existing.ack_floor.stream_seq }, `the link's source consumer exists: it goes on from its ack floor (startAt ${describeStartAt(link.startAt)} applies only to a link without a record)`);
  }
  if (!policyChanged && (!holdsNothing || existing.num_ack_pending === 0)) return { info: existing, created: false, repositioned: false, stored: new Map(), storedUpTo: 0, heldUpTo: 0 };
  const floor = existing.ack_floor.stream_seq;
  const stored = await storedAbove(deps.dest, markers, floor);
  const info = await createDurable(jsm, link, floor + 1, true);
  const storedUpTo = Math.max(floor, ...stored.keys());
  if (policyChanged) {
    logger.info(
      { durable: link.durableName, from: existing.config.ack_policy, to: info.config.ack_policy, startSeq: floor + 1, alreadyStored: stored.size },
      `sourceAcks is ${link.sourceAcks} now: the consumer was replaced with ack policy ${info.config.ack_policy}, restarting at its ack floor + 1 (source seq ${floor + 1}; ${stored.size} messages above it are in the destination already and are only acked)`,
    );
    return { info, created: false, repositioned: true, startSeq: floor + 1, stored, storedUpTo, heldUpTo: existing.delivered.stream_seq };
  }
  logger.info(
    { durable: link.durableName, ackPending: existing.num_ack_pending, startSeq: floor + 1, alreadyStored: stored.size },
    `ordered recovery: ${existing.num_ack_pending} messages were held by a previous owner; the cursor restarts at source seq ${floor + 1} so they go first (${stored.size} of them are in the destination already and are only acked)`,
  );
  return { info, created: false, repositioned: true, startSeq: floor + 1, stored, storedUpTo, heldUpTo: existing.delivered.stream_seq };
}

/**
 * A link without a record (no consumer, none of its markers in the destination): the new consumer
 * starts where its `startAt` says (link/start-at.ts), and the line says where and why.
 */
async function createAtStartAt(deps: CursorDeps, last: LastStored, incarnation: number | undefined): Promise<CursorPosition> {
  const { link, jsm, logger } = deps;
  const starts = deps.start ?? new LinkStart();
  const choice = starts.choose(link, incarnation);
  const info = await createDurable(jsm, link, choice.start);
  starts.created(link, info, incarnation);
  // The server places a new consumer's delivered sequence just before where it starts.
  const at = info.delivered.stream_seq + 1;
  const record = last.complete ? "the destination holds none of this link's messages" : `none of this link's messages in the last ${last.scanned} destination messages`;
  const where = choice.start === undefined ? "from the start of the stream" : `at source seq ${at}`;
  (last.complete ? logger.info.bind(logger) : logger.warn.bind(logger))(
    { durable: link.durableName, scanned: last.scanned, startAt: describeStartAt(link.startAt), startSeq: at, pending: info.num_pending },
    `no source consumer: created one ${where} (${record}; ${choice.why}): ${info.num_pending} messages waiting`,
  );
  const placed = typeof choice.start === "number" ? { startSeq: at } : startsAtFirstDelivery(choice.start) ? { skippedTo: at - 1 } : {};
  return { info, created: true, repositioned: false, ...placed, stored: new Map(), storedUpTo: 0, heldUpTo: 0 };
}

/**
 * The link's markers with a source seq above `floor`: read backwards from the end of the destination
 * in growing spans until a span reaches a marker at or below the floor (or the start, or MAX_SCAN).
 */
async function storedAbove(
  dest: NatsConnection,
  markers: { stream: string; domain?: string; source: SourceRef; signal?: AbortSignal },
  floor: number,
): Promise<Map<number, number>> {
  const last = await lastStored(dest, { ...markers, maxScan: MAX_SCAN });
  if (last.sourceSeq === undefined || last.destSeq === undefined || last.sourceSeq <= floor) return new Map();
  for (let span = 1_024; ; span *= 4) {
    const from = Math.max(1, last.destSeq - span + 1);
    const found = await findStoredSourceSeqs(dest, { ...markers, fromDestSeq: from });
    const reachedFloor = [...found.keys()].some((seq) => seq <= floor);
    if (reachedFloor || from === 1 || span >= MAX_SCAN) {
      for (const seq of [...found.keys()]) if (seq <= floor) found.delete(seq);
      return found;
    }
  }
}

/** The newest marker; a destination stream that does not exist yet holds none (its messages wait for it). */
async function lastStored(dest: NatsConnection, opts: Parameters<typeof lastStoredSourceSeq>[1]): ReturnType<typeof lastStoredSourceSeq> {
  try {
    return await lastStoredSourceSeq(dest, opts);
  } catch (err) {
    if (isRelayError(err, ErrorCodes.STREAM_NOT_FOUND)) return { sourceSeq: undefined, destSeq: undefined, scanned: 0, complete: true };
    throw err;
  }
}
