/**
 * `${NAME}` / `${NAME:-default}` substitution in the config file's string values.
 *
 * It runs on the parsed YAML tree, not on the raw text: a substituted value can never change the
 * structure of the document (no YAML injection through an environment variable), it is always a
 * string, and every problem is reported at the config path where the reference appears.
 * Map keys are never interpolated.
 */
import type { ConfigPath, ConfigProblem } from "./problems.js";

/** The environment to read (normally `process.env`). */
export type Env = Readonly<Record<string, string | undefined>>;

export interface ExpandResult {
  readonly value: string;
  /** Phrases meant to follow `<path>: `; empty when the string expanded cleanly. */
  readonly errors: readonly string[];
}

export interface InterpolationResult {
  /** A copy of the tree with every string expanded (a string with errors is left as written). */
  readonly value: unknown;
  readonly problems: readonly ConfigProblem[];
  /** Paths of the strings that could not be expanded; later checks skip them to avoid repeats. */
  readonly failedPaths: readonly ConfigPath[];
}

const NAME = /^([A-Za-z_][A-Za-z0-9_]*)(?::-([^]*))?$/;

/**
 * Expands one string. `$${` is a literal `${`; a `$` not followed by `{` is kept as is.
 * `${NAME:-default}` uses `default` when NAME is unset or empty (as in the shell).
 * An unset variable without a default is an error; so is a malformed reference.
 */
export function expandEnvString(text: string, env: Env): ExpandResult {
  const errors: string[] = [];
  let out = "";
  let i = 0;
  while (i < text.length) {
    const j = text.indexOf("$", i);
    if (j < 0) {
      out += text.slice(i);
      break;
    }
    out += text.slice(i, j);
    if (text.startsWith("$${", j)) {
      out += "${";
      i = j + 3;
      continue;
    }
    if (!text.startsWith("${", j)) {
      out += "$";
      i = j + 1;
      continue;
    }
    const close = text.indexOf("}", j + 2);
    if (close < 0) {
      errors.push(`unterminated "\${" at character ${j + 1} (write $\${ for a literal \${)`);
      out += text.slice(j);
      break;
    }
    const body = text.slice(j + 2, close);
    const m = NAME.exec(body);
    if (m === null || m[1] === undefined) {
      // The body is not echoed: it may be part of a literal secret.
      errors.push(
        `invalid variable reference at character ${j + 1}: use \${NAME} or \${NAME:-default} ` +
          `(NAME: letters, digits and "_", not starting with a digit); write $\${ for a literal \${`,
      );
      out += text.slice(j, close + 1);
      i = close + 1;
      continue;
    }
    const name = m[1];
    const fallback = m[2];
    if (fallback !== undefined && fallback.includes("${")) {
      errors.push(`nested references are not supported (in the default of \${${name}})`);
      out += text.slice(j, close + 1);
      i = close + 1;
      continue;
    }
    const value = env[name];
    if (fallback !== undefined) {
      out += value === undefined || value === "" ? fallback : value;
    } else if (value === undefined) {
      errors.push(`environment variable ${name} is not set`);
      out += text.slice(j, close + 1);
    } else {
      out += value;
    }
    i = close + 1;
  }
  return { value: out, errors };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * Walks a parsed YAML tree (plain objects, arrays, scalars) and expands every string value.
 * Never throws; problems come back with their paths, e.g.
 * `{ path: ["regions", "us-east", "auth", "password"], message: "environment variable US_PASSWORD is not set" }`.
 */
export function interpolateEnv(tree: unknown, env: Env): InterpolationResult {
  const problems: ConfigProblem[] = [];
  const failedPaths: ConfigPath[] = [];

  const walk = (node: unknown, path: (string | number)[]): unknown => {
    if (typeof node === "string") {
      const r = expandEnvString(node, env);
      if (r.errors.length > 0) {
        failedPaths.push([...path]);
        for (const message of r.errors) problems.push({ path: [...path], message });
        return node;
      }
      return r.value;
    }
    if (Array.isArray(node)) return node.map((item, index) => walk(item, [...path, index]));
    if (isPlainObject(node)) {
      const out: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(node)) {
        // defineProperty so a "__proto__" key stays an ordinary (and later rejected) key.
        Object.defineProperty(out, key, {
          value: walk(value, [...path, key]),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    }
    return node;
  };

  return { value: walk(tree, []), problems, failedPaths };
}
