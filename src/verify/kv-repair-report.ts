/**
 * What `jetstream-relay repair --kv` did (or, with `--dry-run`, would do), and how it is printed: keys,
 * versions, operations and sequences only, never a value.
 */
import type { KvDifferenceKind, KvOp, KvSideName } from "./kv-compare.js";

/**
 * `repaired`: the winner is now on the other side too. `changed`: a write landed on the key since the
 * read (on either side): nothing overwritten, verify again. `undecided`: no winner (a same-version
 * conflict, an unreadable version): left alone. `failed`: reading or writing failed (`detail`).
 */
export type KvRepairOutcome = "repaired" | "changed" | "undecided" | "failed";

export const KV_REPAIR_OUTCOMES: readonly KvRepairOutcome[] = ["repaired", "changed", "undecided", "failed"];

/** One difference: planned, then (unless a dry run) what happened to it. */
export interface KvRepairItem {
  readonly key: string;
  readonly kind: KvDifferenceKind;
  /** The side whose entry is put on the other (absent: no winner). */
  readonly winner?: KvSideName;
  readonly target?: KvSideName;
  /** The winner's version (`<ns> <region>`) and operation. */
  readonly version?: string;
  readonly op?: KvOp;
  outcome?: KvRepairOutcome;
  /** Where the target bucket's stream stored the copy (`repaired`). */
  seq?: number;
  detail?: string;
}

export interface KvRepairResult {
  readonly link: string;
  readonly from: { readonly region: string; readonly bucket: string };
  readonly to: { readonly region: string; readonly bucket: string };
  /** Keys held by either side, and how many of them differed when repair compared them. */
  readonly keys: number;
  readonly differences: number;
  readonly dryRun: boolean;
  /** Every difference, keys sorted: the plan, with outcomes after a real run. */
  readonly items: readonly KvRepairItem[];
  readonly elapsedMs: number;
}

export function kvRepairCounts(r: KvRepairResult): Record<KvRepairOutcome, number> {
  const counts = Object.fromEntries(KV_REPAIR_OUTCOMES.map((o) => [o, 0])) as Record<KvRepairOutcome, number>;
  for (const item of r.items) if (item.outcome) counts[item.outcome]++;
  return counts;
}

/**
 * 0: nothing left to do (every difference repaired, none found, or a dry run). 1: some key changed
 * meanwhile, has no winner, or failed: verify again, or look at it.
 */
export function kvRepairExitCode(r: KvRepairResult): number {
  if (r.dryRun) return 0;
  return r.items.every((i) => i.outcome === "repaired") ? 0 : 1;
}

const n = (x: number) => x.toLocaleString("en-US");

export function formatKvRepair(r: KvRepairResult): string {
  const sideText = (s: KvSideName) => {
    const side = r[s];
    return `${side.region}/${side.bucket}`;
  };
  const plan = (i: KvRepairItem) =>
    i.winner === undefined || i.target === undefined
      ? `${i.kind}, no winner`
      : `${i.kind}: put ${i.op === "PUT" ? "the value" : `the tombstone ${i.op ?? "?"}`} of version ${i.version ?? "?"} from ${sideText(i.winner)} into ${sideText(i.target)}`;
  const outcome = (i: KvRepairItem) => {
    switch (i.outcome) {
      case "repaired":
        return `repaired (seq ${i.seq ?? "?"})`;
      case "changed":
        return `changed: ${i.detail ?? "a write landed since the read"}`;
      case "undecided":
        return `undecided: ${i.detail ?? "no winner"}`;
      case "failed":
        return `failed: ${i.detail ?? "unknown"}`;
      default:
        return "not tried";
    }
  };
  const lines = [
    `repair link ${r.link} (KV): ${sideText("from")} <-> ${sideText("to")}`,
    `verify: ${n(r.keys)} keys, ${n(r.differences)} differences`,
  ];
  const elapsed = `${(r.elapsedMs / 1000).toFixed(1)} s`;
  if (r.items.length === 0) {
    lines.push("", "nothing to repair", "", `result: nothing to do (${elapsed})`);
    return lines.join("\n");
  }
  if (r.dryRun) {
    lines.push(
      "",
      "plan: each winner written on the other side only if that side's key is still as read (Nats-Expected-Last-Subject-Sequence), with Relay-KV-Version and Relay-Repair: true",
      ...r.items.map((i) => `  ${i.key}: ${plan(i)}`),
      "",
      `result: dry run, nothing written (${elapsed})`,
    );
    return lines.join("\n");
  }
  lines.push("", ...r.items.map((i) => `  ${i.key}: ${plan(i)}: ${outcome(i)}`));
  const c = kvRepairCounts(r);
  lines.push("", `result: ${n(c.repaired)} repaired, ${n(c.changed)} changed meanwhile, ${n(c.undecided)} undecided, ${n(c.failed)} failed (${elapsed})`);
  return lines.join("\n");
}
