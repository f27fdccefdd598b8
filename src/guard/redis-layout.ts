import { Cluster } from "ioredis";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, isRelayError } from "../errors.js";
import { versionOf } from "./items.js";
import {
  GroupKeys,
  minFanout,
  bucketSpanMs,
  digest,
  entityField,
  groupOf,
  hashIndex,
  parseDirectory,
  versionFanout,
} from "./layout.js";
import type { Bucket, Directory } from "./layout.js";
import {
  CLAIM_LUA,
  COMMIT_LUA,
  DECISION_CODES,
  DIRECTORY_REPLY,
  FENCED_REPLY,
  RELEASE_LUA,
  VERSIONS_LUA,
  claimValue,
} from "./lua.js";
import { describeToken, fenceArg, leaseToken, newerToken } from "./fence.js";
import type { LeaseToken } from "./fence.js";
import type { GuardRedisClient } from "./redis-connection.js";
import { FramePool, GuardScript, ScriptArgs, ScriptCommand, isNoScript } from "./script-call.js";
import type { ClaimedItem, ClaimOptions, ClaimResult, CommitOptions, GuardItem } from "./types.js";

/**
 * The Redis guard's calls on the compact layout (layout.ts, lua.ts): it splits a batch by slot
 * group, builds each group's keys from its cached bucket directory, runs one script per group
 * (concurrently), and puts the answers back in input order. With `waitReplicas`, every commit is
 * followed on the same connection by `WAIT`, and counts only when enough replicas acknowledged it.
 */

const SCRIPTS = {
  claim: new GuardScript(CLAIM_LUA),
  commit: new GuardScript(COMMIT_LUA),
  release: new GuardScript(RELEASE_LUA),
  versions: new GuardScript(VERSIONS_LUA),
};

/** Calls per group and batch while the bucket directory keeps changing under them. */
const DIRECTORY_ATTEMPTS = 5;

export interface LayoutClientOptions {
  readonly scope: string;
  /** 1, or CLUSTER_GROUPS on Redis Cluster. */
  readonly groups: number;
  readonly linkName: string;
  /** The link's lease key: the fence keys' name. */
  readonly fence: string;
  readonly idTtlMs: number;
  readonly claimTtlMs: number;
  readonly expectedEntities: number;
  readonly waitReplicas: number;
  readonly waitTimeoutMs: number;
  /** Buckets per idTtl (default BUCKETS_PER_TTL; bench:guard compares others). */
  readonly bucketsPerTtl?: number;
  /** "redis host:port" of a single Redis, for messages. */
  readonly target: string;
  readonly log: Logger;
  readonly client: () => GuardRedisClient | undefined;
  /** Turns a failure into GUARD_UNAVAILABLE naming host:port only (RelayErrors pass through). */
  readonly unavailable: (op: string, err: unknown) => RelayError;
}

interface Entity {
  readonly name: string;
  readonly digest: string;
  readonly group: number;
}

interface Item {
  /** Position in the caller's batch. */
  readonly index: number;
  readonly id: string;
  readonly digest: string;
  readonly group: number;
  readonly token: string;
  readonly entity: Entity | undefined;
  readonly version: number | undefined;
}

/** A version to write in one group: flags "h" (its version hash is here), "l" (its previous-layout key is here). */
interface VersionRecord {
  readonly entity: Entity;
  readonly version: number;
  readonly flags: "h" | "l" | "hl";
}

class GroupState {
  dir: Directory | undefined;
  loading: Promise<Directory> | undefined;
  /** The newest lease token this group accepted from us. */
  token: LeaseToken | undefined;
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

export class LayoutClient {
  private readonly state: GroupState[];
  private readonly spanMs: number;
  private readonly versionFanout: number;
  private readonly minFanout: number;
  private replicationShort = false;
  private readonly frames = new FramePool();

  constructor(private readonly o: LayoutClientOptions) {
    this.state = Array.from({ length: o.groups }, (_, g) => new GroupState(new GroupKeys(o.scope, g)));
    this.spanMs = bucketSpanMs(o.idTtlMs, o.bucketsPerTtl);
    this.versionFanout = versionFanout(o.expectedEntities, o.groups);
    this.minFanout = minFanout(o.groups);
  }

