import type { Logger } from "pino";
import type { GuardConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { FenceIncarnations, FenceRefusals, describeToken, leaseToken } from "./fence.js";
import { checkIds, tokenSource, versionOf } from "./items.js";
import { DONE_VALUE, FENCE_SEEN, claimValue, guardKeys } from "./lua.js";
import type { GuardKeys } from "./lua.js";
import type { ClaimedItem, ClaimOptions, ClaimResult, CommitOptions, Guard, GuardFence, GuardItem } from "./types.js";

/**
 * A few Redis string commands in process memory (GET, SET with PX, DEL), with lazy expiry. Several
 * MemoryGuard instances may share one store to act like relays sharing one Redis (tests do).
 */
export class MemoryGuardStore {
  private readonly data = new Map<string, { value: string; expiresAt: number | undefined }>();
  private lastSweep = 0;
  /** Per fence key, the lease bucket incarnations it has seen (lua-fence.ts FENCE's "incs:<fence key>"). */
  readonly incarnations = new Map<string, FenceIncarnations>();

  constructor(private readonly now: () => number = Date.now) {}

  get(key: string): string | undefined {
    const entry = this.data.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt !== undefined && entry.expiresAt <= this.now()) {
      this.data.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: string, ttlMs?: number): void {
    this.data.set(key, { value, expiresAt: ttlMs === undefined ? undefined : this.now() + ttlMs });
  }

  delete(key: string): void {
    this.data.delete(key);
  }

  /** Remaining TTL in ms, -1 without expiry, undefined when absent (like PTTL). */
  ttl(key: string): number | undefined {
    if (this.get(key) === undefined) return undefined;
    const at = this.data.get(key)?.expiresAt;
    return at === undefined ? -1 : at - this.now();
  }

  /** Drops expired entries, at most once per `everyMs`: long-running demos must not grow forever. */
  sweep(everyMs: number): void {
    const now = this.now();
    if (now - this.lastSweep < everyMs) return;
    this.lastSweep = now;
    for (const [key, entry] of this.data) {
      if (entry.expiresAt !== undefined && entry.expiresAt <= now) this.data.delete(key);
    }
  }

  get size(): number {
    return this.data.size;
  }
}

export interface MemoryGuardDeps {
  readonly logger: Logger;
  readonly scope: string;
  readonly linkName: string;
  /** The link's lease key (see GuardDeps.fence); default: the link name. */
  readonly fence?: string;
  /** Share a store between instances; a private one otherwise. */
  readonly store?: MemoryGuardStore;
}

/**
 * The guard in process memory, for tests and the demo: the same decisions as the Redis scripts
 * (lua.ts documents the rules; this file follows them step by step), keyed by id and entity as
 * they are, and keeping an id exactly idTtl (Redis keeps it idTtl to 1.5 × idTtl: its buckets).
 * Forgets everything when the process ends.
 */
export class MemoryGuard implements Guard {
  readonly kind = "memory" as const;
  readonly persistence = "none" as const;
  readonly store: MemoryGuardStore;
  readonly keys: GuardKeys;
  private readonly nextToken = tokenSource();
  private readonly refusals = new FenceRefusals();

  constructor(
    private readonly config: Pick<GuardConfig, "idTtlMs" | "claimTtlMs">,
    private readonly deps: MemoryGuardDeps,
  ) {
    this.store = deps.store ?? new MemoryGuardStore();
    this.keys = guardKeys(deps.scope);
  }

  async start(): Promise<void> {
    this.deps.logger.info(
      { store: "memory" },
      "guard in memory: ids and versions are forgotten when the relay stops",
    );
  }

  async claim(items: readonly GuardItem[], retryToken?: string, opts: ClaimOptions = {}): Promise<ClaimResult[]> {
    checkIds(items);
    this.fence("claim", opts);
    this.store.sweep(this.config.claimTtlMs);
    const token = retryToken ?? this.nextToken();
    const mine = claimValue(token);
    // Per entity: the highest of the stored version and of earlier items in this batch.
    const best = new Map<string, { version: number } | null>();
    const seen = new Set<string>();
    const results: ClaimResult[] = [];
    for (const item of items) {
      const key = this.keys.id(item.id);
      if (seen.has(key)) {
        results.push({ decision: "in-flight" });
        continue;
      }
      seen.add(key);
      const stored = this.store.get(key);
      if (stored === DONE_VALUE && !opts.repair) {
        results.push({ decision: "duplicate" });
        continue;
      }
      const cur = stored === DONE_VALUE ? undefined : stored; // repair: a committed id is claimed again
      const v = versionOf(item);
      let against: number | undefined;
      if (v) {
        let b = best.get(v.entity);
        if (b === undefined) {
          const raw = this.store.get(this.keys.version(v.entity));
          b = raw === undefined ? null : { version: Number(raw) };
          best.set(v.entity, b);
        }
        against = b?.version;
        if (b && (v.version < b.version || (v.version === b.version && !opts.repair))) {
          if (cur === mine) this.store.delete(key);
          results.push({ decision: "stale", storedVersion: b.version });
          continue;
        }
      }
      const extra = against === undefined ? {} : { storedVersion: against };
      if (cur !== undefined && cur !== mine && !opts.takeover) {
        results.push({ decision: "in-flight", ...extra });
      } else {
        this.store.set(key, mine, this.config.claimTtlMs);
        results.push({ decision: "relay", token, ...extra });
      }
      if (v) best.set(v.entity, { version: v.version });
    }
    return results;
  }

  async commit(items: readonly ClaimedItem[], opts: CommitOptions = {}): Promise<void> {
    checkIds(items);
    this.fence("commit", opts);
    let lost = 0;
    for (const item of items) {
      const key = this.keys.id(item.id);
      if (this.store.get(key) !== claimValue(item.token)) lost++;
      this.store.set(key, DONE_VALUE, this.config.idTtlMs);
      const v = versionOf(item);
      if (!v) continue;
      const verKey = this.keys.version(v.entity);
      const raw = this.store.get(verKey);
      if (raw === undefined || v.version > Number(raw)) this.store.set(verKey, String(v.version));
    }
    if (lost > 0) {
      this.deps.logger.warn(
        { store: "memory", lost, claimTtlMs: this.config.claimTtlMs },
        "guard claims expired before commit",
      );
    }
  }

  /** The LEASE_FENCED refusals since the last claim or commit that passed the fence. */
  get fenced(): GuardFence | undefined {
    return this.refusals.fenced;
  }

  /**
   * lua-fence.ts `FENCE`: the incarnation first, by the order the fence first saw it (one seen before the
   * fence's own is refused, one never seen becomes the fence's own and resets the lease revision),
   * then the lease revision (an older one is refused; a newer one becomes the newest). The fence key
   * mirrors the Redis guard's `relay:{T}:epoch:<fence>`, whose name stays as relays before the rename
   * from "epoch" wrote it (layout.ts).
   */
  private fence(op: string, opts: ClaimOptions | CommitOptions): void {
    const token = leaseToken(opts);
    if (token === undefined) return;
    const key = `${this.keys.prefix}epoch:${this.deps.fence ?? this.deps.linkName}`;
    let newest = Number(this.store.get(key) ?? "0");
    let refused = false;
    let own: number | undefined;
    if (token.incarnation !== undefined) {
      let seen = this.store.incarnations.get(key);
      if (!seen) this.store.incarnations.set(key, (seen = new FenceIncarnations(FENCE_SEEN)));
      const met = seen.meet(token.incarnation);
      if (met === "new") newest = 0;
      refused = met === "older";
      own = seen.current;
    }
    const fence = { leaseRevision: newest, ...(own !== undefined ? { incarnation: own } : {}) };
    if (refused || token.leaseRevision < newest) {
      const err = new RelayError(ErrorCodes.LEASE_FENCED, `link ${this.deps.linkName}: guard ${op} refused: ${describeToken(token)} is older than ${describeToken(fence)} of the relay that owns the link now`);
      this.refusals.failed(opts, err);
      throw err;
    }
    this.refusals.passed(opts);
    if (token.leaseRevision > newest) this.store.set(key, String(token.leaseRevision));
  }

  async readVersions(entities: readonly string[]): Promise<ReadonlyMap<string, number>> {
    const out = new Map<string, number>();
    for (const entity of entities) {
      const raw = this.store.get(this.keys.version(entity));
      if (raw !== undefined) out.set(entity, Number(raw));
    }
    return out;
  }

  async release(items: readonly ClaimedItem[]): Promise<void> {
    for (const item of items) {
      const key = this.keys.id(item.id);
      if (this.store.get(key) === claimValue(item.token)) this.store.delete(key);
    }
  }

  async stop(): Promise<void> {}
}
