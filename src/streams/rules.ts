/** Helpers of the plan rules (diff.ts, destination.ts). Pure. */
import { formatDuration } from "../config/durations.js";
import { intersects, isSubsetOf } from "../protocol/subjects.js";
import type { Change, ExistingStream, ItemStatus } from "./types.js";

export interface DiffOptions {
  readonly force: boolean;
}

export function list(values: readonly string[]): string {
  return values.length === 0 ? "(none)" : values.join(", ");
}

/** `version` is at least major.minor; false when unknown. */
export function serverAtLeast(version: string | undefined, major: number, minor: number): boolean {
  const m = /^v?(\d+)\.(\d+)/.exec(version ?? "");
  if (!m) return false;
  const [ma, mi] = [Number(m[1]), Number(m[2])];
  return ma > major || (ma === major && mi >= minor);
}

/** Two patterns of the list that overlap without one containing the other: the server refuses such a list. */
export function partialOverlap(patterns: readonly string[]): { a: string; b: string } | undefined {
  for (let i = 0; i < patterns.length; i++) {
    for (let j = i + 1; j < patterns.length; j++) {
      const a = patterns[i] as string;
      const b = patterns[j] as string;
      if (a !== b && intersects(a, b) && !isSubsetOf(a, b) && !isSubsetOf(b, a)) return { a, b };
    }
  }
  return undefined;
}

/** `existing` with `added`: an existing pattern an added one contains is replaced by it (one stream cannot list both). */
export function addSubjects(existing: readonly string[], added: readonly string[]): string[] {
  return [
    ...existing.filter((e) => !added.some((m) => m !== e && isSubsetOf(e, m))),
    ...added.filter((m) => !existing.includes(m)),
  ];
}

/**
 * The worst that applies: blocked (a needed change cannot be made), refused (a needed change waits for
 * --force), update (something to change), ok.
 */
export function statusOf(changes: readonly Change[], force: boolean): ItemStatus {
  if (changes.some((c) => c.required && c.rule === "impossible")) return "blocked";
  if (changes.some((c) => c.required && c.rule === "force" && !force)) return "refused";
  if (changes.some((c) => c.rule === "safe" || (c.rule === "force" && force))) return "update";
  return "ok";
}

export function describeExisting(s: ExistingStream): string {
  const age = s.maxAgeMs > 0 ? `, max age ${formatDuration(s.maxAgeMs)}` : "";
  const window = s.duplicateWindowMs > 0 ? formatDuration(s.duplicateWindowMs) : "none";
  return `exists: subjects ${list(s.subjects)}, ${s.retention} retention, ${s.storage}, duplicate window ${window}${age}, ${s.replicas} replica(s), ${s.messages} message(s)`;
}