  // ---- claim ------------------------------------------------------------------------------------

  async claim(items: readonly GuardItem[], token: string, opts: ClaimOptions): Promise<ClaimResult[]> {
    const prepared = this.prepare(items, true);
    const byGroup = split(prepared);
    // On Redis Cluster an entity's version lives in its own group: read them first (see lua.ts).
    const floors =
      this.o.groups > 1 && prepared.some((p) => p.entity) ? await this.readVersions(prepared) : undefined;
    const groups = this.groupsToCall(byGroup.keys(), leaseToken(opts));
    const settled = await Promise.allSettled(
      groups.map((g) => this.claimGroup(g, byGroup.get(g) ?? [], token, opts, floors)),
    );
    const results: ClaimResult[] = new Array<ClaimResult>(items.length);
    const { fenced, failed } = failures(settled);
    if (fenced !== undefined) {
      // Groups that did not know the newer epoch yet took claims: give them back (best effort).
      const taken = settled.flatMap((s, k) =>
        s.status === "fulfilled"
          ? (byGroup.get(groups[k]!) ?? []).filter((_, i) => s.value[i]?.decision === "relay")
          : [],
      );
      await this.release(taken.map((p) => ({ id: p.id, token }))).catch(() => undefined);
      throw fenced;
    }
    if (failed !== undefined) throw failed;
    settled.forEach((s, k) => {
      if (s.status !== "fulfilled") return;
      (byGroup.get(groups[k]!) ?? []).forEach((p, i) => {
        results[p.index] = s.value[i]!;
      });
    });
    return results;
  }

  private async claimGroup(
    g: number,
    items: readonly Item[],
    token: string,
    opts: ClaimOptions,
    floors: Map<string, string> | undefined,
  ): Promise<ClaimResult[]> {
    const st = this.state[g]!;
    const keys = st.keys;
    const inline = floors === undefined;
    const entities = distinctEntities(items);
    for (let attempt = 1; ; attempt++) {
      const dir =
        items.length === 0
          ? (st.dir ?? parseDirectory({}, 0))
          : await this.directory(g, inline && entities.size > 0);
      const buckets = dir.buckets;
      const prefixes = buckets.map((b) => st.bucketPrefix(b));
      let size = 512 + items.length * (keys.claimPrefix.length + 48) + entities.size * 160;
      for (const p of items) size += p.id.length * 3;
      for (const prefix of prefixes) size += items.length * (prefix.length + 16);
      const args = new ScriptArgs(size, this.frames);
      args.sampleKey = keys.meta;
      args.key(keys.meta).key(keys.fence(this.o.fence));
      for (const p of items) args.keyWithText(keys.claimPrefix, p.id);
      for (const p of items) {
        for (let b = 0; b < buckets.length; b++)
          args.keyWithIndex(prefixes[b]!, hashIndex(p.digest, buckets[b]!.fanout));
      }
      if (inline) {
        for (const e of entities.keys()) {
          args.keyWithIndex(keys.versionPrefix, hashIndex(e.digest, dir.versionFanout ?? 1));
          args.keyWithText(keys.legacyVersionPrefix, e.name);
        }
      }
      const versioned = entities.size > 0;
      args
        .arg(fenceArg(leaseToken(opts)))
        .arg(dir.version)
        .arg(claimValue(token))
        .arg(items.length)
        .arg(buckets.length)
        .arg(entities.size)
        .arg(this.o.claimTtlMs)
        .arg(opts.takeover ? "1" : "0")
        .binaryArg(items.map((p) => p.digest).join(""))
        .arg(
          versioned
            ? items.map((p) => (p.entity ? `${entities.get(p.entity)}\n${p.version}\n` : "0\n\n")).join("")
            : "",
        )
        .binaryArg(inline ? [...entities.keys()].map((e) => entityField(e.digest)).join("") : "")
        .arg(inline ? "" : [...entities.keys()].map((e) => `${floors.get(e.name) ?? ""}\n`).join(""));
      const reply = await this.send("claim", SCRIPTS.claim, args, false);
      this.checkFence("claim", reply, leaseToken(opts));
      if (this.directoryChanged(st, reply, attempt)) continue;
      this.accepted(st, leaseToken(opts));
      const [codes, against] = reply as [string, string];
      const stored = against === "" ? undefined : against.split("\n");
      return items.map((_, i) => {
        const decision = DECISION_CODES[codes[i] ?? ""];
        if (!decision)
          throw new RelayError(ErrorCodes.INTERNAL, `guard claim script answered ${codes[i]} for item ${i}`);
        const result: { decision: typeof decision; token?: string; storedVersion?: number } = { decision };
        if (decision === "relay") result.token = token;
        const version = stored?.[i];
        if (version) result.storedVersion = Number(version);
        return result;
      });
    }
  }

