/**
 * The link's poll (every `pollIntervalMs`): reads the backlog, exports it, rechecks an unknown
 * destination, feeds the window, the stall watch and the source inspector, clears troubles that ended
 * without an event to say so, and refreshes the link's state. Moved out of link.ts as it is.
 */
import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import type { TickGrid } from "../lifecycle/tick-grid.js";
import { isApiCode } from "../nats/durable-consumer.js";
import type { ListedStream, ListedStreams } from "../nats/stream-listing.js";
import { unchanged } from "../nats/stream-listing.js";
import type { LinkState, RelayMetrics } from "../observability/metrics.js";
import type { BacklogProbe, BacklogReading } from "./backlog.js";
import type { ConsumeLoop } from "./consume-loop.js";
import type { DestinationCheck } from "./destination-check.js";
import type { GuardWatch } from "./guard-watch.js";
import type { LinkHealth } from "./link-health.js";
import type { LinkWatch } from "./link-watch.js";
import type { LinkWindow } from "./link-window.js";
import type { Ownership } from "./ownership.js";
import type { Pipeline } from "./pipeline.js";
import type { CatchUpLog } from "./progress-log.js";
import type { ResyncRunner } from "./resync-runner.js";
import type { SourceInspector } from "./source-inspector.js";
import type { StallWatch } from "./stall-watch.js";

export interface BacklogPollDeps {
  readonly config: LinkConfig;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** The link stopping: no poll after it, and a reading that comes back after it writes nothing. */
  readonly signal: AbortSignal;
  readonly intervalMs: number;
  /** The relay's shared tick grid: every link's poll runs from its one timer per period. */
  readonly ticks: TickGrid;
  readonly probe: Pick<BacklogProbe, "read">;
  /**
   * The source's streams as one listing shows them, shared by the links on the source (stream-listing.ts):
   * an owner at rest whose stream is unchanged since its last reading skips its own (absent: it reads).
   */
  readonly listing?: { states(maxAgeMs: number): Promise<ListedStreams | undefined>; join(): () => void };
  readonly destinationCheck: Pick<DestinationCheck, "known" | "recheck">;
  readonly pipeline: Pick<Pipeline, "destinationHeld" | "keepAlive" | "bytes" | "size" | "resume" | "pushedBack">;
  readonly window: Pick<LinkWindow, "holding" | "observe" | "throttled">;
  readonly inspector: Pick<SourceInspector, "observeClock" | "inspect">;
  readonly health: Pick<LinkHealth, "has" | "clear" | "trouble" | "refresh" | "nothingButStalled">;
  readonly stallWatch: Pick<StallWatch, "observe" | "stalled">;
  readonly loop: Pick<ConsumeLoop, "delivered" | "pulled" | "stopPulling">;
  readonly ownership: Pick<Ownership, "standby">;
  readonly lease: { valid(): boolean };
  readonly resyncs: Pick<ResyncRunner, "running">;
  readonly publisher: { readonly inFlight: number };
  readonly watch: Pick<LinkWatch, "destConnected">;
  readonly catchUpLog: Pick<CatchUpLog, "observe">;
  readonly guardWatch: Pick<GuardWatch, "poll">;
  state(): LinkState;
  /** Each reading, as `/status` shows it. */
  reading(reading: BacklogReading): void;
}

/** An idle link reads its source every this many polls (see `quiet`). */
export const IDLE_POLL_EVERY = 5;

/** A link's phase among the idle polls: spread by its name, the same in every run. */
export function phaseOf(name: string): number {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return h % IDLE_POLL_EVERY;
}

export class BacklogPoll {
  private unsubscribe: (() => void) | undefined;
  private leaveListing: (() => void) | undefined;
  /** A poll on the grid is under way (reading): the next tick skips. */
  private polling = false;
  /** What the last reading found, to tell whether the link has been idle since (see `quiet`). */
  private last: { readonly delivered: number; readonly standby: boolean; readonly idle: boolean; readonly stream: ListedStream | undefined; readonly reading: BacklogReading } | undefined;
  /** Polls that may still skip reading while the link stays as its last reading found it. */
  private quietLeft = 0;
  /** The first quiet stretch (of the link's own phase) is over. */
  private phased = false;

  constructor(private readonly deps: BacklogPollDeps) {}

