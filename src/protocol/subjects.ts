/**
 * NATS subject patterns as sets of subjects: the config's checks, the pre-flight checks and the data path
 * share them. Pure functions.
 *
 * A pattern is a dot-separated list of tokens; `*` matches exactly one token and `>` (last token
 * only) matches one or more tokens. Literal tokens match themselves.
 *
 * - `patternMatches(subject, pattern)`: a literal subject matches a pattern.
 * - `isSubsetOf(a, b)`: every subject matching `a` matches `b`.
 * - `isCoveredBy(a, bs)`: every subject matching `a` matches at least one of `bs` (a union: `x.>`
 *   is covered by `x.*` together with `x.*.>` even though by neither alone).
 * - `intersects(a, b)`: some subject matches both.
 * - `transformPattern(pattern, transform)`: the patterns the relay publishes to when it applies a
 *   link's `stripPrefix` / `addPrefix` to every subject matching `pattern`.
 */

/** How a link rewrites subjects: `links[].transform` in the config. */
export interface SubjectTransform {
  /** Removed from the front of the source subject when present. */
  readonly stripPrefix?: string;
  /** Added to the front after stripping. */
  readonly addPrefix?: string;
}

export function tokensOf(pattern: string): string[] {
  return pattern.split(".");
}

/** Why `pattern` is not a valid subject or subject filter, or undefined when it is. */
export function patternProblem(pattern: string): string | undefined {
  if (pattern === "") return "is empty";
  if (/[\s\x00-\x1f\x7f]/.test(pattern)) return "contains whitespace";
  const tokens = tokensOf(pattern);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] ?? "";
    if (t === "") return 'has an empty token (".." or a leading or trailing ".")';
    if (t === ">" && i !== tokens.length - 1) return '">" is not the last token';
    if (t !== "*" && t !== ">" && (t.includes("*") || t.includes(">")))
      return "has a wildcard inside a token";
  }
  return undefined;
}

export function isValidPattern(pattern: string): boolean {
  return patternProblem(pattern) === undefined;
}

/** Does the literal `subject` match `pattern`? */
export function patternMatches(subject: string, pattern: string): boolean {
  return isSubsetOf(subject, pattern);
}

/** Every subject matching `a` also matches `b` (both valid patterns; literal subjects are patterns too). */
export function isSubsetOf(a: string, b: string): boolean {
  return tokenSubset(tokensOf(a), tokensOf(b));
}

function tokenSubset(a: readonly string[], b: readonly string[]): boolean {
  for (let i = 0; i < b.length; i++) {
    const bt = b[i];
    // `>` in b takes one or more tokens: a must still have at least one here (any kind).
    if (bt === ">") return a.length > i;
    const at = a[i];
    if (at === undefined) return false;
    // `>` in a spans a variable number of tokens; b (no `>` at this position) has a fixed length.
    if (at === ">") return false;
    if (bt === "*") continue;
    // b is literal here: a must be the same literal (a `*` in a also takes other values).
    if (at !== bt) return false;
  }
  return a.length === b.length;
}

/**
 * Every subject matching `a` matches at least one of `bs`. Checks each pattern alone first, then
 * splits a trailing `>` of `a` by length (`x.>` = `x.*` ∪ `x.*.>`), which is the only way a union
 * can cover what no single pattern does: a `*` or a literal cannot be split into finitely many
 * cases that literals would cover. Stops splitting once `a` is longer than every pattern in `bs`.
 */
export function isCoveredBy(a: string, bs: readonly string[]): boolean {
  const tb = bs.map(tokensOf);
  const maxLen = Math.max(0, ...tb.map((t) => t.length));
  const covered = (ta: readonly string[]): boolean => {
    if (tb.some((t) => tokenSubset(ta, t))) return true;
    if (ta[ta.length - 1] !== ">" || ta.length > maxLen) return false;
    const head = ta.slice(0, -1);
    return covered([...head, "*"]) && covered([...head, "*", ">"]);
  };
  return covered(tokensOf(a));
}

/** Some subject matches both `a` and `b`. */
export function intersects(a: string, b: string): boolean {
  const ta = tokensOf(a);
  const tb = tokensOf(b);
  for (let i = 0; ; i++) {
    const x = ta[i];
    const y = tb[i];
    if (x === undefined || y === undefined) return x === undefined && y === undefined;
    // `>` takes the rest (one or more tokens): the other side has at least one token here.
    if (x === ">" || y === ">") return true;
    if (x !== "*" && y !== "*" && x !== y) return false;
  }
}

/** Some pattern of `as` intersects some pattern of `bs`; the first such pair. */
export function firstIntersection(
  as: readonly string[],
  bs: readonly string[],
): { readonly a: string; readonly b: string } | undefined {
  for (const a of as) for (const b of bs) if (intersects(a, b)) return { a, b };
  return undefined;
}

/**
 * The patterns the relay publishes to for source subjects matching `pattern`, given the link's
 * transform (`transformSubject` in src/link/identity.ts: strip the prefix when the subject starts
 * with it, then add a prefix). Exact when `pattern` starts with `stripPrefix` (the usual
 * `filter: "orders.>"` with `stripPrefix: "orders."`). When it does not, but some of its subjects
 * could (`*.created` and `orders.`), both outcomes are returned: the subjects that start with the
 * prefix, stripped, and the pattern unchanged for the others. A strip prefix that does not end in
 * "." can cut tokens in ways a pattern cannot express; then only the unchanged pattern is returned
 * unless the pattern itself starts with the prefix.
 *
 * The results are strings, not necessarily valid patterns: a transform that yields an empty or
 * malformed subject shows up as a pattern with `patternProblem`.
 */
export function transformPattern(pattern: string, transform: SubjectTransform): string[] {
  const { stripPrefix, addPrefix } = transform;
  const add = (s: string): string => (addPrefix ? `${addPrefix}${s}` : s);
  if (!stripPrefix) return [add(pattern)];
  if (pattern.startsWith(stripPrefix)) return [add(pattern.slice(stripPrefix.length))];
  const out = [add(pattern)];
  if (stripPrefix.endsWith(".")) {
    const prefixTokens = tokensOf(stripPrefix.slice(0, -1));
    const rest = restAfterPrefix(tokensOf(pattern), prefixTokens);
    if (rest !== undefined) out.push(add(rest.join(".")));
  }
  return [...new Set(out)];
}

/**
 * The subjects matching `pattern` that start with the literal tokens `prefix` (and have at least
 * one more token), with those tokens removed; undefined when there are none.
 */
function restAfterPrefix(pattern: readonly string[], prefix: readonly string[]): string[] | undefined {
  for (let i = 0; i < prefix.length; i++) {
    const t = pattern[i];
    if (t === undefined) return undefined;
    if (t === ">") return [">"];
    if (t !== "*" && t !== prefix[i]) return undefined;
  }
  const rest = pattern.slice(prefix.length);
  return rest.length > 0 ? rest : undefined;
}
