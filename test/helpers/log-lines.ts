/**
 * Duplicate keys in JSON log lines. `JSON.parse` keeps the last of two equal keys without a word, but
 * strict parsers (Elasticsearch's duplicate check, some log shippers) reject the whole line, so the
 * relay must never write one. This walks a line's text and reports every key that appears twice in
 * one object, at any depth, as `path.key`.
 */
export function duplicateKeys(line: string): string[] {
  interface Frame {
    kind: "object" | "array";
    keys: Set<string>;
    path: string;
    expectKey: boolean;
    lastKey: string;
  }
  const found: string[] = [];
  const stack: Frame[] = [];
  let i = 0;
  const readString = (): string => {
    let out = "";
    i++; // the opening quote
    while (i < line.length && line[i] !== '"') {
      if (line[i] === "\\") {
        out += line.slice(i, i + 2);
        i += 2;
      } else out += line[i++];
    }
    i++; // the closing quote
    return out;
  };
  while (i < line.length) {
    const c = line[i];
    const top = stack[stack.length - 1];
    if (c === "{" || c === "[") {
      const path = top?.kind === "object" ? (top.path ? `${top.path}.${top.lastKey}` : top.lastKey) : (top?.path ?? "");
      stack.push({ kind: c === "{" ? "object" : "array", keys: new Set(), path, expectKey: c === "{", lastKey: "" });
      i++;
    } else if (c === "}" || c === "]") {
      stack.pop();
      i++;
    } else if (c === '"') {
      const s = readString();
      while (line[i] === " ") i++;
      if (top?.kind === "object" && top.expectKey && line[i] === ":") {
        if (top.keys.has(s)) found.push(top.path ? `${top.path}.${s}` : s);
        top.keys.add(s);
        top.lastKey = s;
        top.expectKey = false;
      }
    } else {
      if (c === "," && top?.kind === "object") top.expectKey = true;
      i++;
    }
  }
  return found;
}

/** The lines of `text` that are JSON objects with a duplicate key, each with the keys. */
export function linesWithDuplicateKeys(lines: readonly string[]): string[] {
  const bad: string[] = [];
  for (const line of lines) {
    if (!line.startsWith("{")) continue;
    const dups = duplicateKeys(line);
    if (dups.length > 0) bad.push(`${dups.join(", ")} in ${line.slice(0, 300)}`);
  }
  return bad;
}