  start(): void {
    // On the relay's shared grid: every link polls in the same timer callback, nothing allocated to
    // schedule it, and their requests leave together. A poll still reading skips the tick.
    this.unsubscribe = this.deps.ticks.every(this.deps.intervalMs, () => this.tick());
    this.leaveListing ??= this.deps.listing?.join();
  }

  stop(): void {
    this.unsubscribe?.();
    this.leaveListing?.();
  }

  /**
   * Whether the link should be moving now if the source has messages for it: it owns the link, is not
   * resyncing or throttled (inFlightBytes reached, or held by its rate cap), nothing holds it back
   * (guard, destination, a refused message, an operator's pause: troubles of their own) and the relay
   * holds nothing (a full pipeline waits for its destination, not its source).
   */
  private stallEligible(): boolean {
    const { ownership, lease, resyncs, window, loop, pipeline, health } = this.deps;
    if (ownership.standby || !lease.valid() || resyncs.running || window.throttled || !loop.pulled) return false;
    if (pipeline.size > 0) return false;
    return health.nothingButStalled();
  }

  /**
   * Nothing can have changed for the link since its last reading, so this poll need not read the source
   * (a consumer-info and a stream-info request): that reading found nothing owed and nothing held, it has
   * delivered nothing since, holds nothing, has no trouble and is not resyncing; or it is a standby
   * (its readings are for `/status`). Such a link reads every IDLE_POLL_EVERY polls: a thousand idle
   * links cost a fifth of the requests. A message that arrives is delivered and ends the quiet at once;
   * one that a stuck consumer does not deliver is seen by the next reading (stall by progress counts from
   * there: `stallAfter` plus at most IDLE_POLL_EVERY polls). The links of a relay poll on one grid, so
   * each starts its first quiet stretch at a phase of its own (from its name): a fifth of the idle links
   * read at each tick, not all of them every fifth.
   */
  private quiet(): boolean {
    const d = this.deps;
    const last = this.last;
    if (last === undefined || this.quietLeft <= 0) return false;
    if (last.standby !== d.ownership.standby) return false;
    const quiet = d.ownership.standby || this.atRest();
    if (quiet) this.quietLeft--;
    return quiet;
  }

  /** The owner's last reading found nothing owed and nothing held, and nothing has happened since (see `quiet`). */
  private atRest(): boolean {
    const d = this.deps;
    const last = this.last;
    if (last === undefined || last.standby || d.ownership.standby || !last.idle) return false;
    return d.loop.delivered === last.delivered && d.pipeline.size === 0 && !d.resyncs.running && d.destinationCheck.known && d.health.nothingButStalled() && !d.health.has("stalled");
  }

  /**
   * The owner at rest, its turn to read: the source's stream listing (one for every link on the source,
   * taken this poll) shows its stream as its last reading found it — nothing stored, removed (a gap would
   * move the first sequence) or consumed anew, its consumer still there — so this reading would find
   * what the last one did, and it is not taken. Anything else (the stream changed or is not listed, the
   * listing failed, the link delivered meanwhile) and the link reads as before.
   */
  private async unchangedAtRest(): Promise<boolean> {
    const { listing, config, intervalMs } = this.deps;
    const last = this.last;
    if (listing === undefined || last?.stream === undefined || !this.atRest()) return false;
    const states = await listing.states(intervalMs / 2).catch(() => undefined);
    return states !== undefined && this.last === last && this.atRest() && unchanged(states.get(config.from.stream), last.stream);
  }

  /** A reading came back: how many polls may skip reading now (see `quiet`). */
  private readingTaken(): void {
    this.quietLeft = this.phased ? IDLE_POLL_EVERY - 1 : phaseOf(this.deps.config.name);
    this.phased = true;
  }

  private tick(): void {
    if (this.deps.signal.aborted) return this.stop(); // the link failed or stops: no more polls
    if (this.polling) return;
    this.polling = true;
    this.pollOnce();
  }

  /** One poll: reads the source unless the link is quiet; `polling` until it has finished. */
  private pollOnce(): void {
    if (this.quiet()) return this.quietDone();
    if (this.deps.listing === undefined || !this.atRest()) return this.read();
    this.unchangedAtRest().then(
      (same) => {
        const last = this.last;
        if (this.deps.signal.aborted) return void (this.polling = false); // stopped meanwhile: no reading
        if (!same || last === undefined) return this.read();
        this.readingTaken();
        // `/status` shows the reading as confirmed now (what a reading would have found).
        this.deps.reading({ ...last.reading, at: new Date().toISOString() });
        this.quietDone();
      },
      () => this.read(),
    );
  }

