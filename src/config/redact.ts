/**
 * Keeping secrets out of logs and error messages. Secrets are: auth tokens, passwords, and the
 * credentials part of a URL (`nats://user:PASS@host`, `nats://TOKEN@host`, `redis://:PASS@host`).
 * File paths (creds, nkey seed, TLS) are not secrets and are shown.
 */
import type { RegionAuth, RelayConfig, TlsConfig } from "./types.js";

export const REDACTED = "[redacted]";

interface UserInfo {
  /** Everything before the user info, e.g. "redis://". */
  readonly head: string;
  readonly user: string;
  /** Undefined when the user info has no ":" (in a NATS URL, a lone user is a token). */
  readonly password: string | undefined;
  /** Everything after the "@". */
  readonly tail: string;
}

/**
 * Finds `user[:password]@` in a URL or a `host:port` string. The user info runs to the last "@",
 * so a password with an unencoded "/" or "#" is still caught (over-redacting is harmless).
 */
function splitUserInfo(url: string): UserInfo | undefined {
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url);
  const start = scheme === null ? 0 : scheme[0].length;
  const at = url.lastIndexOf("@");
  if (at < start) return undefined;
  const info = url.slice(start, at);
  const colon = info.indexOf(":");
  return {
    head: url.slice(0, start),
    user: colon < 0 ? info : info.slice(0, colon),
    password: colon < 0 ? undefined : info.slice(colon + 1),
    tail: url.slice(at + 1),
  };
}

/**
 * `redis://:pw@redis:6379/0` → `redis://:[redacted]@redis:6379/0`,
 * `nats://relay:pw@a1:4222` → `nats://relay:[redacted]@a1:4222`,
 * `nats://s3cr3t@a1:4222` → `nats://[redacted]@a1:4222`. A string without user info is returned as is.
 */
