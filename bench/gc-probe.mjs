// Loaded into the profiled relay (`node --import`): counts its garbage collections by kind and the time
// they took, and what its memory was made of when its RSS peaked (sampled every 20 ms: V8's heap by
// space, Buffers and other memory outside the heap), and writes them to GC_PROBE_OUT as JSON when the
// process exits (bench/profile-relay.ts).
import { writeFileSync } from "node:fs";
import { PerformanceObserver, constants } from "node:perf_hooks";
import { getHeapSpaceStatistics } from "node:v8";

const KINDS = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: "scavenges",
  [constants.NODE_PERFORMANCE_GC_MAJOR]: "mark-compacts",
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental marking",
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weak callbacks",
};
const totals = {};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = KINDS[e.detail?.kind] ?? "other";
    totals[kind] ??= { count: 0, ms: 0 };
    totals[kind].count++;
    totals[kind].ms += e.duration;
  }
}).observe({ entryTypes: ["gc"] });
let peak = { rss: 0 };
setInterval(() => {
  // The RSS alone is cheap to read; the whole picture is taken only while it climbs.
  if (process.memoryUsage.rss() <= peak.rss) return;
  const m = process.memoryUsage();
  const spaces = {};
  for (const s of getHeapSpaceStatistics()) spaces[s.space_name] = s.space_size;
  peak = { ...m, spaces };
}, 20).unref();
process.on("exit", () => {
  if (process.env.GC_PROBE_OUT) writeFileSync(process.env.GC_PROBE_OUT, JSON.stringify({ gc: totals, peak }));
});