  /** Stored versions of the batch's entities, each from its own group (Redis Cluster), as raw strings. */
  private async readVersions(items: readonly Item[]): Promise<Map<string, string>> {
    const entities = [...distinctEntities(items).keys()];
    const byGroup = new Map<number, Entity[]>();
    for (const e of entities) push(byGroup, e.group, e);
    const out = new Map<string, string>();
    const groups = new Set([...byGroup.keys(), 0]);
    await Promise.all(
      [...groups].map(async (g) => {
        const st = this.state[g]!;
        const own = byGroup.get(g) ?? [];
        // Group 0 shares its slot with the previous layout: it reads every entity's old key.
        const old = g === 0 ? entities : [];
        const dir = own.length > 0 ? await this.directory(g, true) : undefined;
        const args = new ScriptArgs(128 + (own.length + old.length) * 96, this.frames);
        args.sampleKey = st.keys.meta;
        for (const e of own)
          args.keyWithIndex(st.keys.versionPrefix, hashIndex(e.digest, dir?.versionFanout ?? 1));
        for (const e of old) args.keyWithText(st.keys.legacyVersionPrefix, e.name);
        args.arg(own.length).binaryArg(own.map((e) => entityField(e.digest)).join(""));
        const [hashes, olds] = (await this.send("version read", SCRIPTS.versions, args, false)) as [
          string,
          string,
        ];
        const h = hashes.split("\n");
        own.forEach((e, i) => out.set(e.name, higher(out.get(e.name), h[i])));
        const o = olds.split("\n");
        old.forEach((e, i) => out.set(e.name, higher(out.get(e.name), o[i])));
      }),
    );
    return out;
  }

  // ---- commit -----------------------------------------------------------------------------------

  /** Returns how many ids were committed under a claim that was no longer ours. */
  async commit(items: readonly ClaimedItem[], opts: CommitOptions): Promise<number> {
    const prepared = this.prepare(items, true);
    const byGroup = split(prepared);
    // One record per entity, with the highest version of the batch (the scripts compare-and-set).
    const highest = new Map<Entity, number>();
    for (const p of prepared) {
      if (p.entity === undefined || p.version === undefined) continue;
      const v = highest.get(p.entity);
      if (v === undefined || p.version > v) highest.set(p.entity, p.version);
    }
    const records = new Map<number, VersionRecord[]>();
    for (const [entity, version] of highest) {
      if (entity.group === 0) {
        push(records, 0, { entity, version, flags: "hl" });
      } else {
        push(records, entity.group, { entity, version, flags: "h" });
        push(records, 0, { entity, version, flags: "l" });
      }
    }
    const groups = this.groupsToCall([...byGroup.keys(), ...records.keys()], leaseToken(opts));
    const settled = await Promise.allSettled(
      groups.map((g) => this.commitGroup(g, byGroup.get(g) ?? [], records.get(g) ?? [], opts)),
    );
    const { fenced, failed } = failures(settled);
    if (fenced !== undefined) throw fenced;
    if (failed !== undefined) throw failed;
    return settled.reduce((sum, s) => sum + (s.status === "fulfilled" ? s.value : 0), 0);
  }

