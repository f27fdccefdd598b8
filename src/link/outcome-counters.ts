import { CORRECTION_KINDS, MESSAGE_OUTCOMES } from "../observability/metrics.js";
import type { CorrectionKind, MessageOutcome, RelayMetrics } from "../observability/metrics.js";

/** A bound counter series as prom-client hands it out. */
interface Series {
  inc(value?: number): void;
}

/**
 * Increments of one series, added to it once per turn rather than once per message: prom-client hashes
 * the labels of a bound series on every call, and a link finishes thousands of messages per turn at
 * full speed. The sum is added in a microtask queued by the first increment of the turn, so it is in
 * the series before anything else (a scrape, a timer, an awaited read) runs.
 */
class TurnCounter {
  private pending = 0;

  constructor(private readonly series: Series) {}

  inc(): void {
    if (this.pending++ === 0) queueMicrotask(this.flush);
  }

  private readonly flush = (): void => {
    const n = this.pending;
    this.pending = 0;
    this.series.inc(n);
  };
}

/**
 * The per-message metric series of one link, bound once. Binding makes every outcome series exist (at 0)
 * from the start, so rate() and the correction-ratio alert see them before the first event, and spares
 * building a label object per message (prom-client 15 still hashes the labels on every bound call).
 */
export function outcomeCounters(metrics: RelayMetrics, link: string) {
  const messages = Object.fromEntries(MESSAGE_OUTCOMES.map((o) => [o, metrics.messages.labels({ link, outcome: o })]));
  const corrections = Object.fromEntries(CORRECTION_KINDS.map((k) => [k, metrics.corrections.labels({ link, kind: k })]));
  for (const c of [...Object.values(messages), ...Object.values(corrections)]) c.inc(0);
  const perTurn = <K extends string>(series: Record<string, Series>) => Object.fromEntries(Object.entries(series).map(([k, c]) => [k, new TurnCounter(c)])) as Record<K, TurnCounter>;
  return {
    messages: perTurn<MessageOutcome>(messages),
    corrections: perTurn<CorrectionKind>(corrections),
    replayAge: metrics.replayAge.labels({ link }),
    publishDuration: metrics.publishDuration.labels({ link }),
  };
}

export type OutcomeCounters = ReturnType<typeof outcomeCounters>;
