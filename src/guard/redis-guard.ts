import type { Logger } from "pino";
import type { GuardConfig, RedisGuardConnection } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { checkIds, tokenSource, versionOf } from "./items.js";
import { CLAIM_LUA, COMMIT_LUA, DECISION_CODES, RELEASE_LUA, claimValue, guardKeys } from "./lua.js";
import type { GuardKeys } from "./lua.js";
import {
  DEFAULT_REDIS_TUNING,
  checkPersistence,
  connectClient,
  createRedisClient,
  describeRedis,
  sanitizeError,
  secretsOf,
} from "./redis-connection.js";
import type { GuardPersistence, GuardRedisClient, RedisTuning } from "./redis-connection.js";
import type { ClaimedItem, ClaimResult, Guard, GuardItem } from "./types.js";

/** The scripts as ioredis commands (defineCommand without numberOfKeys: numkeys goes first). */
interface ScriptCommands {
  relayGuardClaim(numKeys: number, ...args: string[]): Promise<unknown>;
  relayGuardCommit(numKeys: number, ...args: string[]): Promise<unknown>;
  relayGuardRelease(numKeys: number, ...args: string[]): Promise<unknown>;
}

export interface RedisGuardDeps {
  readonly logger: Logger;
  readonly scope: string;
  readonly linkName: string;
  /** Timeouts and backoff; tests shorten them. */
  readonly tuning?: Partial<RedisTuning>;
}

/**
 * The guard on Redis (see lua.ts for the key layout and the scripts). Every call is one script
 * invocation; every failure is a RelayError GUARD_UNAVAILABLE whose text names host:port only.
 */
export class RedisGuard implements Guard {
  readonly kind = "redis" as const;
  private persisted: GuardPersistence | undefined;
  private client: (GuardRedisClient & ScriptCommands) | undefined;
  private readonly keys: GuardKeys;
  private readonly target: string;
  private readonly secrets: string[];
  private readonly tuning: RedisTuning;
  private readonly log: Logger;
  private readonly nextToken = tokenSource();
  private down = false;
  private stopping = false;

  constructor(
    private readonly connection: RedisGuardConnection,
    private readonly config: Pick<GuardConfig, "idTtlMs" | "claimTtlMs" | "strict">,
    private readonly deps: RedisGuardDeps,
  ) {
    this.keys = guardKeys(deps.scope);
    this.target = describeRedis(connection);
    this.secrets = secretsOf(connection);
    this.tuning = { ...DEFAULT_REDIS_TUNING, ...deps.tuning };
    // The caller's logger already names the link and component (see createGuard's deps).
    this.log = deps.logger.child({ store: this.target });
  }

  /** Known after start(): whether Redis persists the versions (AOF) across a restart. */
  get persistence(): GuardPersistence | undefined {
    return this.persisted;
  }

  async start(): Promise<void> {
    const client = this.client ?? this.createClient();
    this.stopping = false;
    try {
      await connectClient(client, this.tuning.startTimeoutMs);
    } catch (err) {
      throw this.unavailable("connect", err);
    }
    let report;
    try {
      report = await checkPersistence(client);
    } catch (err) {
      throw this.unavailable("persistence check", err);
    }
    this.persisted = report.persistence;
    const fields = {
      persistence: report.persistence,
      appendfsync: report.appendfsync,
      reason: report.reason,
    };
    if (report.persistence === "none") {
      const text = "guard Redis runs without AOF (appendonly no): versions are lost when it restarts";
      if (this.config.strict) {
        // Not retryable: the caller stops; do not leave a client reconnecting behind it.
        this.stopping = true;
        client.disconnect();
        throw new RelayError(ErrorCodes.GUARD_NOT_DURABLE, `${this.target}: ${text} (guard.strict is set)`);
      }
      this.log.warn(fields, text);
    } else if (report.persistence === "unknown") {
      // Managed Redis often blocks CONFIG; `strict` cannot be honoured, but refusing would make it
      // unusable there, so this stays a warning.
      this.log.warn(fields, "could not verify that the guard Redis persists versions (CONFIG GET refused)");
    } else if (report.appendfsync === "no") {
      this.log.warn(fields, "guard Redis AOF uses appendfsync no: a crash may lose recent commits");
    } else {
      this.log.info(fields, "guard Redis ready");
    }
  }

