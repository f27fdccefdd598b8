import type { Logger } from "pino";
import type { GuardConfig, RedisGuardConnection } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { FenceRefusals } from "./fence.js";
import { checkIds, tokenSource } from "./items.js";
import { CLUSTER_GROUPS, DEFAULT_EXPECTED_ENTITIES } from "./layout.js";
import { LayoutClient } from "./redis-layout.js";
import {
  DEFAULT_REDIS_TUNING,
  checkPersistence,
  checkRedisVersion,
  connectClient,
  createRedisClient,
  describeRedis,
  sanitizeError,
  secretsOf,
} from "./redis-connection.js";
import type { GuardPersistence, GuardRedisClient, PersistenceReport, RedisTuning } from "./redis-connection.js";
import { heldByEarlierRelay, markerGroups, markerKey, readMarker as readScopeEntry, writeMarker as writeScopeEntry } from "./marker.js";
import { evictionFinding, persistenceFinding, replicationFinding, summarize } from "./safety.js";
import { readEviction, readReplication } from "./safety-probe.js";
import type { ClaimedItem, ClaimOptions, ClaimResult, CommitOptions, Guard, GuardFence, GuardItem } from "./types.js";
import type { GuardMarkerEntry, GuardMarkerMark, GuardSafety } from "./types.js";

export interface RedisGuardDeps {
  readonly logger: Logger;
  readonly scope: string;
  readonly linkName: string;
  /** The link's lease key (see GuardDeps.fence); default: the link name. */
  readonly fence?: string;
  /** The caller's name among the scope's writers (see GuardDeps.writer); default: the fence. */
  readonly writer?: string;
  /** Timeouts and backoff; tests shorten them. */
  readonly tuning?: Partial<RedisTuning>;
  /** Buckets per idTtl (layout.ts); bench:guard compares the default with others. */
  readonly bucketsPerTtl?: number;
}

/**
 * The guard on Redis (layout.ts for the key layout, lua.ts for the scripts, redis-layout.ts for the
 * calls). A claim, commit or release is one script call per slot group of the batch: one call on a
 * single Redis or Sentinel. Every failure is a RelayError GUARD_UNAVAILABLE whose text names
 * host:port only.
 */
export class RedisGuard implements Guard {
  readonly kind = "redis" as const;
  private persisted: GuardPersistence | undefined;
  private client: GuardRedisClient | undefined;
  private readonly layout: LayoutClient;
  private readonly target: string;
  private readonly secrets: string[];
  private readonly tuning: RedisTuning;
  private readonly log: Logger;
  private readonly nextToken = tokenSource();
  private readonly refusals = new FenceRefusals();
  private down = false;
  private stopping = false;
  private lastSafety: GuardSafety | undefined;
  private persistenceReport: PersistenceReport | undefined;
  private readonly restoreListeners: (() => void)[] = [];
  private restoresWatched: GuardRedisClient | undefined;

  constructor(
    private readonly connection: RedisGuardConnection,
    private readonly config: Pick<GuardConfig, "idTtlMs" | "claimTtlMs" | "strict" | "versions">,
    private readonly deps: RedisGuardDeps,
  ) {
    this.target = describeRedis(connection);
    this.secrets = secretsOf(connection);
    const tuning = { ...DEFAULT_REDIS_TUNING, ...deps.tuning };
    const waitReplicas = connection.waitReplicas ?? 0;
    const waitTimeoutMs = connection.waitTimeoutMs ?? 1_000;
    // WAIT blocks for up to waitTimeout: the command timeout must not cut it short.
    if (waitReplicas > 0) tuning.commandTimeoutMs = Math.max(tuning.commandTimeoutMs, waitTimeoutMs + 1_000);
    this.tuning = tuning;
    // The caller's logger already names the link and component (see createGuard's deps).
    this.log = deps.logger.child({ store: this.target });
    this.layout = new LayoutClient({
      scope: deps.scope,
      groups: connection.cluster ? CLUSTER_GROUPS : 1,
      linkName: deps.linkName,
      fence: deps.fence ?? deps.linkName,
      writer: deps.writer ?? deps.fence ?? deps.linkName,
      idTtlMs: config.idTtlMs,
      claimTtlMs: config.claimTtlMs,
      expectedEntities: config.versions?.expectedEntities ?? DEFAULT_EXPECTED_ENTITIES,
      waitReplicas,
      waitTimeoutMs,
      ...(deps.bucketsPerTtl !== undefined ? { bucketsPerTtl: deps.bucketsPerTtl } : {}),
      target: this.target,
      log: this.log,
      client: () => this.client,
      unavailable: (op, err) => this.unavailable(op, err),
    });
  }

