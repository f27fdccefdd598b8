/**
 * The building blocks of the config schema: scalar fields (`z.unknown()` piped through a checker, so
 * every message is ours) shared by several sections, and the strict object and list helpers.
 * Section-specific fields live with their section (schema-regions.ts, schema-guard.ts, schema-links.ts).
 */
import { z } from "zod";
import { parseDuration, DurationError } from "./durations.js";
import { HEADER_NAME } from "./field-source.js";
import { describeType, quote } from "./problems.js";

// ---------------------------------------------------------------------------------------------
// Scalar fields

class FieldError extends Error {}

export function fail(message: string): never {
  throw new FieldError(message);
}

/** A required field whose value is checked and converted by `check` (which throws FieldError). */
export function field<T>(check: (v: unknown) => T) {
  return z.unknown().transform((v, ctx): T => {
    if (v === undefined) {
      ctx.issues.push({ code: "custom", message: "is required", input: undefined });
      return z.NEVER;
    }
    try {
      return check(v);
    } catch (err) {
      if (err instanceof FieldError || err instanceof DurationError) {
        ctx.issues.push({ code: "custom", message: err.message, input: undefined });
        return z.NEVER;
      }
      throw err;
    }
  });
}

export function expectString(v: unknown): string {
  if (typeof v !== "string") fail(`must be a string (got ${describeType(v)})`);
  if (v.trim() === "") fail("must not be empty");
  return v;
}

/** A string whose value is never echoed (tokens, passwords). */
export const secretString = field((v) => {
  if (typeof v !== "string") fail(`must be a string (got ${describeType(v)})`);
  if (v === "") fail("must not be empty");
  return v;
});

export const nonEmptyString = field(expectString);

export const filePath = field((v) => {
  const s = expectString(v);
  if (s !== s.trim()) fail(`file path ${quote(s)} has leading or trailing spaces`);
  return s;
});

/** Stream, consumer and domain names share NATS's rule: no whitespace, ".", "*", ">", "/", "\". */
export function natsName(what: string) {
  return field((v) => {
    const s = expectString(v);
    if (/[\s.*>/\\]/.test(s) || /[\x00-\x1f\x7f]/.test(s)) {
      fail(`invalid ${what} ${quote(s)}: must not contain whitespace, ".", "*", ">", "/" or "\\"`);
    }
    if (s.length > 255) fail(`${what} is too long (at most 255 characters)`);
    return s;
  });
}

function subjectProblem(s: string, opts: { wildcards: boolean; prefix: boolean }): string | undefined {
  if (/[\s\x00-\x1f\x7f]/.test(s)) return "must not contain whitespace";
  const tokens = s.split(".");
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] ?? "";
    const last = i === tokens.length - 1;
    if (t === "") {
      if (opts.prefix && last && i > 0) continue; // "orders." is a fine prefix
      return 'has an empty token (".." or a leading or trailing ".")';
    }
    if (t.includes("*") || t.includes(">")) {
      if (!opts.wildcards) return 'must not contain wildcards ("*" or ">")';
      if (t === "*") continue;
      if (t === ">" && last) continue;
      return t === ">"
        ? '">" is only allowed as the last token'
        : 'wildcards must be whole tokens ("*" or ">")';
    }
  }
  return undefined;
}

export function subject(what: string, opts: { wildcards: boolean; prefix: boolean }) {
  return field((v) => {
    const s = expectString(v);
    const problem = subjectProblem(s, opts);
    if (problem !== undefined) fail(`invalid ${what} ${quote(s)}: ${problem}`);
    return s;
  });
}

export const headerName = field((v) => {
  const s = expectString(v);
  if (!HEADER_NAME.test(s)) fail(`invalid header name ${quote(s)}: no spaces, ":" or other separators`);
  return s;
});

