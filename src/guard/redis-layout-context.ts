import { ErrorCodes, RelayError } from "../errors.js";
import { GroupKeys, minFanout, bucketSpanMs, parseDirectory, versionFanout } from "./layout.js";
import type { Bucket, Directory } from "./layout.js";
import { DIRECTORY_REPLY } from "./lua.js";
import { ScriptSender } from "./redis-script-sender.js";
import type { ScriptSenderOptions } from "./redis-script-sender.js";
import type { LeaseToken } from "./fence.js";
import { LeaseClaims } from "./lease-claims.js";

/**
 * What the layout client's operations (claim, commit, release) share: its options, the state it
 * keeps per slot group (the group's keys, its cached bucket directory, the newest lease token it
 * accepted) and the script sender. The key layout itself is described in layout.ts.
 */

/** Calls per group and batch while the bucket directory keeps changing under them. */
const DIRECTORY_ATTEMPTS = 5;

export interface LayoutClientOptions extends ScriptSenderOptions {
  readonly scope: string;
  /** 1, or CLUSTER_GROUPS on Redis Cluster. */
  readonly groups: number;
  readonly linkName: string;
  /** The link's lease key: the fence keys' name. */
  readonly fence: string;
  /** The caller's name among the scope's writers (lua.ts WRITERS; GuardDeps.writer). */
  readonly writer: string;
  readonly idTtlMs: number;
  readonly claimTtlMs: number;
  readonly expectedEntities: number;
  /** Buckets per idTtl (default BUCKETS_PER_TTL; bench:guard compares others). */
  readonly bucketsPerTtl?: number;
}

export class GroupState {
  dir: Directory | undefined;
  loading: Promise<Directory> | undefined;
  /** The newest lease token this group accepted from us. */
  token: LeaseToken | undefined;
  /**
   * Whether the next claim with a lease token tries lease mode (no claim key per id, lua.ts WRITERS):
   * until a claim answers that another writer is live, and again once one finds it alone.
   */
  leaseMode = true;
  private prefixes = new Map<string, Buffer>();

  constructor(readonly keys: GroupKeys) {}

  bucketPrefix(bucket: Bucket): Buffer {
    let prefix = this.prefixes.get(bucket.id);
    if (!prefix) {
      prefix = this.keys.bucketPrefix(bucket.id);
      this.prefixes.set(bucket.id, prefix);
    }
    return prefix;
  }

  setDirectory(dir: Directory): void {
    this.dir = dir;
    const live = new Set(dir.buckets.map((b) => b.id));
    for (const id of this.prefixes.keys()) if (!live.has(id)) this.prefixes.delete(id);
  }
}

export class LayoutContext {
  readonly state: GroupState[];
  readonly spanMs: number;
  readonly versionFanout: number;
  readonly minFanout: number;
  readonly sender: ScriptSender;
  /** Ids claimed by the lease, for the writer word of claims and commits (lease-claims.ts). */
  readonly leaseClaims = new LeaseClaims();

  constructor(readonly o: LayoutClientOptions) {
    this.state = Array.from({ length: o.groups }, (_, g) => new GroupState(new GroupKeys(o.scope, g)));
    this.spanMs = bucketSpanMs(o.idTtlMs, o.bucketsPerTtl);
    this.versionFanout = versionFanout(o.expectedEntities, o.groups);
    this.minFanout = minFanout(o.groups);
    this.sender = new ScriptSender(o);
  }

  /** The group's directory (loaded when not cached); `withVersions`: with its version fan-out set. */
  async directory(g: number, withVersions: boolean): Promise<Directory> {
    const st = this.state[g]!;
    for (;;) {
      const dir =
        st.dir ?? (await (st.loading ??= this.loadDirectory(st).finally(() => (st.loading = undefined))));
      if (!withVersions || dir.versionFanout !== undefined) return dir;
      // The first relay to keep versions in this group fixes its fan-out; the scope keeps it.
      await this.sender.call("directory", (c) => c.hsetnx(st.keys.meta, "vf", String(this.versionFanout)));
      st.dir = undefined;
    }
  }

  private async loadDirectory(st: GroupState): Promise<Directory> {
    const fields = await this.sender.call("directory", (c) => c.hgetall(st.keys.meta));
    const dir = parseDirectory(fields, Date.now());
    st.setDirectory(dir);
    return dir;
  }

  /** A {'M'} reply: drop the cached directory and retry (true), or give up after a few attempts. */
  directoryChanged(st: GroupState, reply: unknown, attempt: number): boolean {
    if (!Array.isArray(reply) || reply[0] !== DIRECTORY_REPLY) return false;
    st.dir = undefined;
    if (attempt >= DIRECTORY_ATTEMPTS) {
      throw new RelayError(
        ErrorCodes.GUARD_UNAVAILABLE,
        `${this.o.target}: guard bucket directory of ${st.keys.meta} changed ${attempt} times during one call`,
      );
    }
    return true;
  }
}
