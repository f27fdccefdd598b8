/**
 * Where a profiled process's time went within a window of its run: the functions with the most self
 * time, and the top-level callers (the first relay or library frame under the event loop) with the most
 * total time, counting only the samples taken between FROM and TO seconds before the profile ended
 * (bench/idle-links.ts prints its idle window that way).
 *
 *   tsx bench/profile-window.ts <file.cpuprofile> <from s before end> <to s before end> [top=30]
 */
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const [file, fromArg, toArg, topArg] = process.argv.slice(2);
if (!file || fromArg === undefined || toArg === undefined) throw new Error("usage: profile-window.ts <file.cpuprofile> <from s before end> <to s before end> [top]");
const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
const from = profile.endTime - Number(fromArg) * 1e6;
const to = profile.endTime - Number(toArg) * 1e6;
const top = Number(topArg ?? 30);

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const where = (n: ProfileNode) =>
  `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.replace(/^.*\/(dist|node_modules)\//, "$1/")}:${n.callFrame.lineNumber + 1}`;

const self = new Map<string, number>();
const inclusive = new Map<string, number>();
let busy = 0;
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i] ?? 0;
  if (t < from || t > to) continue;
  const node = byId.get(profile.samples[i] ?? -1);
  if (!node) continue;
  const name = node.callFrame.functionName;
  if (name === "(idle)" || name === "(program)" || name === "(root)") continue;
  const dt = profile.timeDeltas[i + 1] ?? 0;
  busy += dt;
  self.set(where(node), (self.get(where(node)) ?? 0) + dt);
  // Every relay (dist/) frame on the stack, once each: what it and its callees took.
  const seen = new Set<string>();
  for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
    const f = byId.get(id);
    if (f && f.callFrame.url.includes("/dist/")) {
      const k = where(f);
      if (!seen.has(k)) inclusive.set(k, (inclusive.get(k) ?? 0) + dt);
      seen.add(k);
    }
  }
}
const span = (to - from) / 1e6;
console.log(`${file}: ${span.toFixed(1)} s window, busy ${(busy / 1e6).toFixed(2)} s = ${((busy / 1e6 / span) * 100).toFixed(1)} % of a core (GC counted)`);
const pct = (us: number) => `${((us / busy) * 100).toFixed(1).padStart(5)} %`;
console.log("\nself time:");
for (const [k, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${k}`);
console.log("\nrelay functions, with their callees:");
for (const [k, us] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${k}`);