  private async commitGroup(
    g: number,
    items: readonly Item[],
    records: readonly VersionRecord[],
    opts: CommitOptions,
  ): Promise<number> {
    const st = this.state[g]!;
    const keys = st.keys;
    const hashed = records.filter((r) => r.flags !== "l");
    const claims = claimTable(items);
    for (let attempt = 1; ; attempt++) {
      const dir =
        items.length > 0 || hashed.length > 0
          ? await this.directory(g, hashed.length > 0)
          : (st.dir ?? parseDirectory({}, 0));
      const current = dir.current;
      let size = 512 + items.length * (keys.claimPrefix.length + 112) + records.length * 160;
      for (const p of items) size += p.id.length * 3;
      const args = new ScriptArgs(size, this.frames);
      args.sampleKey = keys.meta;
      args.key(keys.meta).key(keys.fence(this.o.fence));
      for (const p of items) args.keyWithText(keys.claimPrefix, p.id);
      // Without a current bucket the script opens one and answers "M" before it reads these.
      for (const p of items) {
        if (current) args.keyWithIndex(st.bucketPrefix(current), hashIndex(p.digest, current.fanout));
        else args.key(keys.meta);
      }
      for (const r of records) {
        if (r.flags !== "l")
          args.keyWithIndex(keys.versionPrefix, hashIndex(r.entity.digest, dir.versionFanout ?? 1));
        if (r.flags !== "h") args.keyWithText(keys.legacyVersionPrefix, r.entity.name);
      }
      args
        .arg(fenceArg(leaseToken(opts)))
        .arg(dir.version)
        .arg(items.length)
        .arg(records.length)
        .binaryArg(items.map((p) => p.digest).join(""))
        .arg(claims.values)
        .arg(current?.id ?? "")
        .arg(current?.expiresAt ?? 0)
        .arg(this.spanMs)
        .arg(this.o.idTtlMs)
        .arg(records.map((r) => `${r.flags}\n${r.version}\n`).join(""))
        .binaryArg(hashed.map((r) => entityField(r.entity.digest)).join(""))
        .binaryArg(claims.index)
        .arg(claims.width)
        .arg(this.minFanout);
      const writes = items.length > 0 || records.length > 0;
      const reply = await this.send("commit", SCRIPTS.commit, args, writes && this.o.waitReplicas > 0);
      this.checkFence("commit", reply, leaseToken(opts));
      if (this.directoryChanged(st, reply, attempt)) continue;
      this.accepted(st, leaseToken(opts));
      const [lost, , version] = reply as [number, number, string];
      // A bucket this batch closed: reload before the next call rather than have it answer "M".
      if (items.length > 0 && version !== dir.version) st.dir = undefined;
      return Number(lost);
    }
  }

  // ---- release ----------------------------------------------------------------------------------

  async release(items: readonly ClaimedItem[]): Promise<void> {
    const byGroup = split(this.prepare(items, false));
    await Promise.all(
      [...byGroup].map(([g, group]) => {
        const keys = this.state[g]!.keys;
        const args = new ScriptArgs(128 + group.length * 96, this.frames);
        args.sampleKey = keys.meta;
        for (const p of group) args.keyWithText(keys.claimPrefix, p.id);
        args.arg(group.map((p) => `${claimValue(p.token)}\n`).join(""));
        return this.send("release", SCRIPTS.release, args, false);
      }),
    );
  }

  // ---- shared -----------------------------------------------------------------------------------

  private prepare(items: readonly (GuardItem & { token?: string })[], withVersions: boolean): Item[] {
    const groups = this.o.groups;
    const entities = new Map<string, Entity>();
    return items.map((item, index) => {
      const d = digest(item.id);
      const v = withVersions ? versionOf(item) : undefined;
      let entity: Entity | undefined;
      if (v) {
        entity = entities.get(v.entity);
        if (!entity) {
          const ed = digest(v.entity);
          entity = { name: v.entity, digest: ed, group: groupOf(ed, groups) };
          entities.set(v.entity, entity);
        }
      }
      return {
        index,
        id: item.id,
        digest: d,
        group: groupOf(d, groups),
        token: item.token ?? "",
        entity,
        version: v?.version,
      };
    });
  }

  /**
   * The groups a call goes to: those with items, and, when the caller has a lease token newer than
   * one a group has accepted from us, every other group too (with no items): each group fences on
   * its own, so a paused ex-owner must be refused in the groups this batch does not touch as well.
   */
  private groupsToCall(present: Iterable<number>, token: LeaseToken | undefined): number[] {
    const groups = new Set(present);
    if (token !== undefined) this.state.forEach((st, g) => (st.token === undefined || newerToken(token, st.token)) && groups.add(g));
    return [...groups].sort((a, b) => a - b);
  }

