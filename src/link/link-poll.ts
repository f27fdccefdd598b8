/**
 * A link's poll (moved out of link.ts as it was): every poll interval it reads the source's backlog
 * and acts on the reading — the destination recheck, keep-alives, the window and its byte bound, the
 * stall watch, gaps and the link's state — then schedules the next one.
 */
import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import type { LinkLease } from "../group/lease.js";
import { isApiCode } from "../nats/durable-consumer.js";
import type { JetStreamPublisher } from "../nats/publisher.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { BacklogProbe, BacklogReading } from "./backlog.js";
import type { ConsumeLoop } from "./consume-loop.js";
import type { DestinationCheck } from "./destination-check.js";
import type { GuardWatch } from "./guard-watch.js";
import type { LinkHealth } from "./link-health.js";
import type { LinkStateMachine } from "./link-state.js";
import type { LinkWatch } from "./link-watch.js";
import type { LinkWindow } from "./link-window.js";
import type { Ownership } from "./ownership.js";
import type { Pipeline } from "./pipeline.js";
import type { CatchUpLog } from "./progress-log.js";
import type { ResyncRunner } from "./resync-runner.js";
import type { SourceInspector } from "./source-inspector.js";
import type { StallWatch } from "./stall-watch.js";

/** The parts of a link its poll reads and drives (link.ts wires them). */
export interface LinkPollParts {
  readonly name: string;
  readonly durableName: string;
  readonly intervalMs: number;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  readonly lease: Pick<LinkLease, "valid">;
  readonly probe: Pick<BacklogProbe, "read">;
  readonly destinationCheck: Pick<DestinationCheck, "known" | "recheck">;
  readonly pipeline: Pick<Pipeline, "destinationHeld" | "keepAlive" | "bytes" | "size" | "resume">;
  readonly window: Pick<LinkWindow, "holding" | "observe" | "throttled">;
  readonly inspector: Pick<SourceInspector, "observeClock" | "inspect">;
  readonly health: Pick<LinkHealth, "has" | "clear" | "trouble" | "refresh" | "nothingButStalled">;
  readonly stallWatch: Pick<StallWatch, "observe" | "stalled">;
  readonly loop: Pick<ConsumeLoop, "delivered" | "pulled" | "stopPulling">;
  readonly ownership: Pick<Ownership, "standby">;
  readonly resyncs: Pick<ResyncRunner, "running">;
  readonly publisher: Pick<JetStreamPublisher, "inFlight">;
  readonly watch: Pick<LinkWatch, "destConnected">;
  readonly guardWatch: Pick<GuardWatch, "poll">;
  readonly catchUpLog: Pick<CatchUpLog, "observe">;
  readonly state: Pick<LinkStateMachine, "state">;
  /** Keeps the reading (status and health read it). */
  backlog(reading: BacklogReading): void;
}

export class LinkPoll {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly p: LinkPollParts) {}

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
  }

  /**
   * Whether the link should be moving now if the source has messages for it: it owns the link, is not
   * resyncing or throttled (inFlightBytes reached, or held by its rate cap), nothing holds it back (guard,
   * destination, a refused message: troubles of their own) and the relay holds nothing (a full pipeline
   * waits for its destination, not its source).
   */
  stallEligible(): boolean {
    const p = this.p;
    if (p.ownership.standby || !p.lease.valid() || p.resyncs.running || p.window.throttled || !p.loop.pulled) return false;
    if (p.pipeline.size > 0) return false;
    return p.health.nothingButStalled();
  }

  schedule(): void {
    const p = this.p;
    if (p.signal.aborted) return;
    this.timer = setTimeout(() => {
      p.probe
        .read()
        .then(async (reading) => {
          // A reading that comes back after stop() writes nothing: a removed link's series stay gone.
          if (p.signal.aborted) return;
          // Unknown, or changed and not readable yet (deleted): read again every poll.
          if (!p.destinationCheck.known || p.pipeline.destinationHeld) await p.destinationCheck.recheck();
          if (p.signal.aborted) return;
          p.pipeline.keepAlive();
          p.metrics.inFlightBytes.set({ link: p.name }, p.pipeline.bytes);
          p.window.holding(p.pipeline.size, p.pipeline.bytes);
          p.backlog(reading);
          const labels = { link: p.name };
          p.metrics.backlogMessages.set(labels, reading.messages);
          p.metrics.backlogAge.set(labels, reading.ageSeconds);
          p.inspector.observeClock(reading.clockOffsetMs);
          if (p.health.has("source")) p.health.clear("source");
          p.stallWatch.observe(reading, p.loop.delivered, this.stallEligible());
          if (!p.ownership.standby && p.lease.valid() && !p.resyncs.running) {
            p.window.observe({
              held: p.pipeline.size,
              heldBytes: p.pipeline.bytes,
              // Published and waiting for the PubAck, or all of it while the destination fails or refuses.
              awaitingDestination: p.health.has("dest") || p.health.has("refused") ? p.pipeline.size : p.publisher.inFlight,
              sourcePending: reading.pending,
            });
          }
          // Missed heartbeats said stalled: the source answers again and has nothing for the link.
          if (p.health.has("stalled") && p.stallWatch.stalled === undefined && reading.pending === 0) p.health.clear("stalled");
          // Connected again with nothing left to publish: no PubAck will come to say so.
          if (p.health.has("dest") && p.watch.destConnected && p.destinationCheck.known && p.pipeline.size === 0) p.health.clear("dest");
          // A refusal is about a message held; with none held (published since, or dropped for another
          // owner), nothing is refused now.
          if (p.health.has("refused") && p.pipeline.size === 0) p.health.clear("refused");
          // Only the owner acts on a reading: a standby's would be queued and run, stale, when it takes over.
          if (!p.resyncs.running && !p.ownership.standby && p.lease.valid()) p.inspector.inspect(reading);
          p.health.refresh();
          p.catchUpLog.observe(p.state.state, reading);
        })
        .catch((err: unknown) => {
          // The consumer's deletion is not always announced to a running pull (no pull request open at
          // that moment); the probe sees it within a second, and the loop places a new cursor.
          if (isApiCode(err, JetStreamApiCodes.ConsumerNotFound) && p.loop.pulled && !p.resyncs.running) {
            p.health.trouble("source", new RelayError(ErrorCodes.STREAM_NOT_FOUND, `source consumer ${p.durableName} not found`));
            p.loop.stopPulling();
          }
          p.logger.debug({ err: toRelayError(err).message }, "backlog probe failed");
        })
        .finally(() => {
          p.guardWatch.poll();
          p.pipeline.resume();
          // A relay in standby has no consumer to read: its state follows the lease (who holds it).
          if (p.ownership.standby) p.health.refresh();
          this.schedule();
        });
    }, p.intervalMs);
    this.timer.unref();
  }
}