export function redactUrl(url: string): string {
  const u = splitUserInfo(url);
  if (u === undefined) return url;
  if (u.password === undefined) return `${u.head}${REDACTED}@${u.tail}`;
  return `${u.head}${u.user}:${REDACTED}@${u.tail}`;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The secret parts of a URL's user info, raw and percent-decoded. */
export function urlSecrets(url: string): string[] {
  const u = splitUserInfo(url);
  if (u === undefined) return [];
  const secret = u.password ?? u.user;
  return secret === "" ? [] : [secret, safeDecode(secret)];
}

function uniqueLongestFirst(values: Iterable<string>): string[] {
  return [...new Set([...values].filter((s) => s.length > 0))].sort((a, b) => b.length - a.length);
}

function redactAuth(auth: RegionAuth): Record<string, string> {
  switch (auth.kind) {
    case "token":
      return { kind: "token", token: REDACTED };
    case "user":
      return { kind: "user", user: auth.user, password: REDACTED };
    case "creds":
      return { kind: "creds", credsFile: auth.credsFile };
    case "nkey":
      return { kind: "nkey", seedFile: auth.seedFile };
  }
}

function plainTls(tls: TlsConfig): Record<string, string> {
  const out: Record<string, string> = {};
  if (tls.caFile !== undefined) out.caFile = tls.caFile;
  if (tls.certFile !== undefined) out.certFile = tls.certFile;
  if (tls.keyFile !== undefined) out.keyFile = tls.keyFile;
  return out;
}

/**
 * A JSON-safe copy of the config for logs and `--print-config`: regions become an object keyed by
 * name, and every secret (token, password, URL credentials) is replaced by "[redacted]".
 */
export function redactConfig(config: RelayConfig): unknown {
  const regions: Record<string, unknown> = {};
  for (const [name, r] of config.regions) {
    regions[name] = {
      name: r.name,
      servers: r.servers.map(redactUrl),
      ...(r.auth === undefined ? {} : { auth: redactAuth(r.auth) }),
      ...(r.tls === undefined ? {} : { tls: plainTls(r.tls) }),
      ...(r.domain === undefined ? {} : { domain: r.domain }),
    };
  }
  const links = config.links.map((l) => {
    let guard: unknown;
    if (l.guard !== undefined) {
      const s = l.guard.store;
      const store =
        s.kind === "memory"
          ? { kind: "memory" }
          : {
              kind: "redis",
              ...(s.url === undefined ? {} : { url: redactUrl(s.url) }),
              ...(s.sentinel === undefined
                ? {}
                : { sentinel: { name: s.sentinel.name, nodes: [...s.sentinel.nodes] } }),
              ...(s.cluster === undefined ? {} : { cluster: { nodes: [...s.cluster.nodes] } }),
              ...(s.password === undefined ? {} : { password: REDACTED }),
              ...(s.tls === undefined ? {} : { tls: plainTls(s.tls) }),
            };
      guard = {
        store,
        idTtlMs: l.guard.idTtlMs,
        claimTtlMs: l.guard.claimTtlMs,
        ...(l.guard.versions === undefined
          ? {}
          : {
              versions: { entity: { ...l.guard.versions.entity }, version: { ...l.guard.versions.version } },
            }),
        strict: l.guard.strict,
      };
    }
    return {
      name: l.name,
      from: { ...l.from },
      to: { region: l.to.region, stream: l.to.stream, ...(l.to.bucket === undefined ? {} : { bucket: l.to.bucket }), transform: { ...l.to.transform }, ...(l.to.expectStream ? { expectStream: l.to.expectStream } : {}), ...(l.to.order ? { order: l.to.order } : {}) },
      batchSize: l.batchSize,
      inFlight: l.inFlight,
      ackWaitMs: l.ackWaitMs,
      publishTimeoutMs: l.publishTimeoutMs,
      stripHeaders: [...l.stripHeaders],
      maxHops: l.maxHops,
      durableName: l.durableName,
      ...(guard === undefined ? {} : { guard }),
      badMessage: { ...l.badMessage },
      onGap: l.onGap,
      ...(l.maxReplayAgeMs === undefined ? {} : { maxReplayAgeMs: l.maxReplayAgeMs }),
      stallAfterMs: l.stallAfterMs,
      ...(l.maxRate === undefined ? {} : { maxRate: { ...l.maxRate } }),
    };
  });
  return {
    regions,
    links,
    http: {
      host: config.http.host,
      port: config.http.port,
      ...(config.http.token === undefined ? {} : { token: REDACTED }),
      protectMetrics: config.http.protectMetrics,
    },
    log: { level: config.log.level },
    shutdownGraceMs: config.shutdownGraceMs,
  };
}

/**
 * Every secret value in the config (tokens, passwords, URL credentials raw and percent-decoded),
 * longest first, so a logger can scrub them from any text (see `scrubSecrets`).
 */
export function secretsOf(config: RelayConfig): string[] {
  const found: string[] = [];
  for (const r of config.regions.values()) {
    for (const s of r.servers) found.push(...urlSecrets(s));
    if (r.auth?.kind === "token") found.push(r.auth.token);
    if (r.auth?.kind === "user") found.push(r.auth.password);
  }
  if (config.http.token !== undefined) found.push(config.http.token);
  for (const l of config.links) {
    const s = l.guard?.store;
    if (s?.kind === "redis") {
      if (s.url !== undefined) found.push(...urlSecrets(s.url));
      if (s.password !== undefined) found.push(s.password);
      if (s.sentinel?.password !== undefined) found.push(s.sentinel.password);
    }
  }
  return uniqueLongestFirst(found);
}

/**
 * Secrets in a raw (parsed, interpolated, not yet validated) config tree: string values under
 * `token` / `password` keys anywhere, and URL credentials in any string. Used to scrub error text.
 */
export function collectSecrets(tree: unknown): string[] {
  const found: string[] = [];
  const walk = (node: unknown, key: string | undefined): void => {
    if (typeof node === "string") {
      if (key === "token" || key === "password") found.push(node);
      if (node.includes("@")) found.push(...urlSecrets(node));
    } else if (Array.isArray(node)) {
      for (const item of node) walk(item, undefined);
    } else if (typeof node === "object" && node !== null) {
      for (const [k, v] of Object.entries(node)) walk(v, k);
    }
  };
  walk(tree, undefined);
  return uniqueLongestFirst(found);
}

/**
 * Replaces every occurrence of each secret in `text` with "[redacted]". Secrets shorter than 4
 * characters are only replaced where they appear quoted, so they do not mangle ordinary words.
 */
export function scrubSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of uniqueLongestFirst(secrets)) {
    if (secret.length >= 4) out = out.split(secret).join(REDACTED);
    else out = out.split(JSON.stringify(secret)).join(JSON.stringify(REDACTED));
  }
  return out;
}
