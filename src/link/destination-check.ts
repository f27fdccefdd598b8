/**
 * The link's check of its destination stream: read before publishing (its limits, the subjects it binds,
 * its retention), and read again after every change announced while the link runs, holding publishing
 * until a reading that began after the latest change says the stream is still fit.
 */
import type { StreamInfo } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { ErrorCodes, toRelayError } from "../errors.js";
import type { RelayError } from "../errors.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { DestinationFacts } from "./pipeline.js";

/** What the check needs of the pipeline. */
export interface DestinationHolder {
  readonly size: number;
  readonly destinationHeld: boolean;
  setDestination(facts: DestinationFacts): void;
  holdDestination(): void;
}

export interface DestinationCheckDeps {
  readonly link: string;
  /** Reads the destination's facts (destination.ts) against the source stream as last read. */
  facts(sourceInfo: StreamInfo | undefined): Promise<DestinationFacts>;
  sourceInfo(): StreamInfo | undefined;
  readonly pipeline: DestinationHolder;
  readonly metrics: Pick<RelayMetrics, "errors">;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  readonly events: {
    /** The destination cannot be read now (missing, unreachable): messages wait. */
    trouble(err: RelayError): void;
    /** The destination was read and nothing is held: no trouble with it. */
    clear(): void;
    /** The destination does not bind the link's subjects or keep what it acknowledges. */
    fail(err: RelayError): void;
  };
}

/** What the link cannot wait out: the stream is not fit for it until someone changes it or the config. */
const FAILS: ReadonlySet<string> = new Set([ErrorCodes.DESTINATION_MISMATCH, ErrorCodes.DESTINATION_RETENTION, ErrorCodes.DESTINATION_UNSUPPORTED, ErrorCodes.ORDER_NOT_SOLE_WRITER]);

export class DestinationCheck {
  private destinationKnown = false;
  /** Changes announced so far: a read that began before the latest one does not end the hold. */
  private destinationChanges = 0;
  private rechecking: Promise<void> | undefined;

  constructor(private readonly deps: DestinationCheckDeps) {}

  /** The destination was read successfully at least once. */
  get known(): boolean {
    return this.destinationKnown;
  }

  /**
   * Reads the destination stream's limits and checks its subjects and retention. A missing stream holds
   * messages in the pipeline (retried by the poll timer); a stream that does not bind the link's subjects,
   * or does not keep what it acknowledges (interest, work queue), or shares it with another writer under
   * `to.order: strict`, fails the link.
   */
  async refresh(): Promise<void> {
    const { pipeline } = this.deps;
    const changes = this.destinationChanges;
    const held = pipeline.destinationHeld;
    try {
      const facts = await this.deps.facts(this.deps.sourceInfo());
      // Changed again while it was read (the recheck reads again), or stopping: this reading decides nothing.
      if (changes !== this.destinationChanges || this.deps.signal.aborted) return;
      pipeline.setDestination(facts);
      if (held) this.deps.logger.info({ stream: facts.stream }, "destination read again after a change: it binds the link's subjects and keeps what it acknowledges; publishing resumes");
      if (!this.destinationKnown && pipeline.size === 0) this.deps.events.clear();
      this.destinationKnown = true;
    } catch (err) {
      const relayErr = toRelayError(err, ErrorCodes.JETSTREAM_API);
      this.deps.metrics.errors.inc({ link: this.deps.link, code: relayErr.code });
      if (FAILS.has(relayErr.code)) return this.deps.events.fail(relayErr);
      this.deps.events.trouble(relayErr);
    }
  }

  /** The destination changed while the link runs (DestinationWatch): hold publishing and read it again. */
  changed(): void {
    if (this.deps.signal.aborted) return;
    this.destinationChanges++;
    this.deps.pipeline.holdDestination();
    void this.recheck();
  }

  /** Reads the destination until a reading began after the latest change; one at a time. */
  recheck(): Promise<void> {
    this.rechecking ??= (async () => {
      try {
        let seen: number;
        do {
          seen = this.destinationChanges;
          await this.refresh();
        } while (seen !== this.destinationChanges && !this.deps.signal.aborted);
      } finally {
        this.rechecking = undefined;
      }
    })();
    return this.rechecking;
  }
}
