import type { ConsumerInfo, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { transformPattern } from "../protocol/subjects.js";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, isRelayError, RelayError } from "../errors.js";
import type { LinkCheckpoint, PositionStore } from "../group/link-position.js";
import { ackPolicyOf, createDurable, readDurable } from "../nats/durable-consumer.js";
import { findStoredSourceSeqs, holdsAnyOn, lastStoredSourceSeq } from "../nats/destination-markers.js";
import type { LastStored, SourceRef } from "../nats/destination-markers.js";
import { describeStartAt, LinkStart, startsAtFirstDelivery } from "./start-at.js";
import { readDestination } from "./checkpoint.js";

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
  /** The link's checkpoint and an operator's explicit start, in the group bucket (group/link-position.ts). */
  readonly positions?: PositionStore;
  /**
   * The consumer this process deleted to heal the link (stall, silent path), as it was just before: the
   * new one starts at its ack floor + 1, the position the relay knows, not at what a scan may find.
   */
  readonly healed?: HealedConsumer;
  /** Destination messages a scan without a checkpoint reads at most (default MAX_SCAN; tests lower it). */
  readonly maxScan?: number;
  /** The subjects the link writes in the destination (destSubjectsOf), when known. */
  readonly destSubjects?: readonly string[];
}

/** A consumer the link deleted itself, read just before (consume-loop.ts heal). */
export interface HealedConsumer {
  readonly ackFloor: number;
  readonly delivered: number;
  /** The source stream's incarnation the sequences belong to. */
  readonly sourceCreatedMs: number | undefined;
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
  /** A consumer that was gone: what placed the new one (relay_cursor_placements_total{from}). */
  readonly placedBy?: Placement;
}

/**
 * The subjects `link` writes in its destination: its filter, or its source stream's subjects, through
 * its transform. Undefined when the source stream names none (one that only sources or mirrors others).
 */
export function destSubjectsOf(link: LinkConfig, sourceInfo: StreamInfo | undefined): string[] | undefined {
  const from = link.from.filterSubject !== undefined ? [link.from.filterSubject] : sourceInfo?.config.subjects;
  if (!from || from.length === 0) return undefined;
  return [...new Set(from.flatMap((s) => transformPattern(s, link.to.transform)))];
}

/** What placed a new consumer of a link whose consumer was gone. */
export type Placement = "marker" | "checkpoint" | "heal" | "start_at" | "explicit";

/**
 * Messages read at most from the destination when positioning a cursor without a checkpoint (native
 * sourcing reads all). With a checkpoint the scan reads only what follows it, however much that is.
 */
export const MAX_SCAN = 200_000;

/**
 * Places the link's source cursor before it consumes (DESIGN §2.1, ordered recovery):
 * - no consumer (first start, deleted by an operator, lost with its stream's state): a new one starts
 *   after the last source sequence the destination holds for this link (its newest `Relay-Source`
 *   marker), never at the start of a stream the destination already has. The link's checkpoint
 *   (checkpoint.ts) bounds that search, so its depth never matters; one this process deleted to heal
 *   the link starts at its ack floor + 1; a link without a record starts at `startAt`; and a link whose
 *   record cannot be found (no checkpoint, the scan's bound reached) halts: POSITION_UNKNOWN, unless an
 *   operator gave its start (DESIGN §11);
 * - a consumer with ack-pending messages, when this process holds none of them (it just started, or
 *   took the link over): those were held by a process that died or was stopped. JetStream would deliver
 *   newer messages at once and those only after their ack wait, so they would land after newer ones:
 *   the cursor is moved back to ack floor + 1, and the ones the destination already holds are read
 *   from it, so they are acked without a second copy, however long ago they were stored. So is a
 *   consumer that delivered above its ack floor with nothing ack-pending: the server forgot those
 *   deliveries (a subject purge before 2.10.11) and would never send them again.
 * The caller owns the link: nobody else consumes from the durable meanwhile.
 */
