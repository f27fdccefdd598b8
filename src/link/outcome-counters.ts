import { CORRECTION_KINDS, MESSAGE_OUTCOMES } from "../observability/metrics.js";
import type { CorrectionKind, MessageOutcome, RelayMetrics } from "../observability/metrics.js";

/**
 * The per-message metric series of one link, bound once. Binding makes every outcome series exist (at 0)
 * from the start, so rate() and the correction-ratio alert see them before the first event, and spares
 * building a label object per message (prom-client 15 still hashes the labels on every bound call).
 */
export function outcomeCounters(metrics: RelayMetrics, link: string) {
  const messages = Object.fromEntries(MESSAGE_OUTCOMES.map((o) => [o, metrics.messages.labels({ link, outcome: o })]));
  const corrections = Object.fromEntries(CORRECTION_KINDS.map((k) => [k, metrics.corrections.labels({ link, kind: k })]));
  for (const c of [...Object.values(messages), ...Object.values(corrections)]) c.inc(0);
  return {
    messages: messages as Record<MessageOutcome, ReturnType<RelayMetrics["messages"]["labels"]>>,
    corrections: corrections as Record<CorrectionKind, ReturnType<RelayMetrics["corrections"]["labels"]>>,
    replayAge: metrics.replayAge.labels({ link }),
    publishDuration: metrics.publishDuration.labels({ link }),
  };
}

export type OutcomeCounters = ReturnType<typeof outcomeCounters>;
