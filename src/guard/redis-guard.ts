import type { Logger } from "pino";
import type { GuardConfig, RedisGuardConnection } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { checkIds, tokenSource, versionOf } from "./items.js";
import { CLAIM_LUA, COMMIT_LUA, DECISION_CODES, FENCED_REPLY, FIELD_SEPARATOR, RELEASE_LUA, claimValue, guardKeys } from "./lua.js";
import type { GuardKeys } from "./lua.js";
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
import type { GuardPersistence, GuardRedisClient, RedisTuning } from "./redis-connection.js";
import type { ClaimedItem, ClaimOptions, ClaimResult, CommitOptions, Guard, GuardItem } from "./types.js";

/** The scripts as ioredis commands (defineCommand without numberOfKeys: numkeys goes first). */
interface ScriptCommands {
  relayGuardClaim(numKeys: 1, prefix: string, ...args: string[]): Promise<unknown>;
  relayGuardCommit(numKeys: 1, prefix: string, ...args: string[]): Promise<unknown>;
  relayGuardRelease(numKeys: 1, prefix: string, ...args: string[]): Promise<unknown>;
}

export interface RedisGuardDeps {
  readonly logger: Logger;
  readonly scope: string;
  readonly linkName: string;
  /** The link's lease key (see GuardDeps.fence); default: the link name. */
  readonly fence?: string;
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
      await checkRedisVersion(client, this.target);
      report = await checkPersistence(client);
    } catch (err) {
      if (err instanceof RelayError && err.code === ErrorCodes.GUARD_UNSUPPORTED) {
        this.stopping = true; // not retryable: do not leave a client reconnecting behind it
        client.disconnect();
      }
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

  async claim(items: readonly GuardItem[], retryToken?: string, opts: ClaimOptions = {}): Promise<ClaimResult[]> {
    if (items.length === 0) return [];
    checkIds(items);
    const token = retryToken ?? this.nextToken();
    const packed = items.map((item) => `${item.id}\n${versionField(item)}\n`).join(""); // flat, not a rope: cheaper to write
    const args = [claimValue(token), String(this.config.claimTtlMs), String(items.length), packed, opts.takeover ? "1" : "0", ...this.fenceArgs(opts.epoch)];
    const reply = await this.run("claim", (c) => c.relayGuardClaim(1, this.keys.prefix, ...args));
    this.checkFence("claim", reply, opts.epoch);
    const [codes, against] = reply as [string, string];
    const stored = against === "" ? undefined : against.split(FIELD_SEPARATOR);
    return items.map((_, i) => {
      const decision = DECISION_CODES[codes[i] ?? ""];
      if (!decision)
        throw new RelayError(ErrorCodes.INTERNAL, `guard claim script answered ${codes[i]} for item ${i}`);
      const version = stored?.[i];
      const result: { decision: typeof decision; token?: string; storedVersion?: number } = { decision };
      if (decision === "relay") result.token = token;
      if (version) result.storedVersion = Number(version);
      return result;
    });
  }

  async commit(items: readonly ClaimedItem[], opts: CommitOptions = {}): Promise<void> {
    if (items.length === 0) return;
    checkIds(items);
    const packed = items.map((item) => `${claimValue(item.token)}\n${item.id}\n${versionField(item)}\n`).join("");
    const args = [String(this.config.idTtlMs), String(items.length), packed, ...this.fenceArgs(opts.epoch)];
    const reply = await this.run("commit", (c) => c.relayGuardCommit(1, this.keys.prefix, ...args));
    this.checkFence("commit", reply, opts.epoch);
    const lost = Array.isArray(reply) ? Number(reply[0]) : 0;
    if (lost > 0) {
      // Published after the claim expired: another relay may have published it too (the broker's
      // duplicate window is then the only protection). The claim TTL is too short for this link.
      this.log.warn({ lost, claimTtlMs: this.config.claimTtlMs }, "guard claims expired before commit");
    }
  }

  async release(items: readonly ClaimedItem[]): Promise<void> {
    if (items.length === 0) return;
    checkIds(items);
    const packed = items.map((item) => `${claimValue(item.token)}\n${item.id}\n`).join("");
    await this.run("release", (c) => c.relayGuardRelease(1, this.keys.prefix, String(items.length), packed));
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

  private fenceArgs(epoch: number | undefined): [string, string] {
    return [epoch === undefined ? "" : String(epoch), this.deps.fence ?? this.deps.linkName];
  }

  /** A script that answered {'F', newest}: the caller's lease epoch is older than one the guard has seen. */
  private checkFence(op: string, reply: unknown, epoch: number | undefined): void {
    if (!Array.isArray(reply) || reply[0] !== FENCED_REPLY) return;
    throw new RelayError(
      ErrorCodes.LEASE_FENCED,
      `link ${this.deps.linkName}: guard ${op} refused: lease epoch ${epoch} is older than epoch ${String(reply[1])} of the relay that owns the link now`,
    );
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

/** `<entity>\n<version>` of an item for the packed batch, or "\n" when versions do not apply to it. */
function versionField(item: GuardItem): string {
  const v = versionOf(item);
  return v ? `${v.entity}\n${v.version}` : "\n";
}
