/**
 * The link's checkpoint (group/link-position.ts): its owner writes where the link is, so a consumer lost
 * later (deleted by an operator, lost with its stream's state, deleted by a heal in another process)
 * is re-created there without a scan of the whole destination, however many messages of other links
 * fill it (DESIGN §11: the position never depends on how deep the link's last record lies).
 *
 * A checkpoint is (source incarnation, ack floor S, destination incarnation, destination seq D), D read
 * before S: every source seq at or below S is settled, and a message of the link above S stored after
 * D was read lies above D. Positioning (cursor.ts) reads the destination after D only: the newest
 * marker there wins, and with none, S is the position. A message in flight while the checkpoint was
 * taken (stored before D, acked after S was read) is at or below D: it is sent again, and the
 * destination's duplicate window or the guard absorbs it. Taken with nothing ack-pending (an idle link,
 * the final checkpoint of a drain) the checkpoint is exact.
 *
 * Written every `intervalMs` while this relay works the link and the position moved (an idle link on an
 * idle destination writes nothing), and once more when the link stops after its drain. A link at rest
 * (its last check found nothing ack-pending, and it has been delivered nothing and placed no cursor
 * since) checks every IDLE_CHECK_EVERY ticks only: its own position cannot have moved, and what a check
 * would still write is the destination's newer last sequence (other writers), which only shortens a
 * later positioning's read. A thousand idle links read two streams' info 400 times a second otherwise.
 */
import { JetStreamApiCodes, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { toRelayError } from "../errors.js";
import { sleep } from "../lifecycle/backoff.js";
import type { LinkCheckpoint, PositionStore } from "../group/link-position.js";
import { classifyJsError, isApiCode } from "../nats/durable-consumer.js";
import type { LinkDeps } from "./link-deps.js";

/** How often the owner writes the checkpoint when the position moved (ms). */
export const CHECKPOINT_INTERVAL_MS = 5_000;
/** A link at rest checks its checkpoint every this many ticks (30 s at the default interval). */
export const IDLE_CHECK_EVERY = 6;
const SETTLE_READS = 5;
const SETTLE_PAUSE_MS = 100;
/** How long a stop waits for its last checkpoint (ms): the periodic ones stand when a server does not answer. */
const FINAL_WRITE_MS = 2_000;

/** The destination stream's incarnation and last sequence; undefined when it does not exist. */
export async function readDestination(
  nc: NatsConnection,
  stream: string,
  domain: string | undefined,
): Promise<{ createdMs: number; lastSeq: number } | undefined> {
  const jsm = await jetstreamManager(nc, domain ? { domain, checkAPI: false } : { checkAPI: false });
  try {
    const info = await jsm.streams.info(stream);
    return { createdMs: Date.parse(info.created), lastSeq: info.state.last_seq };
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) return undefined;
    throw classifyJsError(err, `destination stream ${stream}`);
  }
}

/** What the writer asks the link, as it runs. */
export interface CheckpointLink {
  /** The source's JetStream manager, once the link has one. */
  jsm(): JetStreamManager | undefined;
  /** The source stream's incarnation (its creation time, ms), once read. */
  sourceCreatedMs(): number | undefined;
  /** This relay works the link now (owns it, not standing by, not resyncing, not failed). */
  working(): boolean;
  /** Grows with every delivery and every cursor placement: unchanged, the link's position has not moved. */
  activity(): number;
}

type WriterDeps = Pick<LinkDeps, "config" | "dest" | "destDomain" | "logger" | "metrics" | "ticks">;

export class CheckpointWriter {
  private unsubscribe: (() => void) | undefined;
  private writing: Promise<void> | undefined;
  private last: LinkCheckpoint | undefined;
  private troubled = false;
  /** `activity()` when the last check found the link at rest (nothing ack-pending); undefined: not at rest. */
  private restingAt: number | undefined;
  /** Ticks skipped since the last check while the link stays at rest. */
  private restingTicks = 0;