/** A size in bytes: an integer, or a number with a unit (KiB, MiB, GiB; 1024-based); undefined if it is neither. */
export function sizeInBytes(v: unknown): number | undefined {
  const units: Record<string, number> = { "": 1, b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 };
  const m = typeof v === "number" ? [String(v), String(v), ""] : typeof v === "string" ? /^\s*(\d+)\s*([a-zA-Z]*)\s*$/.exec(v) : null;
  const unit = units[(m?.[2] ?? "").toLowerCase()];
  return !m || unit === undefined ? undefined : Number(m[1]) * unit;
}

/** A size in bytes: an integer, or a number with a unit (KiB, MiB, GiB; 1024-based). */
export function byteSize(min: number, max: number) {
  return field((v) => {
    const n = sizeInBytes(v);
    if (n === undefined) fail(`must be a size such as "64MiB", "512KiB" or a number of bytes (got ${quote(v)})`);
    if (!Number.isSafeInteger(n) || n < min || n > max) fail(`must be from ${min} to ${max} bytes (got ${quote(v)})`);
    return n;
  });
}

export function integer(min: number, max: number) {
  return field((v) => {
    let n: number | undefined;
    if (typeof v === "number") n = v;
    else if (typeof v === "string" && /^\s*\d+\s*$/.test(v)) n = Number(v.trim());
    else fail(`must be an integer from ${min} to ${max} (got ${describeType(v)})`);
    if (!Number.isInteger(n) || n < min || n > max) {
      fail(`must be an integer from ${min} to ${max} (got ${quote(v)})`);
    }
    return n;
  });
}

export const boolean = field((v) => {
  if (typeof v === "boolean") return v;
  if (v === "true") return true;
  if (v === "false") return false;
  return fail(`must be true or false (got ${quote(v)})`);
});

export function duration(opts: { allowZero: boolean }) {
  return field((v) => {
    const ms = parseDuration(v);
    if (ms === 0 && !opts.allowZero) fail("must be longer than 0");
    return ms;
  });
}

export function oneOf<const T extends readonly string[]>(
  values: T,
  opts: { lowercase: boolean } = { lowercase: false },
) {
  return field((v): T[number] => {
    const s = typeof v === "string" && opts.lowercase ? v.toLowerCase() : v;
    if (typeof s === "string" && (values as readonly string[]).includes(s)) return s as T[number];
    return fail(`must be one of ${values.join(", ")} (got ${quote(v)})`);
  });
}

/** `host:port` where host is a name, an IPv4 address or a bracketed IPv6 address. */
export function parseHostPort(s: string, portMin: number): { host: string; port: number } | undefined {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$/.exec(s);
  if (m === null || m[1] === undefined || m[2] === undefined) return undefined;
  const port = Number(m[2]);
  if (port < portMin || port > 65535) return undefined;
  const host = m[1].startsWith("[") ? m[1].slice(1, -1) : m[1];
  return { host, port };
}

export const hostPort = field((v) => {
  const s = expectString(v);
  if (parseHostPort(s, 1) === undefined) fail(`invalid address ${quote(s)}: use host:port (port 1-65535)`);
  return s;
});

export const listenAddress = field((v) => {
  const s = expectString(v);
  const hp = parseHostPort(s, 0);
  if (hp === undefined)
    fail(`invalid listen address ${quote(s)}: use host:port (port 0-65535), e.g. "0.0.0.0:9464"`);
  return hp;
});

// ---------------------------------------------------------------------------------------------
// Objects and lists

/** Prefix of the internal message of an unknown-key issue; the rest lists the allowed keys. */
export const ALLOWED_KEYS = "allowed keys: ";

/** A strict object (unknown keys rejected) whose unknown-key issue carries the allowed keys. */
export function obj<S extends z.core.$ZodLooseShape>(shape: S) {
  return z.strictObject(shape, {
    error: (iss) =>
      iss.code === "unrecognized_keys" ? ALLOWED_KEYS + Object.keys(shape).join(",") : undefined,
  });
}

export function list<T extends z.ZodType>(item: T, minMessage: string) {
  return z.array(item).min(1, { error: minMessage });
}
