/**
 * Regenerates the reference pages from the code: `npm run docs`.
 *  - docs/config.md: the key tables (between `<!-- generated: … -->` markers) from the config schema;
 *  - docs/metrics.md: the whole page, from the metrics a relay registers.
 * test/unit/docs-drift.test.ts fails when a page differs from what this would write.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CONFIG_DOC, renderConfigDoc } from "./docs/config-doc.js";
import { ROOT } from "./docs/markdown.js";
import { METRICS_DOC, renderMetricsDoc } from "./docs/metrics-doc.js";

async function update(file: string, render: (current: string) => Promise<string>): Promise<void> {
  const path = join(ROOT, file);
  const current = await readFile(path, "utf8").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return "";
    throw err;
  });
  const next = await render(current);
  if (next === current) {
    console.log(`${file}: up to date`);
    return;
  }
  await writeFile(path, next);
  console.log(`${file}: written`);
}

await update(CONFIG_DOC, renderConfigDoc);
await update(METRICS_DOC, () => renderMetricsDoc());
