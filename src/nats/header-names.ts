/**
 * Header names matched case-insensitively against a key where it stands in a header block's text,
 * without slicing or lower-casing it: the relay checks every header line of every source message
 * against the names it strips, and the slices and lower-cased copies were garbage per line. Keys are
 * compared ASCII-folded; a key with any other character is lower-cased the way `toLowerCase` does and
 * looked up, as before.
 */
export class HeaderNames {
  /** Lower-cased names by length. */
  private readonly byLength = new Map<number, string[]>();
  /** Lower-cased prefixes: every name starting with one matches too. */
  private readonly prefixes: readonly string[];

  /** `prefix`: every name starting with it (or with one of them) matches too (compared case-insensitively). */
  constructor(names: Iterable<string>, prefix: string | readonly string[] = "") {
    for (const name of names) {
      const lower = name.toLowerCase();
      const same = this.byLength.get(lower.length);
      if (!same) this.byLength.set(lower.length, [lower]);
      else if (!same.includes(lower)) same.push(lower);
    }
    this.prefixes = (typeof prefix === "string" ? [prefix] : prefix).filter((p) => p !== "").map((p) => p.toLowerCase());
  }

  /** Whether `name` is one of the names (or starts with the prefix), case-insensitively. */
  has(name: string): boolean {
    const lower = name.toLowerCase();
    return this.prefixes.some((p) => lower.startsWith(p)) || (this.byLength.get(lower.length)?.includes(lower) ?? false);
  }

  /** `has` for the key `text[start, end)`, spaces around it ignored. */
  matches(text: string, start: number, end: number): boolean {
    while (start < end && text.charCodeAt(start) === 0x20) start++;
    while (end > start && text.charCodeAt(end - 1) === 0x20) end--;
    for (let i = start; i < end; i++) if (text.charCodeAt(i) > 0x7f) return this.has(text.slice(start, end));
    for (const prefix of this.prefixes) if (end - start >= prefix.length && sameFolded(text, start, prefix)) return true;
    const names = this.byLength.get(end - start);
    if (names === undefined) return false;
    for (const name of names) if (sameFolded(text, start, name)) return true;
    return false;
  }
}

/** Whether `text` from `start` holds `lower` (ASCII, lower-cased), ASCII letters compared folded. */
function sameFolded(text: string, start: number, lower: string): boolean {
  for (let i = 0; i < lower.length; i++) {
    let c = text.charCodeAt(start + i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    if (c !== lower.charCodeAt(i)) return false;
  }
  return true;
}
