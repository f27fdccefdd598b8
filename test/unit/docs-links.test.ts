import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Every relative link of the user docs (README.md, CHANGELOG.md, docs/*.md) lands: the file exists and,
 * when the link names an anchor, a heading of that file has it (GitHub's slugs). Links to other sites
 * are not followed.
 */
const ROOT = normalize(join(dirname(fileURLToPath(import.meta.url)), "../.."));
const PAGES = [
  "README.md",
  "CHANGELOG.md",
  ...readdirSync(join(ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const read = (file: string): string => readFileSync(join(ROOT, file), "utf8");

/** Lines outside fenced code blocks. */
function prose(page: string): string[] {
  let fenced = false;
  return page.split("\n").filter((line) => {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/** The anchors GitHub gives a page's headings (a repeated one gets -1, -2, …). */
function anchors(page: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(page)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m === null) continue;
    const base = (m[1] ?? "")
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Every link target of a page: inline `[text](target)` and reference definitions `[name]: target`. */
function linkTargets(page: string): string[] {
  const targets: string[] = [];
  for (const line of prose(page)) {
    const text = line.replace(/`[^`]*`/g, "");
    for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) targets.push(m[1] ?? "");
    const ref = /^\s*\[[^\]]+\]:\s+(\S+)/.exec(text);
    if (ref !== null) targets.push(ref[1] ?? "");
  }
  return targets;
}

function brokenLinks(file: string): string[] {
  const broken: string[] = [];
  for (const target of linkTargets(read(file))) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // another site, mailto:
    const [path = "", anchor] = target.split("#", 2);
    const dest = path === "" ? file : relative(ROOT, normalize(join(ROOT, dirname(file), path)));
    const full = join(ROOT, dest);
    if (!existsSync(full)) {
      broken.push(`${file}: ${target} (no file ${dest})`);
      continue;
    }
    if (anchor === undefined || anchor === "") continue;
    if (statSync(full).isDirectory() || !dest.endsWith(".md")) {
      broken.push(`${file}: ${target} (an anchor into ${dest}, which is not a page)`);
      continue;
    }
    if (!anchors(read(dest)).has(anchor))
      broken.push(`${file}: ${target} (no heading #${anchor} in ${dest})`);
  }
  return broken;
}

test("every relative link of README.md, CHANGELOG.md and docs/*.md lands on a file and a heading", () => {
  const broken = PAGES.flatMap(brokenLinks);
  assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
});

test("the link check sees a missing file, a missing heading, and GitHub's slugs", () => {
  const page = "# Title\n\n## The guard's Redis\n\n## `links[].guard`\n\n## Again\n\n## Again\n";
  assert.deepEqual([...anchors(page)], ["title", "the-guards-redis", "linksguard", "again", "again-1"]);
  assert.deepEqual(linkTargets("see [a](b.md#c) and `[not](a link)`\n[ref]: docs/x.md\n```\n[x](y)\n```\n"), [
    "b.md#c",
    "docs/x.md",
  ]);
});
