import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The structure docs/architecture.md describes, kept true: layers that only point down, no import
 * circles (type-only imports included), no file in src/ over 500 lines. Reads the import graph of src/
 * from the source text; nothing is compiled.
 */

const SRC = normalize(join(dirname(fileURLToPath(import.meta.url)), "../../src"));
const MAX_LINES = 500;

/** Top to bottom: a module may import its own layer or a lower one. Keep docs/architecture.md in step. */
const LAYERS: readonly (readonly string[])[] = [
  ["cli", "cli.ts"],
  ["demo", "preflight", "streams", "verify"],
  ["relay"],
  ["link", "audit"],
  ["group", "guard", "nats"],
  ["config"],
  ["protocol", "observability", "lifecycle", "text", "errors.ts"],
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** The part of src/ a file belongs to: its first directory, or its own name at the top. */
function areaOf(file: string): string {
  return relative(SRC, file).split("/")[0] ?? "";
}

function layerOf(file: string): number {
  const area = areaOf(file);
  return LAYERS.findIndex((layer) => layer.includes(area));
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?\sfrom\s+["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g;

/** Relative imports of a file (type-only ones too), as absolute .ts paths. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const out: string[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2];
    if (spec === undefined) continue;
    out.push(normalize(join(dirname(file), spec.replace(/\.js$/, ".ts"))));
  }
  return out;
}

const files = sourceFiles(SRC);
const graph = new Map(files.map((f) => [f, importsOf(f)]));
const rel = (f: string) => relative(SRC, f);

/** Imports from a file to a file of a higher layer. */
function upwardImports(g: ReadonlyMap<string, readonly string[]>): string[] {
  const upward: string[] = [];
  for (const [file, imports] of g) {
    for (const target of imports) {
      if (!g.has(target)) continue; // a missing file is the compiler's to report
      if (layerOf(target) < layerOf(file)) upward.push(`${rel(file)} -> ${rel(target)}`);
    }
  }
  return upward;
}

/** Groups of files that import each other, directly or around a circle (Tarjan's components). */
function circlesOf(g: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of g.get(v) ?? []) {
      if (!g.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string | undefined;
      do {
        w = stack.pop();
        if (w === undefined) break;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) circles.push(component.map(rel).sort());
    }
  };
  for (const f of g.keys()) if (!index.has(f)) visit(f);
  return circles;
}

test("architecture: every part of src/ belongs to a layer, and layers only point down", () => {
  const unplaced = [...new Set(files.filter((f) => layerOf(f) < 0).map(areaOf))];
  assert.deepEqual(unplaced, [], `parts of src/ in no layer (add them to LAYERS here and to docs/architecture.md): ${unplaced.join(", ")}`);
  const upward = upwardImports(graph);
  assert.deepEqual(upward, [], `imports that point up a layer (move what both need into the lower one):\n${upward.join("\n")}`);
});

test("architecture: no import circles between files, type-only imports included", () => {
  const circles = circlesOf(graph);
  assert.deepEqual(circles, [], `import circles:\n${circles.map((c) => c.join(" <-> ")).join("\n")}`);
});

test(`architecture: no file in src/ over ${MAX_LINES} lines`, () => {
  const long = files
    .map((f) => ({ file: rel(f), lines: readFileSync(f, "utf8").split("\n").length - 1 }))
    .filter((f) => f.lines > MAX_LINES)
    .map((f) => `${f.file} (${f.lines})`);
  assert.deepEqual(long, [], `split by concern, not at line ${MAX_LINES}`);
});

test("architecture: the checks see what they check (a planted upward import and circle are found)", () => {
  const at = (p: string) => join(SRC, p);
  assert.ok((graph.get(at("relay/relay.ts")) ?? []).includes(at("link/link.ts")), "relay/relay.ts -> link/link.ts is read");
  assert.ok(importsOf(at("config/types.ts")).includes(at("protocol/subjects.ts")), "type-only re-exports are read");
  const planted = new Map<string, string[]>([
    [at("config/a.ts"), [at("link/b.ts")]], // up: config -> link
    [at("link/b.ts"), [at("link/c.ts")]],
    [at("link/c.ts"), [at("link/b.ts")]], // b <-> c
    [at("link/d.ts"), [at("config/a.ts")]], // down: fine
  ]);
  assert.deepEqual(upwardImports(planted), ["config/a.ts -> link/b.ts"]);
  assert.deepEqual(circlesOf(planted), [["link/b.ts", "link/c.ts"]]);
});
