/**
 * After a suite run that failed (scripts/test.sh): prints the relay logs the run kept
 * (RELAY_TEST_LOG_DIR) of the tests that failed, the last lines of each, so a failure that happens only
 * on a loaded machine, in CI, can be read afterwards.
 *
 *   tsx scripts/failed-test-logs.ts <the run's output> <the log directory>
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { logStem } from "../test/helpers/log-names.js";

const TAIL_LINES = 400;

const [outputFile, logDir] = process.argv.slice(2);
if (!outputFile || !logDir) {
  console.error("usage: failed-test-logs.ts <run output> <log directory>");
  process.exit(2);
}
const output = readFileSync(outputFile, "utf8").split("\n");
const start = output.findIndex((l) => l.startsWith("✖ failing tests:"));
// The runner's summary lists each failed test after that line (none: nothing to print).
const failed = new Set(
  (start < 0 ? [] : output.slice(start + 1)).map((l) => /^\s*✖ (.*?)(?: \([\d.]+ms\))?$/.exec(l)?.[1]).filter((name) => name !== undefined),
);
let files: string[] = [];
try {
  files = readdirSync(logDir);
} catch {
  // no relay kept a log
}
for (const name of failed) {
  const stem = logStem(name);
  const logs = files.filter((f) => f.startsWith(`${stem}-`)).sort();
  console.log(`\n=== relay logs of the failed test "${name}": ${logs.length === 0 ? "none kept" : logs.join(", ")}`);
  for (const f of logs) {
    const lines = readFileSync(join(logDir, f), "utf8").trimEnd().split("\n");
    console.log(`--- ${f} (${lines.length > TAIL_LINES ? `last ${TAIL_LINES} of ${lines.length} lines` : `${lines.length} lines`})`);
    console.log(lines.slice(-TAIL_LINES).join("\n"));
  }
}
