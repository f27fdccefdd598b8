/**
 * Validation of the config file (after YAML parsing and `${VAR}` interpolation).
 *
 * Two passes, both always run so that one run reports every problem:
 *  1. the zod schema: shapes, unknown keys (every object is strict), and each value on its own
 *     (durations, names, subjects, URLs...). Scalar values are converted here (durations → ms,
 *     `header:X` → FieldSource, `host:port` → { host, port }); defaults are applied later, in compile.ts.
 *  2. `crossChecks`: rules between fields (region references, duplicates, "exactly one of"),
 *     written defensively against a tree that may have failed pass 1.
 *
 * Problems are `{ path, message }`, printed as `links[1].to.region: unknown region "eu-wst" (...)`.
 * A message never contains a secret: values are only echoed for fields that are not secret, URLs are
 * echoed with their credentials redacted, and the loader scrubs every known secret as a last resort.
 */
import { z } from "zod";
import type { FieldSource } from "./types.js";
import { parseDuration, DurationError } from "./durations.js";
import { DEFAULTS, defaultDurableName, parseFieldSource } from "./compile.js";
import { redactUrl } from "./redact.js";

// ---------------------------------------------------------------------------------------------
// Problems and paths

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

// ---------------------------------------------------------------------------------------------
// Value descriptions for messages

