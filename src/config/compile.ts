/**
 * Validated config (schema.ts output) → the frozen, fully-defaulted `RelayConfig` (types.ts).
 * The defaults themselves live in defaults.ts; `DEFAULTS`, the default names and `parseFieldSource`
 * are re-exported here for existing importers.
 */
import { createHash } from "node:crypto";
import { ErrorCodes, RelayError } from "../errors.js";
import { DEFAULTS, DEFAULT_STRIP_HEADERS, defaultDeadLetterSubject, defaultDurableName } from "./defaults.js";
import { REDACTED, redactUrl } from "./redact.js";
import type { ParsedConfig, ParsedLink, ParsedRegion } from "./schema-root.js";
import type {
  BadMessagePolicy,
  GuardConfig,
  LinkConfig,
  RedisGuardConnection,
  RegionAuth,
  RegionConfig,
  RelayConfig,
  SubjectTransform,
  TlsConfig,
} from "./types.js";

export { DEFAULTS, DEFAULT_STRIP_HEADERS, defaultDeadLetterSubject, defaultDurableName } from "./defaults.js";
export { parseFieldSource } from "./field-source.js";

/** Object.freeze, recursively, on plain objects and arrays. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** A Map whose set/delete/clear throw once constructed. Entries are deep-frozen. */
class FrozenMap<K, V> extends Map<K, V> {
  readonly #sealed: boolean;
  constructor(entries: Iterable<readonly [K, V]>) {
    super();
    for (const [k, v] of entries) super.set(k, deepFreeze(v));
    this.#sealed = true;
    Object.freeze(this);
  }
  override set(key: K, value: V): this {
    if (this.#sealed) throw new TypeError("the config's region map is read-only");
    return super.set(key, value);
  }
  override delete(_key: K): boolean {
    throw new TypeError("the config's region map is read-only");
  }
  override clear(): void {
    throw new TypeError("the config's region map is read-only");
  }
}

function invalid(message: string): never {
  throw new RelayError(ErrorCodes.CONFIG_INVALID, message);
}

type ParsedTls = NonNullable<ParsedRegion["tls"]>;

function compileTls(tls: ParsedTls | undefined): TlsConfig | undefined {
  if (tls === undefined) return undefined;
  return {
    ...(tls.ca === undefined ? {} : { caFile: tls.ca }),
    ...(tls.cert === undefined ? {} : { certFile: tls.cert }),
    ...(tls.key === undefined ? {} : { keyFile: tls.key }),
  };
}

function compileAuth(name: string, auth: ParsedRegion["auth"]): RegionAuth | undefined {
  if (auth === undefined) return undefined;
  if (auth.token !== undefined) return { kind: "token", token: auth.token };
  if (auth.user !== undefined && auth.password !== undefined) {
    return { kind: "user", user: auth.user, password: auth.password };
  }
  if (auth.creds !== undefined) return { kind: "creds", credsFile: auth.creds };
  if (auth.nkey !== undefined) return { kind: "nkey", seedFile: auth.nkey };
  return invalid(`regions.${name}.auth: give exactly one of token, user + password, creds or nkey`);
}

function compileRegion(name: string, r: ParsedRegion): RegionConfig {
  const auth = compileAuth(name, r.auth);
  const tls = compileTls(r.tls);
  return {
    name,
    servers: [...r.servers],
    ...(auth === undefined ? {} : { auth }),
    ...(tls === undefined ? {} : { tls }),
    ...(r.domain === undefined ? {} : { domain: r.domain }),
  };
}

function compileGuard(link: ParsedLink, ackWaitMs: number): GuardConfig | undefined {
  const g = link.guard;
  if (g === undefined) return undefined;
  let store: GuardConfig["store"];
  if (g.redis !== undefined) {
    const r = g.redis;
    const tls = compileTls(r.tls);
    const redis: RedisGuardConnection = {
      kind: "redis",
      ...(r.url === undefined ? {} : { url: r.url }),
      ...(r.sentinel === undefined
        ? {}
        : {
            sentinel: {
              name: r.sentinel.name,
              nodes: [...r.sentinel.nodes],
              ...(r.sentinel.username === undefined ? {} : { username: r.sentinel.username }),
              ...(r.sentinel.password === undefined ? {} : { password: r.sentinel.password }),
            },
          }),
      ...(r.cluster === undefined ? {} : { cluster: { nodes: [...r.cluster.nodes] } }),
      ...(r.username === undefined ? {} : { username: r.username }),
      ...(r.password === undefined ? {} : { password: r.password }),
      ...(tls === undefined ? {} : { tls }),
      waitReplicas: r.waitReplicas ?? DEFAULTS.redisWaitReplicas,
      waitTimeoutMs: r.waitTimeout ?? DEFAULTS.redisWaitTimeoutMs,
    };
    store = redis;
  } else if (g.memory === true) {
    store = { kind: "memory" };
  } else {
    return invalid(`links.${link.name}.guard: give exactly one store: redis or memory: true`);
  }
  const versions =
    g.versions?.entity !== undefined && g.versions.version !== undefined
      ? {
          entity: g.versions.entity,
          version: g.versions.version,
          ...(g.versions.expectedEntities === undefined
            ? {}
            : { expectedEntities: g.versions.expectedEntities }),
        }
      : undefined;
  return {
    store,
    idTtlMs: g.idTtl ?? DEFAULTS.idTtlMs,
    claimTtlMs: g.claimTtl ?? DEFAULTS.claimTtlAckWaitFactor * ackWaitMs,
    ...(versions === undefined ? {} : { versions }),
    strict: g.strict ?? DEFAULTS.guardStrict,
  };
}

function compileLink(l: ParsedLink): LinkConfig {
  const ackWaitMs = l.ackWait ?? DEFAULTS.ackWaitMs;
  const fromBucket = l.from.bucket;
  const toBucket = l.to.bucket;
  // A KV link: `$KV.<from>.<key>` is written as `$KV.<to>.<key>` (docs/kv.md); to.subject is refused for it.
  const kvTransform = fromBucket !== undefined && toBucket !== undefined && fromBucket !== toBucket;
  const transform: SubjectTransform = kvTransform
    ? { stripPrefix: `$KV.${fromBucket}.`, addPrefix: `$KV.${toBucket}.` }
    : {
        ...(l.to.subject?.stripPrefix === undefined ? {} : { stripPrefix: l.to.subject.stripPrefix }),
        ...(l.to.subject?.addPrefix === undefined ? {} : { addPrefix: l.to.subject.addPrefix }),
      };
  const badMessage: BadMessagePolicy =
    l.onBadMessage === "halt"
      ? { action: "halt" }
      : { action: "dead-letter", subject: l.onBadMessage?.deadLetter ?? defaultDeadLetterSubject(l.name) };
  const stripHeaders = [...DEFAULT_STRIP_HEADERS];
  for (const h of l.stripHeaders ?? []) if (!stripHeaders.includes(h)) stripHeaders.push(h);
  const guard = compileGuard(l, ackWaitMs);
  return {
    name: l.name,
    from: {
      region: l.from.region,
      stream: fromBucket === undefined ? (l.from.stream ?? "") : `KV_${fromBucket}`,
      ...(l.from.filter === undefined ? {} : { filterSubject: l.from.filter }),
      ...(fromBucket === undefined ? {} : { bucket: fromBucket }),
    },
    to: {
      region: l.to.region,
      stream: toBucket === undefined ? (l.to.stream ?? "") : `KV_${toBucket}`,
      ...(toBucket === undefined ? {} : { bucket: toBucket }),
      transform,
      ...((l.to.expectStream ?? DEFAULTS.expectStream) ? { expectStream: true as const } : {}),
      ...((l.to.deleteMarkers ?? DEFAULTS.deleteMarkers) === "drop" ? { deleteMarkers: "drop" as const } : {}),
      ...((l.to.order ?? DEFAULTS.order) === "strict" ? { order: "strict" as const } : {}),
    },
    batchSize: l.batchSize ?? DEFAULTS.batchSize,
    inFlight: l.inFlight ?? (guard === undefined ? DEFAULTS.inFlight : DEFAULTS.guardedInFlight),
    inFlightBytes: l.inFlightBytes ?? DEFAULTS.inFlightBytes,
    ackWaitMs,
    sourceAcks: l.sourceAcks ?? DEFAULTS.sourceAcks,
    publishTimeoutMs: l.publishTimeout ?? DEFAULTS.publishTimeoutMs,
    stripHeaders,
    maxHops: l.maxHops ?? DEFAULTS.maxHops,
    durableName: l.durable ?? defaultDurableName(l.name),
    ...(guard === undefined ? {} : { guard }),
    badMessage,
    onGap: l.onGap ?? DEFAULTS.onGap,
    ...(l.maxReplayAge === undefined ? {} : { maxReplayAgeMs: l.maxReplayAge }),
    stallAfterMs: l.stallAfter ?? DEFAULTS.stallAfterMs,
    ...(l.partitions === undefined
      ? {}
      : { partitions: { count: l.partitions.count, token: l.partitions.token } }),
    startAt: l.startAt ?? DEFAULTS.startAt,
    audit: {
      // A KV link is checked by verify --kv (a bucket keeps only the winning writes): never audited.
      enabled: fromBucket === undefined && (l.audit?.enabled ?? DEFAULTS.audit.enabled),
      afterMs: l.audit?.after ?? DEFAULTS.audit.afterMs,
      sweepEveryMs: l.audit?.sweepEvery ?? DEFAULTS.audit.sweepEveryMs,
      repair: l.audit?.repair ?? DEFAULTS.audit.repair,
      maxReadRate: l.audit?.maxReadRate ?? DEFAULTS.audit.maxReadRate,
    },
    ...(l.maxRate === undefined
      ? {}
      : {
          maxRate: {
            ...(l.maxRate.messages === undefined ? {} : { messages: l.maxRate.messages }),
            ...(l.maxRate.bytes === undefined ? {} : { bytes: l.maxRate.bytes }),
          },
        }),
  };
}

/**
 * Applies every default and freezes the result (objects and arrays deeply; the regions Map
 * rejects set/delete/clear). Expects a config that passed `validateConfig`.
 */
export function compileConfig(
  parsed: ParsedConfig,
  meshes: ReadonlyMap<string, readonly string[]> = new Map(),
): RelayConfig {
  const regions = new FrozenMap<string, RegionConfig>(
    Object.entries(parsed.regions).map(([name, r]) => [name, compileRegion(name, r)] as const),
  );
  const listen = parsed.http?.listen;
  return deepFreeze({
    regions,
    links: parsed.links.map(compileLink),
    http: {
      host: listen?.host ?? DEFAULTS.httpHost,
      port: listen?.port ?? DEFAULTS.httpPort,
      ...(parsed.http?.token === undefined ? {} : { token: parsed.http.token }),
      protectMetrics: parsed.http?.protectMetrics ?? DEFAULTS.protectMetrics,
    },
    log: {
      level: parsed.log?.level ?? DEFAULTS.logLevel,
      progressIntervalMs: parsed.log?.progressInterval ?? DEFAULTS.progressLogMs,
    },
    shutdownGraceMs: parsed.shutdown?.grace ?? DEFAULTS.shutdownGraceMs,
    group: {
      bucket: parsed.group?.bucket ?? DEFAULTS.leaseBucket,
      leaseMs: parsed.group?.lease ?? DEFAULTS.leaseMs,
      renewMs: parsed.group?.renew ?? DEFAULTS.leaseRenewMs,
    },
    reload: { watch: parsed.reload?.watch ?? DEFAULTS.reloadWatch },
    ...(meshes.size === 0
      ? {}
      : { meshes: [...meshes].map(([name, links]) => ({ name, links: [...links] })) }),
  });
}

/**
 * JSON with object keys sorted and Maps written as objects: two configs that mean the same give the
 * same text (what a config reload compares links by, and what the config hash is taken over).
 * `replace` may substitute a value by its key (e.g. to leave secrets out).
 */
export function canonicalJson(value: unknown, replace?: (key: string, value: unknown) => unknown): string {
  const walk = (v: unknown): unknown => {
    if (v instanceof Map) v = Object.fromEntries(v);
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v !== "object" || v === null) return v;
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(v).sort()) {
      const item = (v as Record<string, unknown>)[key];
      if (item === undefined) continue;
      out[key] = walk(replace ? replace(key, item) : item);
    }
    return out;
  };
  return JSON.stringify(walk(value));
}

/**
 * The config's hash as `/status` and `relay_config_info{hash}` show it: sha256 of its canonical JSON,
 * 16 hex digits. Secrets are left out (tokens, passwords, URL credentials): the hash is published,
 * and a short secret could be guessed from it. So a change of a secret alone leaves the hash as it was
 * (the reload still applies it).
 */
export function configHash(config: RelayConfig): string {
  const text = canonicalJson(config, (key, value) => {
    if ((key === "token" || key === "password") && typeof value === "string") return REDACTED;
    if (typeof value === "string" && value.includes("@")) return redactUrl(value);
    if (Array.isArray(value))
      return value.map((item) => (typeof item === "string" && item.includes("@") ? redactUrl(item) : item));
    return value;
  });
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}
