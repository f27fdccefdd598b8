/**
 * What `jetstream-relay repair` did (or, with `--dry-run`, would do), and how it is printed. Secrets
 * never appear here: regions, streams, ids, sequences, entities and versions only, never payloads.
 */

export type { RepairItem, RepairOutcome } from "../audit/put-back.js";
export { REPAIR_OUTCOMES } from "../audit/put-back.js";
import type { RepairItem, RepairOutcome } from "../audit/put-back.js";
import { REPAIR_OUTCOMES } from "../audit/put-back.js";

export interface RepairResult {
  readonly link: string;
  readonly source: { readonly region: string; readonly stream: string };
  readonly destination: { readonly region: string; readonly stream: string };
  /** The guard repair went through (`memory`: the relay's own, which repair cannot reach: none used). */
  readonly guard: "none" | "memory" | "redis";
  /** The link has guard.versions: the guard refuses stale versions. */
  readonly versions: boolean;
  readonly fromSeq?: number;
  readonly toSeq?: number;
  /** Missing source messages verify found (over the whole link). */
  readonly missing: number;
  /** Of those, outside --from-seq/--to-seq: left alone. */
  readonly outsideRange: number;
  readonly dryRun: boolean;
  /** The missing messages in range, in source order: the plan, with outcomes after a real run. */
  readonly items: readonly RepairItem[];
  /** A guard commit failed after the destination stored messages: they are repaired, the guard does not know it. */
  readonly guardCommitError?: string;
  readonly elapsedMs: number;
}

/** Outcome counts (every outcome, 0 when none). */
export function repairCounts(r: RepairResult): Record<RepairOutcome, number> {
  const counts = Object.fromEntries(REPAIR_OUTCOMES.map((o) => [o, 0])) as Record<RepairOutcome, number>;
  for (const item of r.items) if (item.outcome) counts[item.outcome]++;
  return counts;
}

/**
 * 0: nothing left that repair can do: every planned message was repaired or refused as stale (final:
 * the destination holds a newer version of its entity), or nothing was missing, or a dry run. 1: some
 * message could not be repaired now (duplicate window, in flight, gone, failed) or a guard commit
 * failed: run again later, or look at it.
 */
export function repairExitCode(r: RepairResult): number {
  if (r.dryRun) return 0;
  if (r.guardCommitError !== undefined) return 1;
  return r.items.every((i) => i.outcome === "repaired" || i.outcome === "stale") ? 0 : 1;
}

const n = (x: number) => x.toLocaleString("en-US");

function outcomeText(i: RepairItem): string {
  const entity = i.entity !== undefined ? `entity ${i.entity} version ${i.version}` : "";
  switch (i.outcome) {
    case "repaired":
      return `repaired (destination seq ${i.destSeq})`;
    case "stale":
      return `refused stale: ${entity}, the guard holds version ${i.storedVersion ?? "?"}; not published`;
    case "duplicate":
      return `duplicate: ${i.detail ?? "already held"}; not stored`;
    case "in-flight":
      return "in flight: another relay holds its claim in the guard; not published, run again";
    case "gone":
      return "gone from the source (retention or purge); not published";
    case "failed":
      return `failed: ${i.detail ?? "unknown"}`;
    default:
      return "not tried";
  }
}

export function formatRepair(r: RepairResult): string {
  const guard =
    r.guard === "redis"
      ? `redis${r.versions ? ", stale versions refused" : ""}`
      : r.guard === "memory"
        ? "memory (in the relay's own process: repair cannot reach it, so it publishes without a guard)"
        : "none";
  const range =
    r.fromSeq !== undefined || r.toSeq !== undefined
      ? ` (${n(r.items.length)} in source seq ${r.fromSeq ?? 1}..${r.toSeq ?? "end"}, ${n(r.outsideRange)} outside)`
      : "";
  const lines = [
    `repair link ${r.link}: ${r.source.region}/${r.source.stream} -> ${r.destination.region}/${r.destination.stream} (guard: ${guard})`,
    `verify: ${n(r.missing)} missing${range}`,
  ];
  if (r.items.length === 0) {
    lines.push("", "nothing to repair", "", `result: nothing to do (${(r.elapsedMs / 1000).toFixed(1)} s)`);
    return lines.join("\n");
  }
  if (r.dryRun) {
    lines.push(
      "",
      `plan: publish ${n(r.items.length)} missing source messages into ${r.destination.region}/${r.destination.stream}, ` +
        "in source order, with Relay-Repair: true" +
        (r.guard === "redis" ? ", each claimed in the guard first" : ""),
      ...r.items.map((i) => `  ${i.id} (source seq ${i.sourceSeq})`),
      "",
      `result: dry run, nothing published (${(r.elapsedMs / 1000).toFixed(1)} s)`,
    );
    return lines.join("\n");
  }
  lines.push("", ...r.items.map((i) => `  ${i.id} (source seq ${i.sourceSeq}): ${outcomeText(i)}`));
  if (r.guardCommitError !== undefined) {
    lines.push(
      "",
      `guard commit failed: ${r.guardCommitError} (the repaired messages are stored; the guard does not hold them as applied)`,
    );
  }
  const c = repairCounts(r);
  lines.push(
    "",
    `result: ${n(c.repaired)} repaired, ${n(c.stale)} refused stale, ${n(c.duplicate)} duplicate, ` +
      `${n(c["in-flight"])} in flight, ${n(c.gone)} gone from the source, ${n(c.failed)} failed ` +
      `(${(r.elapsedMs / 1000).toFixed(1)} s)`,
  );
  return lines.join("\n");
}