  /** A poll without a reading: what every poll does besides. */
  private quietDone(): void {
    const d = this.deps;
    d.guardWatch.poll();
    d.pipeline.resume();
    d.health.refresh();
    this.polling = false;
  }

  /** A poll's reading of the source (a consumer-info and a stream-info request), and what follows from it. */
  private read(): void {
    const d = this.deps;
    const name = d.config.name;
    const delivered = d.loop.delivered;
    const standby = d.ownership.standby;
    d.probe
      .read()
      .then(async (reading) => {
        const stream = reading.streamConsumers === undefined ? undefined : { firstSeq: reading.streamFirstSeq, lastSeq: reading.streamLastSeq, messages: reading.streamMessages, consumers: reading.streamConsumers };
        this.last = { delivered, standby, idle: reading.messages === 0 && d.pipeline.size === 0, stream, reading };
        this.readingTaken();
        // A reading that comes back after stop() writes nothing: a removed link's series stay gone.
        if (d.signal.aborted) return;
        // Unknown, or changed and not readable yet (deleted): read again every poll.
        if (!d.destinationCheck.known || d.pipeline.destinationHeld) await d.destinationCheck.recheck();
        if (d.signal.aborted) return;
        d.pipeline.keepAlive();
        d.metrics.inFlightBytes.set({ link: name }, d.pipeline.bytes);
        d.window.holding(d.pipeline.size, d.pipeline.bytes);
        d.reading(reading);
        const labels = { link: name };
        d.metrics.backlogMessages.set(labels, reading.messages);
        d.metrics.backlogAge.set(labels, reading.ageSeconds);
        d.inspector.observeClock(reading.clockOffsetMs);
        if (d.health.has("source")) d.health.clear("source");
        d.stallWatch.observe(reading, d.loop.delivered, this.stallEligible());
        if (!d.ownership.standby && d.lease.valid() && !d.resyncs.running) {
          d.window.observe({
            held: d.pipeline.size,
            heldBytes: d.pipeline.bytes,
            // Published and waiting for the PubAck, or all of it while the destination fails or refuses.
            awaitingDestination: d.health.has("dest") || d.health.has("refused") ? d.pipeline.size : d.publisher.inFlight,
            sourcePending: reading.pending,
            pushedBack: d.pipeline.pushedBack,
          });
        }
        // Missed heartbeats said stalled: the source answers again and has nothing for the link.
        if (d.health.has("stalled") && d.stallWatch.stalled === undefined && reading.pending === 0) d.health.clear("stalled");
        // Connected again with nothing left to publish: no PubAck will come to say so.
        if (d.health.has("dest") && d.watch.destConnected && d.destinationCheck.known && d.pipeline.size === 0) d.health.clear("dest");
        // A refusal is about a message held; with none held (published since, or dropped for another
        // owner), nothing is refused now.
        if (d.health.has("refused") && d.pipeline.size === 0) d.health.clear("refused");
        // Only the owner acts on a reading: a standby's would be queued and run, stale, when it takes over.
        if (!d.resyncs.running && !d.ownership.standby && d.lease.valid()) d.inspector.inspect(reading);
        d.health.refresh();
        d.catchUpLog.observe(d.state(), reading);
      })
      .catch((err: unknown) => {
        this.last = undefined; // read again at the next poll
        // The consumer's deletion is not always announced to a running pull (no pull request open at
        // that moment); the probe sees it within a second, and the loop places a new cursor.
        if (isApiCode(err, JetStreamApiCodes.ConsumerNotFound) && d.loop.pulled && !d.resyncs.running) {
          d.health.trouble("source", new RelayError(ErrorCodes.STREAM_NOT_FOUND, `source consumer ${d.config.durableName} not found`));
          d.loop.stopPulling();
        }
        d.logger.debug({ err: toRelayError(err).message }, "backlog probe failed");
      })
      .finally(() => {
        d.guardWatch.poll();
        d.pipeline.resume();
        // A relay in standby has no consumer to read: its state follows the lease (who holds it).
        if (d.ownership.standby) d.health.refresh();
        this.polling = false;
      });
  }
}
