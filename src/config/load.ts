/**
 * read file → YAML parse → `${VAR}` interpolation → validation → compile.
 *
 * Every failure is one `ConfigError` (a RelayError with code CONFIG_INVALID) whose message lists
 * every problem found, one per line:
 *
 *   config /etc/relay.yaml is invalid:
 *     links[1].to.region: unknown region "eu-wst" (known: us-east, eu-west)
 *     links[1].ackWait: must be a duration with a unit, e.g. "30s" (got 30)
 */
import { readFile } from "node:fs/promises";
import { LineCounter, parseDocument } from "yaml";
import { ErrorCodes, RelayError } from "../errors.js";
import { compileConfig } from "./compile.js";
import { interpolateEnv } from "./env.js";
import type { Env } from "./env.js";
import { collectSecrets, scrubSecrets } from "./redact.js";
import { formatProblem, sortProblems, validateConfig } from "./schema.js";
import type { ConfigProblem } from "./schema.js";
import type { RelayConfig } from "./types.js";

/** CONFIG_INVALID, with the problem lines kept apart for callers and tests. */
export class ConfigError extends RelayError {
  /** The file path (or the name given to `parseConfigText`). */
  readonly source: string;
  /** One line per problem, `<path>: <problem>`, already free of secrets. Empty for read errors. */
  readonly problems: readonly string[];

  constructor(source: string, message: string, problems: readonly string[], options?: { cause?: unknown }) {
    super(ErrorCodes.CONFIG_INVALID, message, options);
    this.source = source;
    this.problems = Object.freeze([...problems]);
  }
}

function invalid(source: string, lines: readonly string[], secrets: readonly string[] = []): ConfigError {
  const clean = lines.map((l) => scrubSecrets(l, secrets));
  return new ConfigError(
    source,
    `config ${source} is invalid:\n${clean.map((l) => `  ${l}`).join("\n")}`,
    clean,
  );
}

/**
 * The YAML library's message without source text: no excerpt, and no quoted token (as in
 * `Unexpected scalar token in YAML stream: "..."`), either of which could hold a secret.
 */
function yamlMessage(message: string): string {
  const first = (message.split(/:\n|\n/)[0] ?? message).trim();
  return first.replace(/ in YAML stream: .*$/, "").replace(/ at line \d+, column \d+$/, "");
}

/**
 * For "end with a ]" / "end with a }" / "Missing closing quote" errors: the offset of the bracket or
 * quote that was never closed, searching back from where the parser gave up; undefined otherwise.
 */
function openerOf(text: string, noticedAt: number, message: string): number | undefined {
  const quote = /^Missing closing (["'])quote/.exec(message)?.[1];
  if (quote !== undefined) {
    const at = text.lastIndexOf(quote, noticedAt - 1);
    return at >= 0 ? at : undefined;
  }
  const pair = /^Flow sequence/.test(message)
    ? ["[", "]"]
    : /^Flow map/.test(message)
      ? ["{", "}"]
      : undefined;
  if (!pair) return undefined;
  let depth = 0;
  for (let i = Math.min(noticedAt, text.length) - 1; i >= 0; i--) {
    if (text[i] === pair[1]) depth++;
    else if (text[i] === pair[0] && depth-- === 0) return i;
  }
  return undefined;
}

/** YAML errors cascade; past the first few they are noise. */
const MAX_YAML_ERRORS = 3;

/**
 * Parses, validates and compiles config text. `sourceName` is only used in messages.
 * Throws ConfigError (CONFIG_INVALID).
 */
export function parseConfigText(text: string, sourceName: string, env: Env = process.env): RelayConfig {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, merge: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const lines = [
      ...new Set(
        doc.errors.map((e) => {
          const message = yamlMessage(e.message);
          // An unclosed bracket or quote is noticed on a later line: name the line where it opened.
          const opened = openerOf(text, e.pos[0], message);
          const { line, col } = lineCounter.linePos(opened ?? e.pos[0]);
          const noticed = opened === undefined ? undefined : lineCounter.linePos(e.pos[0]).line;
          return `line ${line}, column ${col}: ${message}${noticed !== undefined && noticed !== line ? ` (opened here, noticed at line ${noticed})` : ""}`;
        }),
      ),
    ];
    const shown = lines.slice(0, MAX_YAML_ERRORS);
    if (lines.length > shown.length) {
      shown.push(`(${lines.length - shown.length} more YAML errors, probably caused by the first)`);
    }
    throw invalid(sourceName, shown);
  }

  let tree: unknown;
  try {
    tree = doc.toJS({ maxAliasCount: 1000 });
  } catch (err) {
    // e.g. an alias to an anchor that is not defined, or an alias bomb.
    throw invalid(sourceName, [`(yaml): ${yamlMessage(err instanceof Error ? err.message : String(err))}`]);
  }
  if (tree === null || tree === undefined) {
    throw invalid(sourceName, ['(root): the file is empty; it needs at least "regions" and "links"']);
  }

  const interpolated = interpolateEnv(tree, env);
  const validation = validateConfig(interpolated.value, interpolated.failedPaths);
  const problems: ConfigProblem[] = [...interpolated.problems];
  if (!validation.ok) problems.push(...validation.problems);
  if (problems.length > 0 || !validation.ok) {
    const secrets = collectSecrets(interpolated.value);
    throw invalid(sourceName, sortProblems(interpolated.value, problems).map(formatProblem), secrets);
  }
  return compileConfig(validation.config, validation.meshes);
}

/**
 * Reads, validates and compiles the config file at `path`. Rejects with ConfigError
 * (CONFIG_INVALID): `config /x.yaml: cannot read: ENOENT: no such file or directory, ...` when the
 * file cannot be read, `config /x.yaml is invalid:\n  <path>: <problem>...` otherwise.
 */
export async function loadConfig(path: string, env: Env = process.env): Promise<RelayConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new ConfigError(path, `config ${path}: cannot read: ${reason}`, [], { cause: err });
  }
  return parseConfigText(text, path, env);
}
