import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

/**
 * Runs Debian's promtool and returns its output; fails the test with the output when it exits non-zero,
 * and with the install command when promtool is missing (CI installs it; a test never skips for it).
 */
export function promtool(args: readonly string[], cwd: string, timeoutMs = 300_000): string {
  const r = spawnSync("promtool", [...args], { cwd, encoding: "utf8", timeout: timeoutMs });
  if (r.error) {
    const missing = (r.error as NodeJS.ErrnoException).code === "ENOENT";
    assert.fail(
      missing
        ? "promtool is not on PATH: install Debian's prometheus package (apt-get install prometheus), which ships promtool"
        : `promtool ${args.join(" ")} could not run: ${r.error.message}`,
    );
  }
  const output = `${r.stdout}${r.stderr}`;
  assert.equal(r.status, 0, `promtool ${args.join(" ")} failed (exit ${r.status}):\n${output}`);
  return output;
}
