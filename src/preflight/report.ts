/**
 * Prints a preflight report: one table per link (CHECK | RESULT | DETAIL, with the fix on the
 * line below a warning or an error), then a summary line.
 *
 *   link a-to-b: a/ORDERS -> b/ORDERS (broker dedup only)
 *     CHECK                 RESULT   DETAIL
 *     source region         ok       a: connected to 127.0.0.1:4222
 *     duplicate window      warning  duplicate window 10s < replay horizon 2m = ...
 *                                    fix: jetstream-relay streams apply --config <your config> --region b
 */
import type { CheckResult, Level } from "./checks.js";
import type { PreflightReport } from "./preflight.js";
import { plural } from "../text/plural.js";

const HEADER = ["CHECK", "RESULT", "DETAIL"] as const;

export function formatLinkTable(rows: readonly CheckResult[]): string[] {
  const nameWidth = Math.max(HEADER[0].length, ...rows.map((r) => r.name.length));
  const levelWidth = Math.max(HEADER[1].length, ...rows.map((r) => r.level.length));
  const line = (name: string, level: string, detail: string): string =>
    `  ${name.padEnd(nameWidth)}  ${level.padEnd(levelWidth)}  ${detail}`.trimEnd();
  const out = [line(HEADER[0], HEADER[1], HEADER[2])];
  for (const r of rows) {
    out.push(line(r.name, r.level, r.detail));
    if (r.fix && (r.level === "warning" || r.level === "error")) out.push(line("", "", `fix: ${r.fix}`));
  }
  return out;
}

export function countLevels(report: PreflightReport): Record<Level, number> {
  const counts: Record<Level, number> = { ok: 0, warning: 0, error: 0, skipped: 0 };
  for (const l of report.links) for (const r of l.rows) counts[r.level]++;
  return counts;
}

export function formatReport(report: PreflightReport): string {
  const out: string[] = [];
  for (const { link, rows } of report.links) {
    const guard = link.guard ? `guard ${link.guard.store.kind}` : "broker dedup only";
    const filter = link.from.filterSubject ? ` filter ${link.from.filterSubject}` : "";
    out.push(
      "",
      `link ${link.name}: ${link.from.region}/${link.from.stream}${filter} -> ${link.to.region}/${link.to.stream} (${guard})`,
    );
    out.push(...formatLinkTable(rows));
  }
  const c = countLevels(report);
  const skipped = c.skipped > 0 ? `, ${c.skipped} skipped` : "";
  out.push(
    "",
    `live check: ${plural(report.links.length, "link")}, ${plural(c.error, "error")}, ${plural(c.warning, "warning")}${skipped}`,
  );
  return out.join("\n");
}