export async function positionCursor(deps: CursorDeps, source: SourceRef, holdsNothing: boolean): Promise<CursorPosition> {
  const { link, jsm, logger } = deps;
  const existing = await readDurable(jsm, link);
  // Markers naming another link are not this one's (two links from one source may write the same subjects).
  const markers = { stream: link.to.stream, source: { ...source, link: link.name }, ...(deps.destDomain ? { domain: deps.destDomain } : {}), ...(deps.signal ? { signal: deps.signal } : {}) };
  if (!existing) {
    // The checkpoint bounds the scan: anything of the link's newer than it lies above its destination
    // seq, so only that is read, however much it is, and with nothing there its source seq is the
    // position. One of another destination incarnation says nothing; one of an older source
    // incarnation says the stream was re-created since: all of the new one is after it (seq 0).
    const dest = await readDestination(deps.dest, link.to.stream, deps.destDomain);
    const checkpoint = usableCheckpoint(await deps.positions?.checkpoint(), dest?.createdMs, source.createdMs);
    // A heal's consumer, unless another owner went further since (this relay lost the link meanwhile).
    const healed = deps.healed;
    if (healed && healed.sourceCreatedMs === source.createdMs && healed.ackFloor >= (checkpoint?.sourceSeq ?? 0)) return dropUnusedStart(deps, await createAfterHeal(deps, markers, healed));
    const last = checkpoint ? await lastStored(deps.dest, { ...markers, downTo: checkpoint.destSeq + 1, maxScan: Number.MAX_SAFE_INTEGER }) : await lastStored(deps.dest, { ...markers, maxScan: deps.maxScan ?? MAX_SCAN });
    const found = Math.max(last.sourceSeq ?? 0, checkpoint?.sourceSeq ?? 0);
    if (last.sourceSeq === undefined && !checkpoint) {
      if (last.complete) return dropUnusedStart(deps, await createAtStartAt(deps, last, source.createdMs));
      // The scan's bound says nothing; no message on the link's subjects at all is certain (a new link
      // on a destination that other links fill).
      if (deps.destSubjects?.length && !(await holdsAnyOn(deps.dest, markers, deps.destSubjects))) return dropUnusedStart(deps, await createAtStartAt(deps, { ...last, complete: true }, source.createdMs));
      return createAtExplicitStart(deps, last, source.createdMs);
    }
    const startSeq = found + 1;
    // From the start of a re-created stream: whatever its first seq is now (no gap before it).
    const info = await createDurable(jsm, link, found === 0 ? undefined : startSeq);
    const ignored = link.startAt === "earliest" ? "" : ` (startAt ${describeStartAt(link.startAt)} does not apply: the destination holds the link's record)`;
    const why =
      last.sourceSeq !== undefined && last.sourceSeq >= found
        ? `the last the destination holds for this link${checkpoint ? ` (found after its checkpoint, dest seq ${checkpoint.destSeq})` : ""}`
        : `the link's checkpoint (written ${checkpoint?.at ?? "?"}; none of its messages in the ${last.scanned} destination messages after dest seq ${checkpoint?.destSeq ?? "?"})`;
    logger.info(
      { durable: link.durableName, startSeq, destSeq: last.destSeq, scanned: last.scanned, checkpoint: checkpoint ? { sourceSeq: checkpoint.sourceSeq, destSeq: checkpoint.destSeq } : undefined, startAt: describeStartAt(link.startAt) },
      `no source consumer: created one starting after source seq ${startSeq - 1}, ${why}${ignored}`,
    );
    const placedBy = last.sourceSeq !== undefined && last.sourceSeq >= found ? "marker" : "checkpoint";
    return dropUnusedStart(deps, { info, created: true, repositioned: false, ...(found === 0 ? {} : { startSeq }), stored: new Map(), storedUpTo: 0, heldUpTo: 0, placedBy });
  }
  // A consumer's ack policy cannot be changed: `sourceAcks` changed, it is replaced at its ack floor.
  const policyChanged = existing.config.ack_policy !== ackPolicyOf(link);
  if (link.startAt !== "earliest" && (deps.start?.tellOnce() ?? true)) {
    logger.info({ durable: link.durableName, startAt: describeStartAt(link.startAt), ackFloor: existing.ack_floor.stream_seq }, `the link's source consumer exists: it goes on from its ack floor (startAt ${describeStartAt(link.startAt)} applies only to a link without a record)`);
  }
  // Delivered above its ack floor with nothing ack-pending: the server forgot deliveries nobody acked
  // (a subject purge on a server before 2.10.11 drops every ack-pending delivery): they would never
  // come again, so the cursor goes back for them too. (A consumer that delivered nothing yet since it
  // was created at a start sequence reports that start − 1 as delivered and, on 2.9, ack floor 0.)
  const forgotten = existing.num_ack_pending === 0 && existing.delivered.consumer_seq > 0 && existing.delivered.stream_seq > existing.ack_floor.stream_seq;
  if (!policyChanged && (!holdsNothing || (existing.num_ack_pending === 0 && !forgotten))) return { info: existing, created: false, repositioned: false, stored: new Map(), storedUpTo: 0, heldUpTo: 0 };
  const floor = existing.ack_floor.stream_seq;
  const stored = await storedAbove(deps.dest, markers, floor, deps.maxScan ?? MAX_SCAN);
  const info = await createDurable(jsm, link, floor + 1, true);
  const storedUpTo = Math.max(floor, ...stored.keys());
  if (policyChanged) {
    logger.info(
      { durable: link.durableName, from: existing.config.ack_policy, to: info.config.ack_policy, startSeq: floor + 1, alreadyStored: stored.size },
      `sourceAcks is ${link.sourceAcks} now: the consumer was replaced with ack policy ${info.config.ack_policy}, restarting at its ack floor + 1 (source seq ${floor + 1}; ${stored.size} messages above it are in the destination already and are only acked)`,
    );
    return { info, created: false, repositioned: true, startSeq: floor + 1, stored, storedUpTo, heldUpTo: existing.delivered.stream_seq };
  }
  const held = forgotten
    ? `the consumer delivered up to source seq ${existing.delivered.stream_seq} and holds none of it as ack-pending (the server forgot it: a subject purge before nats-server 2.10.11)`
    : `${existing.num_ack_pending} messages were held by a previous owner`;
  logger[forgotten ? "warn" : "info"](
    { durable: link.durableName, ackPending: existing.num_ack_pending, deliveredSeq: existing.delivered.stream_seq, startSeq: floor + 1, alreadyStored: stored.size },
    `ordered recovery: ${held}; the cursor restarts at source seq ${floor + 1} so they go first (${stored.size} of them are in the destination already and are only acked)`,
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
  return { info, created: true, repositioned: false, ...placed, stored: new Map(), storedUpTo: 0, heldUpTo: 0, placedBy: "start_at" };
}

/**
 * The consumer the link deleted to heal itself: the new one starts at its ack floor + 1 and what it had
 * delivered beyond that goes first (ordered recovery); what of it the destination holds already is only
 * acked. Never at what a bounded scan finds, nor at `startAt`: the relay knows where the link was.
 */
async function createAfterHeal(deps: CursorDeps, markers: Markers, healed: HealedConsumer): Promise<CursorPosition> {
  const { link, jsm, logger } = deps;
  const floor = healed.ackFloor;
  const stored = await storedAbove(deps.dest, markers, floor, deps.maxScan ?? MAX_SCAN);
  const info = await createDurable(jsm, link, floor + 1, true);
  logger.info(
    { durable: link.durableName, startSeq: floor + 1, delivered: healed.delivered, alreadyStored: stored.size },
    `the consumer deleted to heal the link was re-created at its ack floor + 1 (source seq ${floor + 1}; ${stored.size} messages above it are in the destination already and are only acked)`,
  );
  return { info, created: true, repositioned: true, startSeq: floor + 1, stored, storedUpTo: Math.max(floor, ...stored.keys()), heldUpTo: healed.delivered, placedBy: "heal" };
}

/**
 * No consumer, no checkpoint, and a scan that ended at its bound without the link's record: where the
 * link was cannot be known (DESIGN §11). An operator's explicit start (`jetstream-relay link start-at`)
 * says where it goes on, and is used once; without one the link halts, naming what was read.
 */
async function createAtExplicitStart(deps: CursorDeps, last: LastStored, incarnation: number | undefined): Promise<CursorPosition> {
  const { link, jsm, logger } = deps;
  const explicit = await deps.positions?.explicitStart();
  if (!explicit) {
    throw new RelayError(
      ErrorCodes.POSITION_UNKNOWN,
      `link ${link.name}: its source consumer ${link.durableName} on ${link.from.region}/${link.from.stream} is gone, there is no checkpoint of its position, and none of its messages is in the last ${last.scanned} messages of destination stream ${link.to.stream} (the scan's bound), which does not cover the stream: where the link was cannot be known, so it halts rather than guess (startAt applies only to a link without a record). Give its start: jetstream-relay link start-at ${link.name} --seq N (or --as-configured for a new link that has no record), then restart the relay`,
    );
  }
  const { value, revision } = explicit;
  if (value.seq === "startAt") {
    // The operator says the link has no record (a new link): as if the scan had covered the stream.
    const placed = await createAtStartAt(deps, { ...last, complete: true }, incarnation);
    await forgetStart(deps, revision);
    return { ...placed, placedBy: "explicit" };
  }
  const info = await createDurable(jsm, link, value.seq);
  logger.warn(
    { durable: link.durableName, startSeq: value.seq, by: value.by, at: value.at, reason: value.reason, scanned: last.scanned },
    `no source consumer and no known position (none of the link's messages in the last ${last.scanned} destination messages): created one at source seq ${value.seq}, the explicit start ${value.by || "?"} gave at ${value.at || "?"}`,
  );
  await forgetStart(deps, revision);
  return { info, created: true, repositioned: false, startSeq: value.seq, stored: new Map(), storedUpTo: 0, heldUpTo: 0, placedBy: "explicit" };
}

/**
 * The stored checkpoint when it speaks for the current streams: the destination's incarnation (its dest
 * seq bounds the scan), and the source's, or an older one (the stream was re-created since the
 * checkpoint: none of the new incarnation's messages is at or below it, its source seq reads 0).
 */
function usableCheckpoint(stored: LinkCheckpoint | undefined, destCreatedMs: number | undefined, sourceCreatedMs: number | undefined): LinkCheckpoint | undefined {
  if (!stored || destCreatedMs === undefined || stored.destCreatedMs !== destCreatedMs) return undefined;
  if (stored.sourceCreatedMs === sourceCreatedMs) return stored;
  return sourceCreatedMs !== undefined && stored.sourceCreatedMs < sourceCreatedMs ? { ...stored, sourceSeq: 0 } : undefined;
}

/** An explicit start is used once: a later loss finds the checkpoint written from the new consumer. */
async function forgetStart(deps: CursorDeps, revision: number): Promise<void> {
  await deps.positions?.startApplied(revision).catch((err: unknown) => deps.logger.warn({ err: (err as Error).message }, "could not delete the applied explicit start (it applies only while the position is unknown)"));
}

/**
 * An explicit start left from an earlier halt that the link did not need (its position was known after
 * all) is deleted: applied much later, to another loss, it would be a guess.
 */
async function dropUnusedStart(deps: CursorDeps, position: CursorPosition): Promise<CursorPosition> {
  try {
    const left = await deps.positions?.explicitStart();
    if (left) {
      await deps.positions?.startApplied(left.revision);
      deps.logger.warn({ seq: left.value.seq, by: left.value.by, at: left.value.at }, `an explicit start (source seq ${left.value.seq}) was not needed: the link's position was known (${position.placedBy ?? "?"}); deleted`);
    }
  } catch (err) {
    deps.logger.debug({ err: (err as Error).message }, "could not look for an unused explicit start");
  }
  return position;
}

type Markers = { stream: string; domain?: string; source: SourceRef; signal?: AbortSignal };

/**
 * The link's markers with a source seq above `floor`: read backwards from the end of the destination
 * in growing spans until a span reaches a marker at or below the floor (or the start, or MAX_SCAN).
 */
async function storedAbove(dest: NatsConnection, markers: Markers, floor: number, maxScan = MAX_SCAN): Promise<Map<number, number>> {
  const last = await lastStored(dest, { ...markers, maxScan });
  if (last.sourceSeq === undefined || last.destSeq === undefined || last.sourceSeq <= floor) return new Map();
  for (let span = 1_024; ; span *= 4) {
    const from = Math.max(1, last.destSeq - span + 1);
    const found = await findStoredSourceSeqs(dest, { ...markers, fromDestSeq: from });
    const reachedFloor = [...found.keys()].some((seq) => seq <= floor);
    if (reachedFloor || from === 1 || span >= maxScan) {
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
