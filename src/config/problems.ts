/**
 * Config problems and how they read: the `{ path, message }` type every check reports, the path and
 * line formatting (`links[1].to.region: ...`), how a value is shown inside a message (never a
 * secret: URLs lose their credentials), and the order problems are printed in.
 */
import { redactUrl } from "./redact.js";

export type ConfigPath = readonly (string | number)[];

export interface ConfigProblem {
  readonly path: ConfigPath;
  /** A phrase without the path, e.g. `unknown region "eu-wst" (known: us-east, eu-west)`. */
  readonly message: string;
}

/** `["links", 1, "to", "region"]` → `links[1].to.region`; odd keys are quoted: `regions["a b"]`. */
export function formatPath(path: ConfigPath): string {
  if (path.length === 0) return "(root)";
  let out = "";
  for (const seg of path) {
    if (typeof seg === "number") out += `[${seg}]`;
    else if (/^[A-Za-z0-9_-]+$/.test(seg)) out += out === "" ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** `<path>: <message>` */
export function formatProblem(p: ConfigProblem): string {
  return `${formatPath(p.path)}: ${p.message}`;
}

/** What kind of value `v` is, for messages such as `must be a string (got a list)`. */
export function describeType(v: unknown): string {
  if (v === undefined) return "nothing";
  if (v === null) return "an empty value";
  if (typeof v === "string") return "a string";
  if (typeof v === "number") return "a number";
  if (typeof v === "boolean") return `${v}`;
  if (Array.isArray(v)) return "a list";
  if (typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) return "a mapping";
  return "an unsupported value";
}

/** A non-secret value, quoted and shortened, with URL credentials redacted. */
export function quote(v: unknown): string {
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (typeof v !== "string") return describeType(v);
  const s = redactUrl(v);
  return JSON.stringify(s.length > 60 ? `${s.slice(0, 60)}…` : s);
}

/** Position of every path in the tree in document order, to sort problems top to bottom. */
function documentOrder(tree: unknown): Map<string, number> {
  const order = new Map<string, number>();
  const walk = (node: unknown, path: (string | number)[]): void => {
    order.set(JSON.stringify(path), order.size);
    if (Array.isArray(node)) node.forEach((item, i) => walk(item, [...path, i]));
    else if (typeof node === "object" && node !== null) {
      for (const [k, v] of Object.entries(node)) walk(v, [...path, k]);
    }
  };
  walk(tree, []);
  return order;
}

/** Drops repeated lines and sorts problems in document order (top of the file first). */
export function sortProblems(tree: unknown, problems: readonly ConfigProblem[]): ConfigProblem[] {
  const order = documentOrder(tree);
  const rank = (p: ConfigPath): number => {
    for (let n = p.length; n >= 0; n--) {
      const r = order.get(JSON.stringify(p.slice(0, n)));
      // A path missing from the tree (a required key) sorts right after its parent.
      if (r !== undefined) return n === p.length ? r : r + 0.5;
    }
    return Number.MAX_SAFE_INTEGER;
  };
  const seen = new Set<string>();
  return problems
    .filter((p) => {
      const line = formatProblem(p);
      if (seen.has(line)) return false;
      seen.add(line);
      return true;
    })
    .map((p, i) => ({ p, i, r: rank(p.path) }))
    .sort((a, b) => a.r - b.r || a.i - b.i)
    .map((x) => x.p);
}
