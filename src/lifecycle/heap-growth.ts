/**
 * How far V8 lets the old generation grow past what its last full collection kept (a relay process).
 *
 * V8 sizes the old generation's next limit as the live size times a factor it picks from the ratio of
 * allocation to collection speed: up to 4 for a process that allocates steadily and collects fast. A
 * relay with a thousand idle links is that process: about 100 MB live, and the old generation grows to
 * 250-300 MB (its RSS to 400-500 MB) before the next full collection, most of it objects that lived a few
 * seconds (pull requests, lease renewals, requests in flight). A fixed factor of 1 + HEAP_GROWING_PERCENT
 * / 100 holds the old generation near the live size: a full collection of ~100 MB every 15-30 s at rest
 * instead of every minute or two, a point or so of a core at 1,000 links (docs/benchmarks.md). Unlike
 * `--max-old-space-size` it is no ceiling: a relay whose live set grows (backlogs in flight) grows with
 * it, no more collections than it needs.
 *
 * A `--heap-growing-percent` given to node (the command line) is kept as it is (0: V8's own choice).
 */
import { setFlagsFromString } from "node:v8";

export const HEAP_GROWING_PERCENT = 50;

/** Sets V8's heap growing factor unless node was given one; whether it did. */
export function boundHeapGrowth(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((a) => /^--heap[-_]growing[-_]percent\b/.test(a))) return false;
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return true;
}
