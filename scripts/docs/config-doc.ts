/**
 * docs/config.md's key tables, generated from the config schema (scripts/docs/config-keys.ts). The
 * page's prose is written by hand; each table stands between `<!-- generated: <section> … -->`
 * markers and is replaced by `npm run docs`. Every key of the schema must be in some section.
 */
import { ConfigSchema } from "../../src/config/schema.js";
import { configKeys } from "./config-keys.js";
import type { ConfigKey } from "./config-keys.js";
import { formatMarkdown, replaceSections, table } from "./markdown.js";

export const CONFIG_DOC = "docs/config.md";

/** Strictly under `parent`: its keys, its list items' keys, and theirs. */
function isUnder(path: string, parent: string): boolean {
  return path.startsWith(`${parent}.`) || path.startsWith(`${parent}[].`);
}

/**
 * A section's keys: those under one of `roots`, but not under one of `stops` (a key in `stops` is
 * listed, its own keys go to another section).
 */
function under(roots: readonly string[], stops: readonly string[] = []): (path: string) => boolean {
  return (path) => roots.some((r) => isUnder(path, r)) && !stops.some((s) => isUnder(path, s));
}

/** The generated sections of docs/config.md, in page order: which keys each table lists. */
export const CONFIG_SECTIONS: readonly { readonly id: string; readonly keys: (path: string) => boolean }[] = [
  { id: "top-level", keys: (path) => !/[.[]/.test(path) },
  { id: "regions", keys: under(["regions"], ["regions.<name>.auth", "regions.<name>.tls"]) },
  { id: "regions-auth", keys: under(["regions.<name>.auth"]) },
  { id: "tls", keys: under(["regions.<name>.tls", "links[].guard.redis.tls"]) },
  { id: "links", keys: under(["links"], ["links[].to.subject", "links[].guard"]) },
  { id: "links-subject", keys: under(["links[].to.subject"]) },
  { id: "meshes", keys: under(["meshes"]) },
  { id: "guard", keys: under(["links[].guard"], ["links[].guard.redis", "links[].guard.versions"]) },
  { id: "guard-redis", keys: under(["links[].guard.redis"], ["links[].guard.redis.tls"]) },
  { id: "guard-versions", keys: under(["links[].guard.versions"]) },
  { id: "group", keys: under(["group"]) },
  { id: "http-log-shutdown", keys: under(["http", "log", "shutdown"]) },
  { id: "reload", keys: under(["reload"]) },
];

function keyRow(k: ConfigKey): string[] {
  const meaning = `${k.description ?? ""}${k.secret ? " **Secret.**" : ""}`;
  const dflt = k.defaultText !== "" ? k.defaultText : k.required ? "" : "none";
  const required = !k.required
    ? "no"
    : k.within === undefined
      ? "yes"
      : `with \`${k.within.replace(/^.*[.\]]/, "")}\``;
  return [`\`${k.path}\``, k.valueType, k.allowed, required, dflt, meaning];
}

/** The tables, by section id. Throws when a key is in no section. */
export function configTables(keys: readonly ConfigKey[] = configKeys(ConfigSchema)): Map<string, string> {
  const homeless = keys.filter((k) => !CONFIG_SECTIONS.some((s) => s.keys(k.path))).map((k) => k.path);
  if (homeless.length > 0) {
    throw new Error(
      `config keys in no generated section of ${CONFIG_DOC}: ${homeless.join(", ")} (add them to CONFIG_SECTIONS in scripts/docs/config-doc.ts)`,
    );
  }
  const header = ["Key", "Type", "Values", "Required", "Default", "Meaning"];
  return new Map(
    CONFIG_SECTIONS.map(
      (s) => [s.id, table(header, keys.filter((k) => s.keys(k.path)).map(keyRow))] as const,
    ),
  );
}

/** docs/config.md as it should be: `page` (its current text) with every generated table replaced. */
export async function renderConfigDoc(page: string): Promise<string> {
  return formatMarkdown(replaceSections(page, configTables(), CONFIG_DOC), CONFIG_DOC);
}
