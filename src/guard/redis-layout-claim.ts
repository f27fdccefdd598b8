import { ErrorCodes, RelayError } from "../errors.js";
import { digest, entityField, groupOf, hashIndex, parseDirectory } from "./layout.js";
import { CLAIM_LUA, DECISION_CODES, KEYED_REPLY, VERSIONS_LUA, claimValue } from "./lua.js";
import { leaseClaimToken } from "./lease-claims.js";
import { fenceArg, leaseToken } from "./fence.js";
import { distinctEntities, push } from "./redis-layout-batch.js";
import type { Entity, Item } from "./redis-layout-batch.js";
import type { LayoutContext } from "./redis-layout-context.js";
import { accepted, checkFence } from "./redis-layout-fence.js";
import { GuardScript, ScriptArgs } from "./script-call.js";
import type { ClaimOptions, ClaimResult } from "./types.js";

/**
 * A claim in one slot group (lua.ts CLAIM): the claim keys of its ids, every live bucket's hash each
 * id could be in, and the versions of its entities, read inline on a single Redis or, on Redis
 * Cluster (where an entity's version lives in its own group), read first with `readVersions`.
 */

const CLAIM = new GuardScript(CLAIM_LUA);
const VERSIONS = new GuardScript(VERSIONS_LUA);

export async function claimGroup(
  ctx: LayoutContext,
  g: number,
  items: readonly Item[],
  token: string,
  opts: ClaimOptions,
  floors: Map<string, string> | undefined,
): Promise<ClaimResult[]> {
  const st = ctx.state[g]!;
  const keys = st.keys;
  const inline = floors === undefined;
  const entities = distinctEntities(items);
  // A claim by lease needs the caller's lease, and is never a repair (lua.ts WRITERS).
  const leasable = leaseToken(opts) !== undefined && !opts.repair;
  for (let attempt = 1; ; attempt++) {
    const lease = leasable && st.leaseMode;
    const dir =
      items.length === 0
        ? (st.dir ?? parseDirectory({}, 0))
        : await ctx.directory(g, inline && entities.size > 0);
    const buckets = dir.buckets;
    const prefixes = buckets.map((b) => st.bucketPrefix(b));
    let size = 512 + items.length * (keys.claimPrefix.length + 48) + entities.size * 160;
    for (const p of items) size += p.id.length * 3;
    for (const prefix of prefixes) size += items.length * (prefix.length + 16);
    const args = new ScriptArgs(size, ctx.sender.frames);
    args.sampleKey = keys.meta;
    args.key(keys.meta).key(keys.fence(ctx.o.fence)).key(keys.writers);
    if (!lease) for (const p of items) args.keyWithText(keys.claimPrefix, p.id);
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
      .arg(ctx.o.claimTtlMs)
      .arg(opts.repair ? "r" : opts.takeover ? "1" : "0")
      .binaryArg(items.map((p) => p.digest).join(""))
      .arg(
        versioned
          ? items.map((p) => (p.entity ? `${entities.get(p.entity)}\n${p.version}\n` : "0\n\n")).join("")
          : "",
      )
      .binaryArg(inline ? [...entities.keys()].map((e) => entityField(e.digest)).join("") : "")
      .arg(inline ? "" : [...entities.keys()].map((e) => `${floors.get(e.name) ?? ""}\n`).join(""))
      .arg(ctx.o.writer)
      .arg(lease ? "L" : "K")
      .arg(ctx.leaseClaims.keyedClaimWord());
    // Ids this call relays by the lease count as held from when it is sent (lease-claims.ts).
    const settle = lease ? ctx.leaseClaims.sent() : undefined;
    let relayed = 0;
    try {
      const reply = await ctx.sender.send("claim", CLAIM, args, false);
      checkFence(ctx.o.linkName, "claim", reply, leaseToken(opts));
      if (ctx.directoryChanged(st, reply, attempt)) continue;
      if (Array.isArray(reply) && reply[0] === KEYED_REPLY) {
        // Another writer is live in this scope: claim with keys (lua.ts WRITERS).
        ctx.o.log.info({ key: keys.writers }, "guard scope has another live writer: claiming with a key per id");
        st.leaseMode = false;
        continue;
      }
      accepted(st, leaseToken(opts));
      const [codes, against, alone] = reply as [string, string, string];
      if (leasable && !lease && alone === "1") {
        ctx.o.log.info({ key: keys.writers }, "guard scope has no other live writer: claiming by the lease");
        st.leaseMode = true;
      }
      const stored = against === "" ? undefined : against.split("\n");
      const relayToken = lease ? leaseClaimToken(token) : token;
      const results = items.map((p, i) => {
        const decision = DECISION_CODES[codes[i] ?? ""];
        if (!decision)
          throw new RelayError(ErrorCodes.INTERNAL, `guard claim script answered ${codes[i]} for item ${i}`);
        const result: { decision: typeof decision; token?: string; key?: string; storedVersion?: number } = { decision };
        if (decision === "relay") {
          result.token = relayToken;
          result.key = p.digest;
        }
        const version = stored?.[i];
        if (version) result.storedVersion = Number(version);
        return result;
      });
      for (const r of results) if (r.decision === "relay") relayed++;
      return results;
    } finally {
      settle?.(relayed);
    }
  }
}

/** Stored versions of the batch's entities, each from its own group (Redis Cluster), as raw strings. */
export async function readVersions(ctx: LayoutContext, items: readonly Item[]): Promise<Map<string, string>> {
  return readVersionsOf(ctx, [...distinctEntities(items).keys()]);
}

/**
 * The stored versions of entities by name (absent: none stored), each read in its own group: what a
 * retried publish is judged against again (Guard.readVersions).
 */
export async function readEntityVersions(ctx: LayoutContext, names: readonly string[], groups: number): Promise<Map<string, number>> {
  const entities = [...new Set(names)].map((name): Entity => {
    const d = digest(name);
    return { name, digest: d, group: groupOf(d, groups) };
  });
  const raw = await readVersionsOf(ctx, entities);
  const out = new Map<string, number>();
  for (const [name, v] of raw) if (v !== "" && Number.isFinite(Number(v))) out.set(name, Number(v));
  return out;
}

async function readVersionsOf(ctx: LayoutContext, entities: readonly Entity[]): Promise<Map<string, string>> {
  const byGroup = new Map<number, Entity[]>();
  for (const e of entities) push(byGroup, e.group, e);
  const out = new Map<string, string>();
  const groups = new Set([...byGroup.keys(), 0]);
  await Promise.all(
    [...groups].map(async (g) => {
      const st = ctx.state[g]!;
      const own = byGroup.get(g) ?? [];
      // Group 0 shares its slot with the previous layout: it reads every entity's old key.
      const old = g === 0 ? entities : [];
      const dir = own.length > 0 ? await ctx.directory(g, true) : undefined;
      const args = new ScriptArgs(128 + (own.length + old.length) * 96, ctx.sender.frames);
      args.sampleKey = st.keys.meta;
      for (const e of own)
        args.keyWithIndex(st.keys.versionPrefix, hashIndex(e.digest, dir?.versionFanout ?? 1));
      for (const e of old) args.keyWithText(st.keys.legacyVersionPrefix, e.name);
      args.arg(own.length).binaryArg(own.map((e) => entityField(e.digest)).join(""));
      const [hashes, olds] = (await ctx.sender.send("version read", VERSIONS, args, false)) as [
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

/** The higher of two stored versions (raw strings, "" or undefined for none). */
function higher(a: string | undefined, b: string | undefined): string {
  if (!a) return b ?? "";
  if (!b) return a;
  return Number(b) > Number(a) ? b : a;
}
