/**
 * What a link's pipeline counts and remembers for /status and the metrics: outcomes and corrections by
 * kind, the last error it met, and the per-message decision logs (built only when debug is on).
 */
import type { Logger } from "pino";
import type { RelayError } from "../../errors.js";
import type { CorrectionKind, MessageOutcome, RelayMetrics } from "../../observability/metrics.js";
import type { Entry } from "../entry.js";
import { outcomeCounters } from "../outcome-counters.js";
import type { OutcomeCounters } from "../outcome-counters.js";

export interface LastError {
  readonly code: string;
  readonly message: string;
  readonly at: string;
}

export class Tally {
  /** The link's per-message series (outcomes, corrections, replay age, publish duration), bound once. */
  readonly counters: OutcomeCounters;
  private readonly label: { link: string };
  private readonly correctionCounts: Record<CorrectionKind, number> = { broker_duplicate: 0, guard_duplicate: 0, stale_version: 0, kv_conflict: 0 };
  private readonly outcomeCounts: Record<MessageOutcome, number> = { relayed: 0, duplicate: 0, stale: 0, loop: 0, dead_lettered: 0 };
  /** The last error the pipeline met (publish, guard, bad message): shown in /status next to the link's own. */
  private lastErrorSeen: LastError | undefined;

  /** `byId`: a held entry with this id (decision logs show its entity and version). */
  constructor(
    private readonly metrics: RelayMetrics,
    link: string,
    private readonly logger: Logger,
    private readonly byId: (id: string) => Entry | undefined,
  ) {
    this.counters = outcomeCounters(metrics, link);
    this.label = { link };
  }

  /** Corrections so far, by kind (also in `relay_corrections_total`): shown in /status. */
  get corrections(): Readonly<Record<CorrectionKind, number>> {
    return this.correctionCounts;
  }

  /** Messages finished since the relay started, by outcome (also in `relay_messages_total`): shown in /status. */
  get outcomes(): Readonly<Record<MessageOutcome, number>> {
    return this.outcomeCounts;
  }

  get lastError(): LastError | undefined {
    return this.lastErrorSeen;
  }

  correct(kind: CorrectionKind): void {
    this.counters.corrections[kind].inc();
    this.correctionCounts[kind]++;
  }

  count(outcome: MessageOutcome): void {
    this.counters.messages[outcome].inc();
    this.outcomeCounts[outcome]++;
    this.metrics.load.finished++;
  }

  recordError(err: RelayError): void {
    this.metrics.errors.inc({ ...this.label, code: err.code });
    this.lastErrorSeen = { code: err.code, message: err.message, at: new Date().toISOString() };
  }

  /** Decision logs are per message: their fields are only built when debug is on. */
  get debugOn(): boolean {
    return this.logger.isLevelEnabled("debug");
  }

  debug(decision: string, id: string, extra: Record<string, unknown>): void {
    if (!this.debugOn) return;
    const entry = this.byId(id);
    this.logger.debug({ decision, id, entity: entry?.identity.entity, version: entry?.identity.version, ...extra }, "decision");
  }
}
