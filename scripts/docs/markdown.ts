/**
 * Markdown building blocks of the generated reference pages: tables, generated sections between
 * markers, and the project's prettier settings (so `prettier --write` leaves a generated page as it is).
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import prettier from "prettier";

/** The repository's root: pages are named relative to it. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../..");

/** A cell: `|` escaped (also inside code spans, as GitHub's tables need), no line breaks. */
function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ");
}

export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.map(cell).join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

export function beginMarker(id: string): string {
  return `<!-- generated: ${id} begin -->`;
}

export function endMarker(id: string): string {
  return `<!-- generated: ${id} end -->`;
}

/**
 * Replaces what stands between each section's markers with its new content. Throws when a section's
 * markers are missing or out of order, and when the page has markers of a section that is not given.
 */
export function replaceSections(page: string, sections: ReadonlyMap<string, string>, file: string): string {
  let out = page;
  for (const [id, content] of sections) {
    const begin = out.indexOf(beginMarker(id));
    const end = out.indexOf(endMarker(id));
    if (begin < 0 || end < begin) {
      throw new Error(
        `${file} has no "${beginMarker(id)}" … "${endMarker(id)}" markers: put them where the section goes`,
      );
    }
    out = `${out.slice(0, begin + beginMarker(id).length)}\n\n${content}\n\n${out.slice(end)}`;
  }
  for (const m of out.matchAll(/<!-- generated: (\S+) begin -->/g)) {
    if (!sections.has(m[1] ?? ""))
      throw new Error(`${file} has markers of an unknown generated section "${m[1]}"`);
  }
  return out;
}

/** Formats Markdown as `npx prettier --write` would with the project's settings. */
export async function formatMarkdown(text: string, file: string): Promise<string> {
  const path = join(ROOT, file);
  const options = (await prettier.resolveConfig(path)) ?? {};
  return prettier.format(text, { ...options, filepath: path, parser: "markdown" });
}
