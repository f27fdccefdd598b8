import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { findBinary } from "./local-process.js";

/**
 * Runs Debian's promtool and returns its output; fails the test with the output when it exits non-zero,
 * and with the install command when promtool is missing (CI installs it; a test never skips for it).
 */
export function promtool(args: readonly string[], cwd: string, timeoutMs = 300_000): string {
  const r = spawnSync(findBinary("promtool") ?? "promtool", [...args], { cwd, encoding: "utf8", timeout: timeoutMs });
  if (r.error) {
    const missing = (r.error as NodeJS.ErrnoException).code === "ENOENT";
    assert.fail(
      missing
        ? "promtool is not on PATH nor in .tools/prometheus: run SETUP_PROMTOOL=1 bash scripts/setup.sh (it unpacks Debian's prometheus package there)"
        : `promtool ${args.join(" ")} could not run: ${r.error.message}`,
    );
  }
  const output = `${r.stdout}${r.stderr}`;
  assert.equal(r.status, 0, `promtool ${args.join(" ")} failed (exit ${r.status}):\n${output}`);
  return output;
}