  constructor(
    private readonly deps: WriterDeps,
    private readonly positions: PositionStore,
    private readonly link: CheckpointLink,
    private readonly intervalMs = CHECKPOINT_INTERVAL_MS,
  ) {}

  start(): void {
    this.unsubscribe ??= this.deps.ticks.every(this.intervalMs, () => {
      if (this.writing || !this.link.working()) return;
      if (this.restingAt !== undefined && this.restingAt === this.link.activity() && ++this.restingTicks < IDLE_CHECK_EVERY) return;
      this.restingTicks = 0;
      void this.writeNow();
    });
  }

  stop(): void {
    this.unsubscribe?.();
  }

  /**
   * Takes and writes a checkpoint when the position moved. `settle`: the link has drained (its stop),
   * so an ack-pending count above 0 is acks still arriving. Never rejects: a failure waits for the next tick.
   */
  writeNow(settle = false): Promise<void> {
    // The drain's checkpoint comes after one under way, which read the position before the drain ended.
    if (settle) return (this.writing ?? Promise.resolve()).then(() => this.write(true));
    this.writing ??= this.write(false).finally(() => (this.writing = undefined));
    return this.writing;
  }

  /**
   * The drain's checkpoint (exact: nothing in flight), waited for at most FINAL_WRITE_MS: a stop never
   * waits out request timeouts on a server that is gone (the last periodic checkpoint stands then).
   */
  async final(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), FINAL_WRITE_MS)));
    const outcome = await Promise.race([this.writeNow(true), late]);
    clearTimeout(timer);
    if (outcome === "late") this.deps.logger.warn(`the link's last checkpoint was not written within ${FINAL_WRITE_MS} ms of the stop: its last periodic one stands`);
  }

  private async write(settle: boolean): Promise<void> {
    const { config, logger } = this.deps;
    const jsm = this.link.jsm();
    const sourceCreatedMs = this.link.sourceCreatedMs();
    if (!jsm || sourceCreatedMs === undefined) return;
    const activity = this.link.activity();
    this.restingAt = undefined;
    try {
      // The destination first: a record of the link stored after this read lies above it.
      const dest = await readDestination(this.deps.dest, config.to.stream, this.deps.destDomain);
      if (!dest) return;
      let info = await jsm.consumers.info(config.from.stream, config.durableName);
      // After a drain the last acks may still be on their way into the consumer: a floor read before
      // them would make positioning send those messages again. Asked a few times, briefly.
      for (let i = 0; settle && info.num_ack_pending > 0 && i < SETTLE_READS; i++) {
        await sleep(SETTLE_PAUSE_MS);
        info = await jsm.consumers.info(config.from.stream, config.durableName);
      }
      const value: LinkCheckpoint = {
        sourceCreatedMs,
        sourceSeq: info.ack_floor.stream_seq,
        destCreatedMs: dest.createdMs,
        destSeq: dest.lastSeq,
        at: new Date().toISOString(),
      };
      const last = this.last;
      const resting = info.num_ack_pending === 0 ? activity : undefined;
      if (
        last &&
        last.sourceCreatedMs === value.sourceCreatedMs &&
        last.sourceSeq === value.sourceSeq &&
        last.destCreatedMs === value.destCreatedMs &&
        last.destSeq === value.destSeq
      ) {
        this.restingAt = resting;
        return;
      }
      if (!this.link.working()) return;
      await this.positions.writeCheckpoint(value);
      this.last = value;
      this.restingAt = resting;
      this.deps.metrics.checkpoints.inc({ link: config.name });
      if (this.troubled) logger.info("link checkpoint written again");
      this.troubled = false;
    } catch (err) {
      // A consumer not there (being re-created) or a bucket in an election: the next tick tries again.
      if (!this.troubled)
        logger.warn(
          { err: toRelayError(err).message },
          "could not write the link's checkpoint (its position in the group bucket); trying again",
        );
      this.troubled = true;
    }
  }
}