  async claim(items: readonly GuardItem[], retryToken?: string): Promise<ClaimResult[]> {
    if (items.length === 0) return [];
    checkIds(items);
    const token = retryToken ?? this.nextToken();
    const { keys, versions } = this.encode(items);
    const argv = [claimValue(token), String(this.config.claimTtlMs), String(items.length)];
    argv.push(...versions.flat());
    const reply = await this.run("claim", (c) => c.relayGuardClaim(keys.length, ...keys, ...argv));
    const flat = reply as (string | null)[];
    return items.map((_, i) => {
      const code = flat[2 * i];
      const decision = DECISION_CODES[code ?? ""];
      if (!decision)
        throw new RelayError(ErrorCodes.INTERNAL, `guard claim script answered ${code} for item ${i}`);
      const against = flat[2 * i + 1];
      return {
        decision,
        ...(decision === "relay" ? { token } : {}),
        ...(typeof against === "string" ? { storedVersion: Number(against) } : {}),
      };
    });
  }

  async commit(items: readonly ClaimedItem[]): Promise<void> {
    if (items.length === 0) return;
    checkIds(items);
    const { keys, versions } = this.encode(items);
    const argv = [String(this.config.idTtlMs), String(items.length)];
    items.forEach((item, i) => argv.push(claimValue(item.token), ...(versions[i] ?? ["0", ""])));
    const reply = await this.run("commit", (c) => c.relayGuardCommit(keys.length, ...keys, ...argv));
    const lost = Array.isArray(reply) ? Number(reply[0]) : 0;
    if (lost > 0) {
      // Published after the claim expired: another relay may have published it too (the broker's
      // duplicate window is then the only protection). The claim TTL is too short for this link.
      this.log.warn({ lost, claimTtlMs: this.config.claimTtlMs }, "guard claims expired before commit");
    }
  }

  async release(items: readonly ClaimedItem[]): Promise<void> {
    if (items.length === 0) return;
    const keys = items.map((item) => this.keys.id(item.id));
    const argv = items.map((item) => claimValue(item.token));
    await this.run("release", (c) => c.relayGuardRelease(keys.length, ...keys, ...argv));
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

  private createClient(): GuardRedisClient & ScriptCommands {
    let client: GuardRedisClient;
    try {
      client = createRedisClient(this.connection, this.tuning, `relay-guard:${this.deps.linkName}`);
    } catch (err) {
      throw new RelayError(
        ErrorCodes.CONFIG_INVALID,
        `${this.target}: ${sanitizeError(err, this.secrets).message}`,
      );
    }
    client.defineCommand("relayGuardClaim", { lua: CLAIM_LUA });
    client.defineCommand("relayGuardCommit", { lua: COMMIT_LUA });
    client.defineCommand("relayGuardRelease", { lua: RELEASE_LUA });
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
    this.client = client as GuardRedisClient & ScriptCommands;
    return this.client;
  }

  /**
   * KEYS for a script: the id keys in input order, then one version key per distinct entity.
   * `versions[i]` is item i's [1-based KEYS index of its version key, version], or ["0", ""].
   */
  private encode(items: readonly GuardItem[]): { keys: string[]; versions: [string, string][] } {
    const keys = items.map((item) => this.keys.id(item.id));
    const index = new Map<string, number>();
    const versions = items.map((item): [string, string] => {
      const v = versionOf(item);
      if (!v) return ["0", ""];
      let slot = index.get(v.entity);
      if (slot === undefined) {
        slot = keys.push(this.keys.version(v.entity));
        index.set(v.entity, slot);
      }
      return [String(slot), String(v.version)];
    });
    return { keys, versions };
  }

  private async run(
    op: string,
    call: (c: GuardRedisClient & ScriptCommands) => Promise<unknown>,
  ): Promise<unknown> {
    const client = this.client;
    if (!client) throw new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.target}: ${op} before start()`);
    try {
      return await call(client);
    } catch (err) {
      throw this.unavailable(op, err);
    }
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
