import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { logStem } from "../helpers/log-names.js";

const REPO_ROOT = join(import.meta.dirname, "..", "..");

test("after a failed run, scripts/failed-test-logs.ts prints the kept logs of the failed tests only, by their names", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "failed-test-logs-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const failed = "KV link: deletes, purges and older writes converge; a bucket with history keeps the winner last";
  const passed = "a relay link with the Cluster guard: exactly once";
  writeFileSync(join(dir, `${logStem(failed)}-a-1-2.log`), '{"msg":"link live","link":"b-to-a"}\n');
  writeFileSync(join(dir, `${logStem(failed)}-process-3-4.log`), '{"msg":"lease owner"}\n');
  writeFileSync(join(dir, `${logStem(passed)}-b-5-6.log`), '{"msg":"not this one"}\n');
  const output = join(dir, "output");
  writeFileSync(
    output,
    [`✔ ${passed} (9732.3ms)`, `✖ ${failed} (30205.0ms)`, "ℹ tests 2", "", "✖ failing tests:", "", "test at test/integration/kv-link.test.ts:100:1", `✖ ${failed} (30205.0ms)`, "  Error: timed out"].join("\n"),
  );
  const printed = execFileSync(process.execPath, ["--import", "tsx", join(REPO_ROOT, "scripts/failed-test-logs.ts"), output, dir], { encoding: "utf8", cwd: REPO_ROOT });
  assert.match(printed, new RegExp(`=== relay logs of the failed test "${failed.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"`));
  assert.match(printed, /"msg":"link live"/);
  assert.match(printed, /"msg":"lease owner"/, "a relay process's log is found by its test's name too");
  assert.doesNotMatch(printed, /not this one/, "a passed test's logs are not printed");
});