  /** Known after start(): whether Redis persists the versions (AOF) across a restart. */
  get persistence(): GuardPersistence | undefined {
    return this.persisted;
  }

  async start(): Promise<void> {
    const client = this.client ?? this.createClient();
    this.watchRestores(client);
    this.stopping = false;
    try {
      await connectClient(client, this.tuning.startTimeoutMs);
    } catch (err) {
      throw this.unavailable("connect", err);
    }
    let safety: GuardSafety;
    try {
      await checkRedisVersion(client, this.target);
      safety = await this.inspect(client);
    } catch (err) {
      if (err instanceof RelayError && err.code === ErrorCodes.GUARD_UNSUPPORTED) {
        this.stopping = true; // not retryable: do not leave a client reconnecting behind it
        client.disconnect();
      }
      throw this.unavailable("persistence check", err);
    }
    const refusal = this.config.strict ? this.refusal(safety) : undefined;
    if (refusal) {
      // Not retryable (a setting): the caller stops; do not leave a client reconnecting behind it.
      // Retryable (replicas missing): the link pauses and calls start() again.
      if (!refusal.isRetryable()) {
        this.stopping = true;
        client.disconnect();
      }
      throw refusal;
    }
    this.logSafety(safety);
  }

  /** The findings of the last settings check (start(), checkSafety()). */
  get safety(): GuardSafety | undefined {
    return this.lastSafety;
  }

  /**
   * The settings checks again (the link calls it periodically and after a reconnect: a failover may
   * land on a node with other settings). Logs when the set of unsafe reasons changes; never throws for
   * an unsafe setting (the caller decides), only GUARD_UNAVAILABLE when Redis cannot be asked.
   */
  async checkSafety(): Promise<GuardSafety> {
    const before = this.lastSafety?.unsafe.join(",");
    const safety = await this.storeCall("settings check", (c) => this.inspect(c));
    const now = safety.unsafe.join(",");
    if (before !== undefined && now !== before) {
      const unsafe = safety.findings.filter((f) => f.level === "unsafe");
      if (unsafe.length > 0) this.log.warn({ unsafe: safety.unsafe, findings: unsafe.map((f) => f.detail) }, "guard Redis settings are unsafe now");
      else this.log.info({ was: before }, "guard Redis settings are safe again");
    }
    return safety;
  }

  async readMarker(): Promise<GuardMarkerEntry | undefined> {
    const entry = await this.storeCall("marker read", (c) => readScopeEntry(c, this.deps.scope, this.fence, markerGroups(this.connection)));
    if (entry !== undefined || this.upgradeChecked) return entry;
    // Once per guard (the first read): a Redis that relays from before scope markers wrote to (see marker.ts).
    this.upgradeChecked = true;
    if (!(await this.storeCall("marker read", (c) => heldByEarlierRelay(c, this.deps.scope, this.fence)))) return undefined;
    this.log.info({ key: markerKey(this.deps.scope) }, "guard Redis holds this link's state from a relay before scope markers: writing its marker entry");
    await this.writeMarker("joined", { ifAbsent: true });
    return this.storeCall("marker read", (c) => readScopeEntry(c, this.deps.scope, this.fence, markerGroups(this.connection)));
  }

  async writeMarker(mark: GuardMarkerMark, opts: { ifAbsent?: boolean } = {}): Promise<boolean> {
    const waitReplicas = this.connection.waitReplicas ?? 0;
    const result = await this.storeCall("marker write", (c) =>
      writeScopeEntry(c, this.deps.scope, this.fence, mark, {
        ...(opts.ifAbsent ? { ifAbsent: true } : {}),
        waitReplicas,
        groups: markerGroups(this.connection),
        ...(this.connection.waitTimeoutMs !== undefined ? { waitTimeoutMs: this.connection.waitTimeoutMs } : {}),
      }),
    );
    if (result.written && result.replicas !== undefined && result.replicas < waitReplicas) {
      this.log.warn({ replicas: result.replicas, waitReplicas, key: markerKey(this.deps.scope) }, "guard scope marker written, but fewer replicas than waitReplicas acknowledged it");
    }
    return result.written;
  }