function describeType(v: unknown): string {
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
function quote(v: unknown): string {
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (typeof v !== "string") return describeType(v);
  const s = redactUrl(v);
  return JSON.stringify(s.length > 60 ? `${s.slice(0, 60)}…` : s);
}

// ---------------------------------------------------------------------------------------------
// Scalar fields: z.unknown() piped through a checker, so every message is ours

class FieldError extends Error {}

function fail(message: string): never {
  throw new FieldError(message);
}

/** A required field whose value is checked and converted by `check` (which throws FieldError). */
function field<T>(check: (v: unknown) => T) {
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

function expectString(v: unknown): string {
  if (typeof v !== "string") fail(`must be a string (got ${describeType(v)})`);
  if (v.trim() === "") fail("must not be empty");
  return v;
}

/** A string whose value is never echoed (tokens, passwords). */
const secretString = field((v) => {
  if (typeof v !== "string") fail(`must be a string (got ${describeType(v)})`);
  if (v === "") fail("must not be empty");
  return v;
});

const nonEmptyString = field(expectString);

const filePath = field((v) => {
  const s = expectString(v);
  if (s !== s.trim()) fail(`file path ${quote(s)} has leading or trailing spaces`);
  return s;
});

const REGION_NAME = /^[a-z0-9][a-z0-9-]*$/;
const LINK_NAME = /^[a-z0-9][a-z0-9_-]*$/;
const REGION_NAME_RULE = 'use lowercase letters, digits and "-", starting with a letter or digit';
const LINK_NAME_RULE = 'use lowercase letters, digits, "-" and "_", starting with a letter or digit';

const linkName = field((v) => {
  const s = expectString(v);
  if (!LINK_NAME.test(s)) fail(`invalid link name ${quote(s)}: ${LINK_NAME_RULE}`);
  return s;
});

/** Region references in links: only the type here; existence is a cross check. */
const regionRef = nonEmptyString;

/** Stream, consumer and domain names share NATS's rule: no whitespace, ".", "*", ">", "/", "\". */
function natsName(what: string) {
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

function subject(what: string, opts: { wildcards: boolean; prefix: boolean }) {
  return field((v) => {
    const s = expectString(v);
    const problem = subjectProblem(s, opts);
    if (problem !== undefined) fail(`invalid ${what} ${quote(s)}: ${problem}`);
    return s;
  });
}

const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

const headerName = field((v) => {
  const s = expectString(v);
  if (!HEADER_NAME.test(s)) fail(`invalid header name ${quote(s)}: no spaces, ":" or other separators`);
  return s;
});

/** A size in bytes: an integer, or a number with a unit (KiB, MiB, GiB; 1024-based). */
function byteSize(min: number, max: number) {
  const units: Record<string, number> = { "": 1, b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 };
  return field((v) => {
    const m = typeof v === "number" ? [String(v), String(v), ""] : typeof v === "string" ? /^\s*(\d+)\s*([a-zA-Z]*)\s*$/.exec(v) : null;
    const unit = units[(m?.[2] ?? "").toLowerCase()];
    if (!m || unit === undefined) fail(`must be a size such as "64MiB", "512KiB" or a number of bytes (got ${quote(v)})`);
    const n = Number(m?.[1]) * (unit ?? 1);
    if (!Number.isSafeInteger(n) || n < min || n > max) fail(`must be from ${min} to ${max} bytes (got ${quote(v)})`);
    return n;
  });
}

function integer(min: number, max: number) {
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

const boolean = field((v) => {
  if (typeof v === "boolean") return v;
  if (v === "true") return true;
  if (v === "false") return false;
  return fail(`must be true or false (got ${quote(v)})`);
});

function duration(opts: { allowZero: boolean }) {
  return field((v) => {
    const ms = parseDuration(v);
    if (ms === 0 && !opts.allowZero) fail("must be longer than 0");
    return ms;
  });
}

function oneOf<const T extends readonly string[]>(
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

const hostPort = field((v) => {
  const s = expectString(v);
  if (parseHostPort(s, 1) === undefined) fail(`invalid address ${quote(s)}: use host:port (port 1-65535)`);
  return s;
});

const listenAddress = field((v) => {
  const s = expectString(v);
  const hp = parseHostPort(s, 0);
  if (hp === undefined)
    fail(`invalid listen address ${quote(s)}: use host:port (port 0-65535), e.g. "0.0.0.0:9464"`);
  return hp;
});

const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?\/?$/;

/** `nats://[user[:password]@]host[:port]`, `tls://...` or `host:port`. */
const serverUrl = field((v) => {
  const s = expectString(v);
  const bad = (): never =>
    fail(`invalid server ${quote(s)}: use nats://host:port, tls://host:port or host:port`);
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(s);
  if (scheme !== null && scheme[1] !== "nats" && scheme[1] !== "tls") return bad();
  let rest = scheme === null ? s : s.slice(scheme[0].length);
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    if (rest.slice(0, at).includes("/")) return bad();
    rest = rest.slice(at + 1);
  }
  const m = HOST.exec(rest);
  if (m === null) return bad();
  const port = m[2];
  if (scheme === null && port === undefined) return bad(); // a bare host needs a scheme or a port
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return bad();
  return s;
});

const redisUrl = field((v) => {
  const s = expectString(v);
  let ok = /^rediss?:\/\//.test(s);
  if (ok) {
    try {
      ok = new URL(s).hostname !== "";
    } catch {
      ok = false;
    }
  }
  if (!ok) fail(`invalid Redis URL ${quote(s)}: use redis://[:password@]host:port[/db] or rediss://...`);
  return s;
});

const fieldSource = field((v): FieldSource => {
  const s = expectString(v);
  try {
    return parseFieldSource(s);
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
});

// ---------------------------------------------------------------------------------------------
// Objects and lists

/** Prefix of the internal message of an unknown-key issue; the rest lists the allowed keys. */
const ALLOWED_KEYS = "allowed keys: ";

/** A strict object (unknown keys rejected) whose unknown-key issue carries the allowed keys. */
function obj<S extends z.core.$ZodLooseShape>(shape: S) {
  return z.strictObject(shape, {
    error: (iss) =>
      iss.code === "unrecognized_keys" ? ALLOWED_KEYS + Object.keys(shape).join(",") : undefined,
  });
}

function list<T extends z.ZodType>(item: T, minMessage: string) {
  return z.array(item).min(1, { error: minMessage });
}

const TlsSchema = obj({ ca: filePath.optional(), cert: filePath.optional(), key: filePath.optional() });

const AuthSchema = obj({
  token: secretString.optional(),
  user: nonEmptyString.optional(),
  password: secretString.optional(),
  creds: filePath.optional(),
  nkey: filePath.optional(),
});

const RegionSchema = obj({
  servers: list(serverUrl, "must list at least one server"),
  auth: AuthSchema.optional(),
  tls: TlsSchema.optional(),
  domain: natsName("JetStream domain").optional(),
});

const RedisSchema = obj({
  url: redisUrl.optional(),
  sentinel: obj({
    name: nonEmptyString,
    nodes: list(hostPort, "must list at least one sentinel"),
    /** The sentinels' own ACL user and password (Sentinel's requirepass / ACL), apart from the data nodes'. */
    username: nonEmptyString.optional(),
    password: secretString.optional(),
  }).optional(),
  cluster: obj({ nodes: list(hostPort, "must list at least one node") }).optional(),
  /** ACL user (Redis 6+); the password is then that user's. */
  username: nonEmptyString.optional(),
  password: secretString.optional(),
  tls: TlsSchema.optional(),
  /** A commit counts once WAIT reports this many replicas (0: no WAIT). */
  waitReplicas: integer(0, 16).optional(),
  waitTimeout: duration({ allowZero: false }).optional(),
});

const GuardSchema = obj({
  redis: RedisSchema.optional(),
  memory: boolean.optional(),
  idTtl: duration({ allowZero: false }).optional(),
  claimTtl: duration({ allowZero: false }).optional(),
  versions: obj({
    entity: fieldSource.optional(),
    version: fieldSource.optional(),
    /** Sizes the Redis layout of versions (hashes of ~64 entities each); fixed for a scope when first used. */
    expectedEntities: integer(1, 1_000_000_000_000).optional(),
  }).optional(),
  strict: boolean.optional(),
});

const DeadLetterSchema = obj({
  deadLetter: subject("dead-letter subject", { wildcards: false, prefix: false }),
});

/** `"halt"` or `{ deadLetter: <subject> }`. */
const badMessagePolicy = z.unknown().transform((v, ctx): { deadLetter: string } | "halt" => {
  if (v === "halt") return "halt";
  if (typeof v === "object" && v !== null && !Array.isArray(v)) {
    const r = DeadLetterSchema.safeParse(v);
    if (r.success) return r.data;
    for (const iss of r.error.issues) ctx.issues.push({ ...iss, input: undefined } as never);
    return z.NEVER;
  }
  ctx.issues.push({
    code: "custom",
    message: `must be "halt" or { deadLetter: <subject> } (got ${quote(v)})`,
    input: undefined,
  });
  return z.NEVER;
});

const LinkSchema = obj({
  name: linkName,
  from: obj({
    region: regionRef,
    stream: natsName("stream name"),
    filter: subject("subject filter", { wildcards: true, prefix: false }).optional(),
  }),
  to: obj({
    region: regionRef,
    stream: natsName("stream name"),
    subject: obj({
      stripPrefix: subject("subject prefix", { wildcards: false, prefix: true }).optional(),
      addPrefix: subject("subject prefix", { wildcards: false, prefix: true }).optional(),
    }).optional(),
    /** Every publish carries `Nats-Expected-Stream: <stream>` (stored with the message): the server refuses another stream. */
    expectStream: boolean.optional(),
  }),
  batchSize: integer(1, 10_000).optional(),
  inFlight: integer(1, 65_536).optional(),
  inFlightBytes: byteSize(64 * 1024, 16 * 1024 ** 3).optional(),
  ackWait: duration({ allowZero: false }).optional(),
  sourceAcks: oneOf(["each", "cumulative"] as const).optional(),
  publishTimeout: duration({ allowZero: false }).optional(),
  stripHeaders: z.array(headerName).optional(),
  maxHops: integer(1, 255).optional(),
  durable: natsName("durable consumer name").optional(),
  onBadMessage: badMessagePolicy.optional(),
  onGap: oneOf(["continue", "resync", "halt"] as const).optional(),
  maxReplayAge: duration({ allowZero: false }).optional(),
  stallAfter: duration({ allowZero: false }).optional(),
  guard: GuardSchema.optional(),
  partitions: obj({ count: integer(2, 1_024), token: integer(1, 32) }).optional(),
});

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

/** The whole file. Output: values checked and converted, optional fields still optional. */
export const ConfigSchema = obj({
  regions: z.record(
    z.string().regex(REGION_NAME, { error: `invalid region name: ${REGION_NAME_RULE}` }),
    RegionSchema,
  ),
  links: list(LinkSchema, "must list at least one link"),
  http: obj({
    listen: listenAddress.optional(),
    token: z.string().min(16, { error: "must be at least 16 characters (use a random secret, e.g. from ${RELAY_HTTP_TOKEN})" }).optional(),
    protectMetrics: z.boolean().optional(),
  }).optional(),
  log: obj({ level: oneOf(LOG_LEVELS, { lowercase: true }).optional(), progressInterval: duration({ allowZero: true }).optional() }).optional(),
  shutdown: obj({ grace: duration({ allowZero: true }).optional() }).optional(),
  group: obj({
    bucket: z.string().regex(/^[-\w]+$/, { error: "must be a KV bucket name: letters, digits, - and _" }).optional(),
    lease: duration({ allowZero: false }).optional(),
    renew: duration({ allowZero: false }).optional(),
  }).optional(),
  reload: obj({ watch: boolean.optional() }).optional(),
});

export type ParsedConfig = z.output<typeof ConfigSchema>;
export type ParsedLink = ParsedConfig["links"][number];
export type ParsedRegion = ParsedConfig["regions"][string];

// ---------------------------------------------------------------------------------------------
// zod issues → problems

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

function issueProblems(iss: z.core.$ZodIssue, tree: unknown, prefix: ConfigPath = []): ConfigProblem[] {
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

// ---------------------------------------------------------------------------------------------
// Cross-field checks (on the raw tree; tolerant of anything pass 1 rejects)

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function asString(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function has(o: Record<string, unknown>, key: string): boolean {
  return o[key] !== undefined;
}

function listWords(words: readonly string[]): string {
  if (words.length <= 1) return words.join("");
  return `${words.slice(0, -1).join(", ")} and ${words[words.length - 1] ?? ""}`;
}

function checkTls(tls: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const t = asRecord(tls);
  if (t === undefined) return;
  if (has(t, "cert") && !has(t, "key"))
    out.push({ path, message: "cert requires key (give both, or neither)" });
  if (has(t, "key") && !has(t, "cert"))
    out.push({ path, message: "key requires cert (give both, or neither)" });
}

function checkAuth(auth: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const a = asRecord(auth);
  if (a === undefined) return;
  const forms: string[] = [];
  if (has(a, "token")) forms.push("token");
  if (has(a, "user") || has(a, "password")) forms.push("user");
  if (has(a, "creds")) forms.push("creds");
  if (has(a, "nkey")) forms.push("nkey");
  if (forms.length !== 1) {
    out.push({
      path,
      message:
        "give exactly one of token, user + password, creds or nkey " +
        `(found ${forms.length === 0 ? "none" : listWords(forms)})`,
    });
    return;
  }
  if (has(a, "user") && !has(a, "password")) out.push({ path, message: "user requires password" });
  if (has(a, "password") && !has(a, "user")) out.push({ path, message: "password requires user" });
}

function checkGuard(guard: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const g = asRecord(guard);
  if (g === undefined) return;
  const stores: string[] = [];
  if (has(g, "redis")) stores.push("redis");
  if (g.memory === true || g.memory === "true") stores.push("memory");
  if (stores.length !== 1) {
    out.push({
      path,
      message: `give exactly one store: redis or memory: true (found ${stores.length === 0 ? "none" : "both"})`,
    });
  }
  const redis = asRecord(g.redis);
  if (redis !== undefined) {
    const rpath = [...path, "redis"];
    const kinds = ["url", "sentinel", "cluster"].filter((k) => has(redis, k));
    if (kinds.length !== 1) {
      out.push({
        path: rpath,
        message: `give exactly one of url, sentinel or cluster (found ${kinds.length === 0 ? "none" : listWords(kinds)})`,
      });
    }
    const url = asString(redis.url);
    if (url !== undefined && has(redis, "password") && /^rediss?:\/\/[^/]*:[^/]*@/.test(url)) {
      out.push({ path: rpath, message: "give the password either in url or in password, not both" });
    }
    checkTls(redis.tls, [...rpath, "tls"], out);
  }
  const versions = asRecord(g.versions);
  if (versions !== undefined) {
    const vpath = [...path, "versions"];
    if (has(versions, "entity") && !has(versions, "version")) {
      out.push({ path: vpath, message: "entity requires version (give both, or neither)" });
    }
    if (has(versions, "version") && !has(versions, "entity")) {
      out.push({ path: vpath, message: "version requires entity (give both, or neither)" });
    }
  }
}

function intOrUndefined(v: unknown): number | undefined {
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "string" && /^\s*\d+\s*$/.test(v)) return Number(v.trim());
  return undefined;
}

/** Rules that span fields. Exported for tests; `validateConfig` runs it. */
/** A lease must outlive at least one failed renewal: renew at most every half lease. */
/**
 * A partitioned link needs a source filter with a `*` at the partition token: each partition's filter
 * is that filter with the token fixed to the partition number.
 */
function checkPartitions(link: Record<string, unknown>, from: Record<string, unknown> | undefined, i: number, out: ConfigProblem[]): void {
  const partitions = asRecord(link.partitions);
  if (partitions === undefined) return;
  const token = intOrUndefined(partitions.token);
  const filter = asString(from?.filter);
  if (filter === undefined) {
    out.push({
      path: ["links", i, "partitions"],
      message: "needs from.filter with a * at the partition token (e.g. filter: orders.*.> with token: 2)",
    });
    return;
  }
  if (token === undefined) return;
  const tokens = filter.split(".");
  if (tokens[token - 1] !== "*" || tokens.slice(0, token - 1).includes(">")) {
    out.push({
      path: ["links", i, "partitions", "token"],
      message: `from.filter ${quote(filter)} must have * as token ${token} (the partition number)`,
    });
  }
}

function checkGroup(group: Record<string, unknown> | undefined, out: ConfigProblem[]): void {
  if (group === undefined) return;
  const ms = (v: unknown, fallback: number) => {
    if (v === undefined) return fallback;
    try {
      return parseDuration(v);
    } catch {
      return undefined; // reported by the schema
    }
  };
  const lease = ms(group.lease, DEFAULTS.leaseMs);
  const renew = ms(group.renew, DEFAULTS.leaseRenewMs);
  if (lease !== undefined && renew !== undefined && renew * 2 > lease) {
    out.push({ path: ["group", "renew"], message: `must be at most half of group.lease (${lease} ms): a lease must outlive one failed renewal` });
  }
}

export function crossChecks(tree: unknown): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  const root = asRecord(tree);
  if (root === undefined) return out;

  checkGroup(asRecord(root.group), out);
  const regions = asRecord(root.regions);
  const known = regions === undefined ? undefined : Object.keys(regions);
  if (regions !== undefined) {
    if (known?.length === 0) out.push({ path: ["regions"], message: "must define at least one region" });
    for (const [name, region] of Object.entries(regions)) {
      const r = asRecord(region);
      if (r === undefined) continue;
      checkAuth(r.auth, ["regions", name, "auth"], out);
      checkTls(r.tls, ["regions", name, "tls"], out);
    }
  }

  if (!Array.isArray(root.links)) return out;
  const linkNames = new Map<string, number>();
  const durables = new Map<string, number>();
  root.links.forEach((raw, i) => {
    const link = asRecord(raw);
    if (link === undefined) return;
    const name = asString(link.name);
    let duplicateName = false;
    if (name !== undefined) {
      const first = linkNames.get(name);
      if (first !== undefined) {
        duplicateName = true;
        out.push({
          path: ["links", i, "name"],
          message: `duplicate link name ${quote(name)} (also links[${first}])`,
        });
      } else {
        linkNames.set(name, i);
      }
    }

    const from = asRecord(link.from);
    const to = asRecord(link.to);
    const fromRegion = asString(from?.region);
    const toRegion = asString(to?.region);
    if (known !== undefined) {
      for (const [side, region] of [
        ["from", fromRegion],
        ["to", toRegion],
      ] as const) {
        if (region !== undefined && !known.includes(region)) {
          out.push({
            path: ["links", i, side, "region"],
            message: `unknown region ${quote(region)} (known: ${known.join(", ") || "none"})`,
          });
        }
      }
    }
    if (fromRegion !== undefined && fromRegion === toRegion) {
      out.push({
        path: ["links", i, "to", "region"],
        message: `must differ from from.region (both are ${quote(fromRegion)})`,
      });
    }

    // Two links reading one source stream with one durable would share (and fight over) a consumer.
    const stream = asString(from?.stream);
    const explicitDurable = asString(link.durable);
    const durable = explicitDurable ?? (name === undefined ? undefined : defaultDurableName(name));
    if (fromRegion !== undefined && stream !== undefined && durable !== undefined) {
      const key = JSON.stringify([fromRegion, stream, durable]);
      const first = durables.get(key);
      if (first === undefined) {
        durables.set(key, i);
      } else if (explicitDurable !== undefined || !duplicateName) {
        out.push({
          path: ["links", i, "durable"],
          message:
            `durable ${quote(durable)} is already used by links[${first}] on the same source stream ` +
            `(stream ${stream} in ${fromRegion})${explicitDurable === undefined ? "; set a different durable" : ""}`,
        });
      }
    }

    checkPartitions(link, from, i, out);

    const batch = link.batchSize === undefined ? DEFAULTS.batchSize : intOrUndefined(link.batchSize);
    const defaultInFlight = link.guard === undefined ? DEFAULTS.inFlight : DEFAULTS.guardedInFlight;
    const inFlight = link.inFlight === undefined ? defaultInFlight : intOrUndefined(link.inFlight);
    if (
      batch !== undefined &&
      inFlight !== undefined &&
      batch > inFlight &&
      batch <= 10_000 &&
      inFlight >= 1
    ) {
      out.push({
        path: ["links", i, "batchSize"],
        message: `must not be larger than inFlight (${inFlight})`,
      });
    }

    checkGuard(link.guard, ["links", i, "guard"], out);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Entry point

export type ValidationResult =
  | { readonly ok: true; readonly config: ParsedConfig }
  | { readonly ok: false; readonly problems: readonly ConfigProblem[] };

function startsWith(path: ConfigPath, prefix: ConfigPath): boolean {
  return prefix.length <= path.length && prefix.every((seg, i) => path[i] === seg);
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

/**
 * Validates an interpolated config tree: the zod schema, then `crossChecks`. `skip` lists paths
 * already reported elsewhere (strings whose `${VAR}` could not be expanded); problems at or under
 * them are dropped. Problems come back in document order.
 */
export function validateConfig(tree: unknown, skip: readonly ConfigPath[] = []): ValidationResult {
  const result = ConfigSchema.safeParse(tree);
  const problems: ConfigProblem[] = [];
  if (!result.success) for (const iss of result.error.issues) problems.push(...issueProblems(iss, tree));
  problems.push(...crossChecks(tree));
  const kept = sortProblems(
    tree,
    problems.filter((p) => !skip.some((s) => startsWith(p.path, s))),
  );
  // With no problems left, a failed parse only had problems under `skip` (reported by the caller).
  if (kept.length > 0 || !result.success) return { ok: false, problems: kept };
  return { ok: true, config: result.data };
}