  /** A group accepted `token` (a call under it passed its fence). */
  private accepted(st: GroupState, token: LeaseToken | undefined): void {
    if (token !== undefined && (st.token === undefined || newerToken(token, st.token))) st.token = token;
  }

  /** The group's directory (loaded when not cached); `withVersions`: with its version fan-out set. */
  private async directory(g: number, withVersions: boolean): Promise<Directory> {
    const st = this.state[g]!;
    for (;;) {
      const dir =
        st.dir ?? (await (st.loading ??= this.loadDirectory(st).finally(() => (st.loading = undefined))));
      if (!withVersions || dir.versionFanout !== undefined) return dir;
      // The first relay to keep versions in this group fixes its fan-out; the scope keeps it.
      await this.call("directory", (c) => c.hsetnx(st.keys.meta, "vf", String(this.versionFanout)));
      st.dir = undefined;
    }
  }

  private async loadDirectory(st: GroupState): Promise<Directory> {
    const fields = await this.call("directory", (c) => c.hgetall(st.keys.meta));
    const dir = parseDirectory(fields, Date.now());
    st.setDirectory(dir);
    return dir;
  }

  /** A {'M'} reply: drop the cached directory and retry (true), or give up after a few attempts. */
  private directoryChanged(st: GroupState, reply: unknown, attempt: number): boolean {
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

  /** A script that answered {'F', newest}: the caller's lease token is older than one the guard has seen. */
  private checkFence(op: string, reply: unknown, token: LeaseToken | undefined): void {
    if (!Array.isArray(reply) || reply[0] !== FENCED_REPLY) return;
    const newest = String(reply[1]);
    const sep = newest.indexOf(":");
    const seen: LeaseToken = sep < 0 ? { epoch: Number(newest) } : { incarnation: Number(newest.slice(0, sep)), epoch: Number(newest.slice(sep + 1)) };
    throw new RelayError(
      ErrorCodes.LEASE_FENCED,
      `link ${this.o.linkName}: guard ${op} refused: lease ${describeToken(token)} is older than ${describeToken(seen)} of the relay that owns the link now`,
    );
  }

  private async call<T>(op: string, fn: (c: GuardRedisClient) => Promise<T>): Promise<T> {
    const client = this.o.client();
    if (!client) throw new RelayError(ErrorCodes.GUARD_UNAVAILABLE, `${this.o.target}: ${op} before start()`);
    try {
      return await fn(client);
    } catch (err) {
      throw this.o.unavailable(op, err);
    }
  }

  /**
   * Runs a script (EVAL on a connection's first use, then EVALSHA; EVAL again after NOSCRIPT).
   * `wait`: in one pipeline with `WAIT <waitReplicas> <waitTimeout>` on the same connection.
   */
  private async send(op: string, script: GuardScript, args: ScriptArgs, wait: boolean): Promise<unknown> {
    return this.call(op, async (client) => {
      for (let attempt = 0; ; attempt++) {
        const cmd = new ScriptCommand(script, args);
        try {
          let reply: unknown;
          if (!wait) {
            void client.sendCommand(cmd);
            reply = await cmd.promise;
          } else {
            reply = await this.sendAndWait(client, cmd);
          }
          args.recycle();
          return reply;
        } catch (err) {
          if (attempt === 0 && isNoScript(err) && cmd.socket) {
            script.forget(cmd.socket);
            continue;
          }
          throw err;
        }
      }
    });
  }

  private async sendAndWait(client: GuardRedisClient, cmd: ScriptCommand): Promise<unknown> {
    // A Pipeline has sendCommand (ioredis types only its chainable commands).
    const pipeline = client.pipeline() as ReturnType<GuardRedisClient["pipeline"]> & {
      sendCommand(command: ScriptCommand): unknown;
    };
    pipeline.sendCommand(cmd);
    pipeline.call("WAIT", String(this.o.waitReplicas), String(this.o.waitTimeoutMs));
    const [scriptReply, waitReply] = (await pipeline.exec()) ?? [];
    if (!scriptReply || !waitReply) throw new Error("no reply to the commit pipeline");
    if (scriptReply[0]) throw scriptReply[0];
    const reply = scriptReply[1];
    // Fenced or a stale directory: nothing was written, nothing to wait for.
    if (Array.isArray(reply) && (reply[0] === FENCED_REPLY || reply[0] === DIRECTORY_REPLY)) return reply;
    if (waitReply[0]) throw waitReply[0];
    const acked = Number(waitReply[1]);
    const required = this.o.waitReplicas;
    const node = this.nodeOf(client, cmd);
    if (acked < required) {
      const text = `${required} replica${required === 1 ? "" : "s"} required, ${acked} acknowledged within ${this.o.waitTimeoutMs} ms`;
      if (!this.replicationShort) {
        this.replicationShort = true;
        this.o.log.warn(
          { node, required, acknowledged: acked },
          `guard commit not replicated (${text}): the link pauses and retries`,
        );
      }
      throw new RelayError(
        ErrorCodes.GUARD_UNAVAILABLE,
        `redis ${node}: guard commit not replicated: ${text} (guard.redis.waitReplicas)`,
      );
    }
    if (this.replicationShort) {
      this.replicationShort = false;
      this.o.log.info({ node, required, acknowledged: acked }, "guard commits are replicated again");
    }
    return reply;
  }

  /** host:port of the node that ran `cmd`. */
  private nodeOf(client: GuardRedisClient, cmd: ScriptCommand): string {
    if (client instanceof Cluster) return client.slots[cmd.getSlot()]?.[0] ?? "?";
    const stream = client.stream as { remoteAddress?: string; remotePort?: number } | undefined;
    if (stream?.remoteAddress && stream.remotePort) {
      const host = stream.remoteAddress.includes(":") ? `[${stream.remoteAddress}]` : stream.remoteAddress;
      return `${host}:${stream.remotePort}`;
    }
    return this.o.target.replace(/^redis /, "");
  }
}

function split(items: readonly Item[]): Map<number, Item[]> {
  const byGroup = new Map<number, Item[]>();
  for (const p of items) push(byGroup, p.group, p);
  return byGroup;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/**
 * The claim values of a commit batch, each once (a batch holds the items of a few claim calls, one
 * token each), and per item the 1-based index of its own: one byte each, or two past 255 values.
 */
function claimTable(items: readonly Item[]): { values: string; index: string; width: 1 | 2 } {
  const indexOf = new Map<string, number>();
  const codes: number[] = [];
  for (const p of items) {
    let i = indexOf.get(p.token);
    if (i === undefined) {
      i = indexOf.size + 1;
      indexOf.set(p.token, i);
    }
    codes.push(i);
  }
  const values = [...indexOf.keys()].map((t) => `${claimValue(t)}\n`).join("");
  if (indexOf.size < 256) return { values, index: String.fromCharCode(...codes), width: 1 };
  return { values, index: codes.map((i) => String.fromCharCode(i >> 8, i & 255)).join(""), width: 2 };
}

/** The distinct entities of some items, each with its 1-based index in order of first appearance. */
function distinctEntities(items: readonly Item[]): Map<Entity, number> {
  const out = new Map<Entity, number>();
  for (const p of items) if (p.entity && !out.has(p.entity)) out.set(p.entity, out.size + 1);
  return out;
}

/** The higher of two stored versions (raw strings, "" or undefined for none). */
function higher(a: string | undefined, b: string | undefined): string {
  if (!a) return b ?? "";
  if (!b) return a;
  return Number(b) > Number(a) ? b : a;
}

/** The first LEASE_FENCED and the first other failure of the group calls. */
function failures(settled: PromiseSettledResult<unknown>[]): { fenced?: unknown; failed?: unknown } {
  let fenced: unknown;
  let failed: unknown;
  for (const s of settled) {
    if (s.status !== "rejected") continue;
    if (isRelayError(s.reason, ErrorCodes.LEASE_FENCED)) fenced ??= s.reason;
    else failed ??= s.reason;
  }
  return { ...(fenced === undefined ? {} : { fenced }), ...(failed === undefined ? {} : { failed }) };
}