  onRestored(listener: () => void): void {
    this.restoreListeners.push(listener);
  }

  /** Persistence, eviction policy and replication (when waitReplicas is set) of the masters. */
  private async inspect(client: GuardRedisClient): Promise<GuardSafety> {
    const persistence = await checkPersistence(client);
    this.persisted = persistence.persistence;
    this.persistenceReport = persistence;
    const eviction = await readEviction(client);
    const waitReplicas = this.connection.waitReplicas ?? 0;
    const findings = [persistenceFinding(persistence), evictionFinding(eviction)];
    if (waitReplicas > 0) findings.push(replicationFinding(await readReplication(client), waitReplicas));
    const safety = summarize(findings);
    this.lastSafety = safety;
    return safety;
  }

  /** Under `strict`: the error that refuses the start, for the first unsafe finding. */
  private refusal(safety: GuardSafety): RelayError | undefined {
    const unsafe = safety.findings.find((f) => f.level === "unsafe");
    if (!unsafe) return undefined;
    if (unsafe.reason === "no_aof") {
      const text = "guard Redis runs without AOF (appendonly no): versions are lost when it restarts";
      return new RelayError(ErrorCodes.GUARD_NOT_DURABLE, `${this.target}: ${text} (guard.strict is set)`);
    }
    if (unsafe.reason === "replication") {
      // A state, not a setting: a replica that is restarting comes back. The link waits for it.
      return new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.target}: ${unsafe.detail} (guard.strict is set: waiting for the replicas)`);
    }
    return new RelayError(ErrorCodes.GUARD_NOT_DURABLE, `${this.target}: ${unsafe.detail} (guard.strict is set)`);
  }

  private logSafety(safety: GuardSafety): void {
    const report = this.persistenceReport;
    const fields = {
      persistence: report?.persistence,
      appendfsync: report?.appendfsync,
      reason: report?.reason,
    };
    if (report?.persistence === "none") {
      this.log.warn(fields, "guard Redis runs without AOF (appendonly no): versions are lost when it restarts");
    } else if (report?.persistence === "unknown") {
      // Managed Redis often blocks CONFIG; `strict` cannot be honoured, but refusing would make it
      // unusable there, so this stays a warning.
      this.log.warn(fields, "could not verify that the guard Redis persists versions (CONFIG GET refused)");
    } else if (report?.appendfsync === "no") {
      this.log.warn(fields, "guard Redis AOF uses appendfsync no: a crash may lose recent commits");
    }
    for (const f of safety.findings) {
      if (f.check === "persistence") continue;
      if (f.level === "unsafe") this.log.warn({ check: f.check, unsafe: f.reason }, `guard Redis is unsafe: ${f.detail}`);
      else if (f.level === "unknown") this.log.warn({ check: f.check }, `could not verify the guard Redis's ${f.check} settings: ${f.detail}`);
      else if (f.level === "warning") this.log.warn({ check: f.check }, f.detail);
    }
    const eviction = safety.findings.find((f) => f.check === "eviction");
    this.log.info({ ...fields, unsafe: safety.unsafe, eviction: eviction?.detail }, "guard Redis ready");
  }

  /** Calls the listeners of onRestored() when the client is ready again after it was down. */
  private watchRestores(client: GuardRedisClient): void {
    if (this.restoresWatched === client) return;
    this.restoresWatched = client;
    let wasDown = false;
    client.on("close", () => {
      wasDown = true;
    });
    client.on("ready", () => {
      if (!wasDown) return;
      wasDown = false;
      for (const listener of this.restoreListeners) listener();
    });
  }

  /** One call to Redis outside the scripts; failures become GUARD_UNAVAILABLE naming host:port only. */
  private async storeCall<T>(op: string, call: (c: GuardRedisClient) => Promise<T>): Promise<T> {
    const client = this.client;
    if (!client) throw new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.target}: ${op} before start()`);
    try {
      return await call(client);
    } catch (err) {
      throw this.unavailable(op, err);
    }
  }

  /** The upgrade rule of readMarker() was applied (it applies to the first read only). */
  private upgradeChecked = false;

  private get fence(): string {
    return this.deps.fence ?? this.deps.linkName;
  }

  get liveBuckets(): number | undefined {
    return this.layout.liveBuckets;
  }

  /** The LEASE_FENCED refusals since the last claim or commit that passed the fence. */
  get fenced(): GuardFence | undefined {
    return this.refusals.fenced;
  }

  async claim(items: readonly GuardItem[], retryToken?: string, opts: ClaimOptions = {}): Promise<ClaimResult[]> {
    if (items.length === 0) return [];
    checkIds(items);
    try {
      const results = await this.layout.claim(items, retryToken ?? this.nextToken(), opts);
      this.refusals.passed(opts);
      return results;
    } catch (err) {
      this.refusals.failed(opts, err);
      throw err;
    }
  }

  async commit(items: readonly ClaimedItem[], opts: CommitOptions = {}): Promise<void> {
    if (items.length === 0) return;
    checkIds(items);
    let lost: number;
    try {
      lost = await this.layout.commit(items, opts);
      this.refusals.passed(opts);
    } catch (err) {
      this.refusals.failed(opts, err);
      throw err;
    }
    if (lost > 0) {
      // Published after the claim expired: another relay may have published it too (the broker's
      // duplicate window is then the only protection). The claim TTL is too short for this link.
      this.log.warn({ lost, claimTtlMs: this.config.claimTtlMs }, "guard claims expired before commit");
    }
  }

  async readVersions(entities: readonly string[]): Promise<ReadonlyMap<string, number>> {
    if (entities.length === 0) return new Map();
    checkIds(entities.map((entity) => ({ id: entity, entity })));
    return this.layout.versions(entities);
  }

  async release(items: readonly ClaimedItem[]): Promise<void> {
    if (items.length === 0) return;
    checkIds(items);
    await this.layout.release(items);
  }

  async stop(): Promise<void> {
    const client = this.client;
    if (!client || client.status === "end") return;
    this.stopping = true;
    if (client.status !== "ready") {
      client.disconnect();
      return;
    }
    // QUIT lets in-flight replies arrive; disconnect() if Redis does not answer it in time.
    const timer = setTimeout(() => client.disconnect(), this.tuning.commandTimeoutMs);
    try {
      await client.quit();
    } catch {
      client.disconnect();
    } finally {
      clearTimeout(timer);
    }
  }

  private createClient(): GuardRedisClient {
    let client: GuardRedisClient;
    try {
      client = createRedisClient(this.connection, this.tuning, `relay-guard:${this.deps.linkName}`);
    } catch (err) {
      throw new RelayError(
        ErrorCodes.CONFIG_INVALID,
        `${this.target}: ${sanitizeError(err, this.secrets).message}`,
      );
    }
    // One warning per outage, one info on recovery: ioredis emits an error per reconnect attempt,
    // and a server that exits closes the socket without any error at all.
    const lost = (err?: unknown): void => {
      if (this.down || this.stopping) return;
      this.down = true;
      const fields = err === undefined ? {} : { err: sanitizeError(err, this.secrets) };
      this.log.warn(fields, "guard Redis unavailable; reconnecting in the background");
    };
    client.on("error", (err: unknown) => lost(err));
    client.on("close", () => lost());
    client.on("ready", () => {
      if (!this.down) return;
      this.down = false;
      this.log.info("guard Redis connection restored");
    });
    this.client = client;
    return client;
  }

  private unavailable(op: string, err: unknown): RelayError {
    if (err instanceof RelayError) return err;
    const cause = sanitizeError(err, this.secrets);
    // ioredis words "disconnected" as a remark about its offline queue.
    const why = /enableOfflineQueue/.test(cause.message)
      ? `not connected (${this.client?.status})`
      : cause.message;
    return new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.target}: guard ${op} failed: ${why}`, {
      cause,
    });
  }
}

