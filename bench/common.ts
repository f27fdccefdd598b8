import { readFileSync } from "node:fs";
import { writeConfig } from "../test/helpers/relays.js";

/** Peak resident set (VmHWM) of a process, in MB; undefined when it cannot be read. */
export function peakRssMb(pid: number | "self" | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m?.[1] ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The benches' relay config: regions a and b, one link `bench` from a/SRC to b/DST with the default
 * link settings, plus `linkExtra` (indented link keys) and `topExtra` (top-level keys). Returns its path.
 */
export function writeBenchConfig(aUrl: string, bUrl: string, linkExtra = "", topExtra = ""): Promise<string> {
  return writeConfig(`
regions:
  a: { servers: ["${aUrl}"] }
  b: { servers: ["${bUrl}"] }
links:
  - name: bench
    from: { region: a, stream: SRC }
    to: { region: b, stream: DST }
${linkExtra}
${topExtra}
`);
}
