/**
 * Validation of the config file (after YAML parsing and `${VAR}` interpolation).
 *
 * Two passes, both always run so that one run reports every problem:
 *  1. the zod schema: shapes, unknown keys (every object is strict), and each value on its own
 *     (durations, names, subjects, URLs...). Scalar values are converted here (durations → ms,
 *     `header:X` → FieldSource, `host:port` → { host, port }); defaults are applied later, in compile.ts.
 *  2. `crossChecks`: rules between fields (region references, duplicates, "exactly one of"),
 *     written defensively against a tree that may have failed pass 1.
 *
 * Problems are `{ path, message }`, printed as `links[1].to.region: unknown region "eu-wst" (...)`.
 * A message never contains a secret: values are only echoed for fields that are not secret, URLs are
 * echoed with their credentials redacted, and the loader scrubs every known secret as a last resort.
 *
 * This file is the entry point: `validateConfig` and the public exports. The parts:
 *  - problems.ts: the problem type, path formatting, how values are quoted, document order;
 *  - schema-fields.ts: the shared scalar checkers and the strict object / list helpers;
 *  - schema-regions.ts, schema-links.ts, schema-guard.ts: the sections;
 *  - schema-root.ts: the whole file (and the small top-level sections), and the parsed types;
 *  - schema-issues.ts: zod issues → problems (pass 1's messages);
 *  - cross-checks.ts: pass 2.
 */
import type { ConfigPath, ConfigProblem } from "./problems.js";
import { sortProblems } from "./problems.js";
import { crossChecks } from "./cross-checks.js";
import { ConfigSchema } from "./schema-root.js";
import type { ParsedConfig } from "./schema-root.js";
import { issueProblems } from "./schema-issues.js";
import { expandMeshes, groupMeshProblems, placeProblem } from "./mesh.js";
import type { ConfigProblem as PlacedProblem } from "./problems.js";

export type { ConfigPath, ConfigProblem } from "./problems.js";
export { formatPath, formatProblem, sortProblems } from "./problems.js";
export { parseHostPort } from "./schema-fields.js";
export { ConfigSchema, LOG_LEVELS } from "./schema-root.js";
export type { ParsedConfig, ParsedLink, ParsedRegion } from "./schema-root.js";
export { crossChecks } from "./cross-checks.js";

export type ValidationResult =
  | {
      readonly ok: true;
      readonly config: ParsedConfig;
      /** The links each mesh generated, by mesh name (in the file's order). */
      readonly meshes: ReadonlyMap<string, readonly string[]>;
    }
  | { readonly ok: false; readonly problems: readonly ConfigProblem[] };

function startsWith(path: ConfigPath, prefix: ConfigPath): boolean {
  return prefix.length <= path.length && prefix.every((seg, i) => path[i] === seg);
}

/**
 * Validates an interpolated config tree: the zod schema, then `crossChecks`. `skip` lists paths
 * already reported elsewhere (strings whose `${VAR}` could not be expanded); problems at or under
 * them are dropped. Problems come back in document order.
 */
export function validateConfig(tree: unknown, skip: readonly ConfigPath[] = []): ValidationResult {
  // Meshes become ordinary links first: every check below sees them as links, and a generated link's
  // problem is put back at its mesh.
  const expansion = expandMeshes(tree);
  const expanded = expansion.tree;
  const result = ConfigSchema.safeParse(expanded);
  const placed: (PlacedProblem & { link?: string })[] = [...expansion.problems];
  const place = (p: ConfigProblem, fromSchema: boolean) => {
    const at = placeProblem(p, expansion, fromSchema);
    if (at !== undefined) placed.push(at);
  };
  if (!result.success) {
    for (const iss of result.error.issues) for (const p of issueProblems(iss, expanded)) place(p, true);
  }
  for (const p of crossChecks(expanded)) place(p, false);
  const problems = groupMeshProblems(placed);
  const kept = sortProblems(
    tree,
    problems.filter((p) => !skip.some((s) => startsWith(p.path, s))),
  );
  // With no problems left, a failed parse only had problems under `skip` (reported by the caller).
  if (kept.length > 0 || !result.success) return { ok: false, problems: kept };
  const meshes = new Map<string, string[]>();
  for (const m of expansion.meshes) meshes.set(m.name, []);
  for (const g of expansion.links) meshes.get(g.meshName)?.push(g.name);
  return { ok: true, config: result.data, meshes };
}
