/**
 * What an audit pass found, counted, logged and summed into the audit's state: missing messages (an
 * error, with source seqs and ids), extra copies, copies out of order and versions going backwards
 * (warnings), and the expected differences by kind. Ids and sequences only, never payloads.
 */
import type { Logger } from "pino";
import type { RelayMetrics } from "../observability/metrics.js";
import type { AuditState, Finding } from "./audit-state.js";
import type { GapVerdict } from "./gaps.js";
import type { CopyOrder, RangeRecord } from "./range-record.js";
import { EXAMPLES } from "./range-record.js";

export type Pass = "range" | "sweep";

export function recordFindings(
  deps: { readonly metrics: RelayMetrics; readonly logger: Logger; readonly link: string; readonly now: () => number },
  state: AuditState,
  pass: Pass,
  record: RangeRecord,
  verdict: GapVerdict,
  order: ReturnType<CopyOrder["take"]>,
  checked = record.to - record.from,
): Finding[] {
  const { metrics, logger } = deps;
  const label = { link: deps.link };
  metrics.auditChecked.inc(label, checked);
  state.totals.checked += checked;
  for (const [kind, n] of verdict.expected) if (n > 0) metrics.auditExpected.inc({ ...label, kind }, n);
  const at = new Date(deps.now()).toISOString();
  const findings: Finding[] = [];
  const missing = verdict.missing;
  if (missing.length > 0) {
    metrics.auditMissing.inc(label, missing.length);
    state.totals.missing += missing.length;
    const shown = missing.slice(0, EXAMPLES);
    const sourceSeqs = shown.map((m) => m.sourceSeq);
    const ids = shown.map((m) => m.id);
    findings.push({ at, kind: "missing", count: missing.length, sourceSeqs, ids, pass });
    logger.error({ auditPass: pass, count: missing.length, sourceSeqs, ids }, "audit found messages missing from the destination");
  }
  if (record.extra > 0) {
    metrics.auditExtra.inc(label, record.extra);
    state.totals.extra += record.extra;
    const ex = record.extraExamples;
    findings.push({ at, kind: "extra", count: record.extra, sourceSeqs: ex.map((e) => e.sourceSeq), ids: ex.map((e) => e.id), pass });
    logger.warn({ auditPass: pass, count: record.extra, examples: ex }, "audit found extra copies in the destination");
  }
  if (order.reordered > 0) {
    metrics.auditReordered.inc(label, order.reordered);
    state.totals.reordered += order.reordered;
    findings.push({ at, kind: "reordered", count: order.reordered, sourceSeqs: order.reorderExamples.map((e) => e.sourceSeq), pass });
    logger.warn({ auditPass: pass, count: order.reordered, examples: order.reorderExamples }, "audit found copies out of source order");
  }
  if (order.backwards > 0) {
    metrics.auditBackwards.inc(label, order.backwards);
    state.totals.backwards += order.backwards;
    findings.push({ at, kind: "backwards", count: order.backwards, sourceSeqs: [], pass });
    logger.warn({ auditPass: pass, count: order.backwards, examples: order.backwardExamples }, "audit found entity versions going backwards");
  }
  const first = findings[0];
  if (first) state.lastFinding = first;
  metrics.auditPasses.inc({ ...label, kind: pass, outcome: findings.length > 0 ? "findings" : "clean" });
  logger.debug({ auditPass: pass, fromSeq: record.from + 1, toSeq: record.to }, "audit pass done");
  return findings;
}
