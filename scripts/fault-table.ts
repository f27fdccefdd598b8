/**
 * Prints the fault tests' reports (JSON lines written by recordRow) as a markdown table:
 *   tsx scripts/fault-table.ts FILE
 */
import { readFile } from "node:fs/promises";
import type { FaultReport } from "../test/faults/checker.js";

const COLUMNS = [
  "fault",
  "messages",
  "lost",
  "duplicated",
  "reordered",
  "reordered/subject",
  "versions regressed",
  "worst /healthz ms",
];

function row(r: FaultReport): string[] {
  const worst = r.liveness
    ? `${r.liveness.worstMs}${r.liveness.failures > 0 ? ` (${r.liveness.failures} failed)` : ""}`
    : "-";
  return [
    r.fault,
    r.messages,
    r.lost,
    r.duplicated,
    r.reordered,
    r.reorderedBySubject,
    r.versionsRegressed,
    worst,
  ].map(String);
}

async function main(): Promise<void> {
  const file = process.argv[2];
  if (!file) throw new Error("usage: tsx scripts/fault-table.ts REPORT.jsonl");
  const text = await readFile(file, "utf8");
  const reports = text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as FaultReport);
  if (reports.length === 0) {
    console.log("(no fault reports were recorded)");
    return;
  }
  const cell = (s: string) => s.replace(/\|/g, "\\|");
  console.log(`| ${COLUMNS.join(" | ")} |`);
  console.log(`| ${COLUMNS.map((_c, i) => (i === 0 ? "---" : "---:")).join(" | ")} |`);
  for (const r of reports) console.log(`| ${row(r).map(cell).join(" | ")} |`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
