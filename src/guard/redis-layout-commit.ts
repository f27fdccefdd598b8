import { entityField, hashIndex, parseDirectory } from "./layout.js";
import { COMMIT_LUA, claimValue } from "./lua.js";
import { isLeaseClaim } from "./lease-claims.js";
import { fenceArg, leaseToken } from "./fence.js";
import { push } from "./redis-layout-batch.js";
import type { Entity, Item } from "./redis-layout-batch.js";
import type { LayoutContext } from "./redis-layout-context.js";
import { accepted, checkFence } from "./redis-layout-fence.js";
import { GuardScript, ScriptArgs } from "./script-call.js";
import type { CommitOptions } from "./types.js";

/**
 * A commit in one slot group (lua.ts COMMIT): the batch's ids into the group's current bucket (the
 * script opens a new one when it is due), their claims deleted, and the version records of the
 * batch's entities written in the groups that keep them (`versionRecords`).
 */

const COMMIT = new GuardScript(COMMIT_LUA);

/** A version to write in one group: flags "h" (its version hash is here), "l" (its previous-layout key is here). */
export interface VersionRecord {
  readonly entity: Entity;
  readonly version: number;
  readonly flags: "h" | "l" | "hl";
}

/**
 * The version records of a batch, by group: one per entity, with the highest version of the batch
 * (the scripts compare-and-set), in the entity's group and, for the previous layout's key, group 0.
 */
export function versionRecords(prepared: readonly Item[]): Map<number, VersionRecord[]> {
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
  return records;
}

/** Returns how many ids were committed under a claim that was no longer ours. */
export async function commitGroup(
  ctx: LayoutContext,
  g: number,
  groupItems: readonly Item[],
  records: readonly VersionRecord[],
  opts: CommitOptions,
  leaseEnding: number,
): Promise<number> {
  const st = ctx.state[g]!;
  const keys = st.keys;
  const hashed = records.filter((r) => r.flags !== "l");
  // Keyed items first: the script deletes the claim keys of the first `keyed` (lua.ts COMMIT).
  const keyedItems = groupItems.filter((p) => !isLeaseClaim(p.token));
  const items = keyedItems.length === groupItems.length ? groupItems : [...keyedItems, ...groupItems.filter((p) => isLeaseClaim(p.token))];
  const claims = claimTable(keyedItems);
  for (let attempt = 1; ; attempt++) {
    const dir =
      items.length > 0 || hashed.length > 0
        ? await ctx.directory(g, hashed.length > 0)
        : (st.dir ?? parseDirectory({}, 0));
    const current = dir.current;
    let size = 512 + items.length * 112 + keyedItems.length * keys.claimPrefix.length + records.length * 160;
    for (const p of keyedItems) size += p.id.length * 3;
    const args = new ScriptArgs(size, ctx.sender.frames);
    args.sampleKey = keys.meta;
    args.key(keys.meta).key(keys.fence(ctx.o.fence)).key(keys.writers);
    for (const p of keyedItems) args.keyWithText(keys.claimPrefix, p.id);
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
      .arg(ctx.spanMs)
      .arg(ctx.o.idTtlMs)
      .arg(records.map((r) => `${r.flags}\n${r.version}\n`).join(""))
      .binaryArg(hashed.map((r) => entityField(r.entity.digest)).join(""))
      .binaryArg(claims.index)
      .arg(claims.width)
      .arg(ctx.minFanout)
      .arg(keyedItems.length)
      .arg(ctx.o.writer)
      .arg(ctx.leaseClaims.commitWord(st.leaseMode, leaseEnding));
    const writes = items.length > 0 || records.length > 0;
    const reply = await ctx.sender.send("commit", COMMIT, args, writes && ctx.o.waitReplicas > 0);
    checkFence(ctx.o.linkName, "commit", reply, leaseToken(opts));
    if (ctx.directoryChanged(st, reply, attempt)) continue;
    accepted(st, leaseToken(opts));
    const [lost, , version] = reply as [number, number, string];
    // A bucket this batch closed: reload before the next call rather than have it answer "M".
    if (items.length > 0 && version !== dir.version) st.dir = undefined;
    return Number(lost);
  }
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
