/**
 * Pass 1's zod issues → config problems: unknown keys (with a "did you mean" for near misses),
 * missing or mistyped values, and the checkers' own messages, each at its config path.
 */
import type { z } from "zod";
import { describeType } from "./problems.js";
import type { ConfigPath, ConfigProblem } from "./problems.js";
import { ALLOWED_KEYS } from "./schema-fields.js";

function valueAt(tree: unknown, path: ConfigPath): unknown {
  let node = tree;
  for (const seg of path) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<string | number, unknown>)[seg];
  }
  return node;
}

function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0] ?? 0;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j] ?? 0;
      prev[j] = Math.min(up + 1, (prev[j - 1] ?? 0) + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length] ?? 0;
}

function unknownKeyMessage(key: string, allowed: readonly string[]): string {
  const lower = key.toLowerCase();
  const close =
    allowed.find((k) => k.toLowerCase() === lower) ??
    allowed
      .map((k) => ({ k, d: editDistance(lower, k.toLowerCase()) }))
      .filter((c) => c.d <= Math.max(1, Math.floor(c.k.length / 4)))
      .sort((x, y) => x.d - y.d)[0]?.k;
  if (close !== undefined) return `unknown key (did you mean "${close}"?)`;
  return `unknown key (allowed: ${allowed.join(", ")})`;
}

const EXPECTED: Record<string, string> = {
  object: "a mapping",
  record: "a mapping",
  array: "a list",
  string: "a string",
  number: "a number",
  boolean: "true or false",
};

export function issueProblems(iss: z.core.$ZodIssue, tree: unknown, prefix: ConfigPath = []): ConfigProblem[] {
  const path = [...prefix, ...(iss.path as (string | number)[])];
  switch (iss.code) {
    case "unrecognized_keys": {
      const allowed = iss.message.startsWith(ALLOWED_KEYS)
        ? iss.message.slice(ALLOWED_KEYS.length).split(",")
        : [];
      return iss.keys.map((key) => ({ path: [...path, key], message: unknownKeyMessage(key, allowed) }));
    }
    case "invalid_type": {
      const value = valueAt(tree, path);
      if (value === undefined) return [{ path, message: "is required" }];
      const expected = EXPECTED[iss.expected] ?? iss.expected;
      return [{ path, message: `must be ${expected} (got ${describeType(value)})` }];
    }
    case "invalid_key":
      return [{ path, message: iss.issues[0]?.message ?? "invalid key" }];
    case "invalid_union": {
      const first = iss.errors[0];
      if (first !== undefined) return first.flatMap((i) => issueProblems(i, tree, path));
      return [{ path, message: iss.message }];
    }
    default:
      return [{ path, message: iss.message }];
  }
}
