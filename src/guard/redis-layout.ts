import { leaseToken } from "./fence.js";
import { isLeaseClaim } from "./lease-claims.js";
import { RELEASE_LUA, claimValue } from "./lua.js";
import { failures, prepare, split } from "./redis-layout-batch.js";
import { claimGroup, readEntityVersions, readVersions } from "./redis-layout-claim.js";
import { commitGroup, versionRecords } from "./redis-layout-commit.js";
import { LayoutContext } from "./redis-layout-context.js";
import type { LayoutClientOptions } from "./redis-layout-context.js";
import { groupsToCall } from "./redis-layout-fence.js";
import { GuardScript, ScriptArgs } from "./script-call.js";
import type { ClaimedItem, ClaimOptions, ClaimResult, CommitOptions, GuardItem } from "./types.js";

export type { LayoutClientOptions } from "./redis-layout-context.js";

/**
 * The Redis guard's calls on the compact layout (layout.ts, lua.ts): it splits a batch by slot
 * group, builds each group's keys from its cached bucket directory, runs one script per group
 * (concurrently), and puts the answers back in input order. With `waitReplicas`, every commit is
 * followed on the same connection by `WAIT`, and counts only when enough replicas acknowledged it.
 *
 * This file holds the batch-level calls; one group's claim is in redis-layout-claim.ts, its commit
 * in redis-layout-commit.ts, the per-group state and directory cache in redis-layout-context.ts, the
 * lease fence in redis-layout-fence.ts, and sending a script (with WAIT) in redis-script-sender.ts.
 */

const RELEASE = new GuardScript(RELEASE_LUA);

export class LayoutClient {
  private readonly ctx: LayoutContext;

  constructor(private readonly o: LayoutClientOptions) {
    this.ctx = new LayoutContext(o);
  }

  /** The most live buckets in any group's cached directory (see Guard.liveBuckets). */
  get liveBuckets(): number | undefined {
    let most: number | undefined;
    for (const st of this.ctx.state) if (st.dir) most = Math.max(most ?? 0, st.dir.buckets.length);
    return most;
  }

  // ---- claim ------------------------------------------------------------------------------------

  async claim(items: readonly GuardItem[], token: string, opts: ClaimOptions): Promise<ClaimResult[]> {
    const prepared = prepare(items, true, this.o.groups);
    const byGroup = split(prepared);
    // On Redis Cluster an entity's version lives in its own group: read them first (see lua.ts).
    const floors =
      this.o.groups > 1 && prepared.some((p) => p.entity)
        ? await readVersions(this.ctx, prepared)
        : undefined;
    const groups = groupsToCall(this.ctx.state, byGroup.keys(), leaseToken(opts));
    const settled = await Promise.allSettled(
      groups.map((g) => claimGroup(this.ctx, g, byGroup.get(g) ?? [], token, opts, floors)),
    );
    const results: ClaimResult[] = new Array<ClaimResult>(items.length);
    const { fenced, failed } = failures(settled);
    if (fenced !== undefined) {
      // Groups that did not know the newer lease revision yet took claims: give them back (best effort).
      const taken = settled.flatMap((s, k) =>
        s.status === "fulfilled"
          ? (byGroup.get(groups[k]!) ?? []).flatMap((p, i) => {
              const r = s.value[i];
              return r?.decision === "relay" && r.token !== undefined ? [{ id: p.id, token: r.token }] : [];
            })
          : [],
      );
      await this.release(taken).catch(() => undefined);
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

  // ---- commit -----------------------------------------------------------------------------------

  /** Returns how many ids were committed under a claim that was no longer ours. */
  async commit(items: readonly ClaimedItem[], opts: CommitOptions): Promise<number> {
    const prepared = prepare(items, true, this.o.groups);
    const byGroup = split(prepared);
    const records = versionRecords(prepared);
    const groups = groupsToCall(this.ctx.state, [...byGroup.keys(), ...records.keys()], leaseToken(opts));
    let leased = 0;
    for (const p of items) if (isLeaseClaim(p.token)) leased++;
    const settled = await Promise.allSettled(
      groups.map((g) => commitGroup(this.ctx, g, byGroup.get(g) ?? [], records.get(g) ?? [], opts, leased)),
    );
    const { fenced, failed } = failures(settled);
    if (fenced !== undefined) throw fenced;
    if (failed !== undefined) throw failed;
    this.ctx.leaseClaims.ended(leased);
    return settled.reduce((sum, s) => sum + (s.status === "fulfilled" ? s.value : 0), 0);
  }

  // ---- versions ---------------------------------------------------------------------------------

  /** The stored versions of `entities` (absent: none), each read in its own slot group. */
  async versions(entities: readonly string[]): Promise<Map<string, number>> {
    return readEntityVersions(this.ctx, entities, this.o.groups);
  }

  // ---- release ----------------------------------------------------------------------------------

  async release(items: readonly ClaimedItem[]): Promise<void> {
    // An id claimed by the lease holds no key: releasing it is forgetting it (lease-claims.ts).
    const keyed = items.filter((p) => !isLeaseClaim(p.token));
    this.ctx.leaseClaims.ended(items.length - keyed.length);
    const byGroup = split(prepare(keyed, false, this.o.groups));
    await Promise.all(
      [...byGroup].map(([g, group]) => {
        const keys = this.ctx.state[g]!.keys;
        const args = new ScriptArgs(128 + group.length * 96, this.ctx.sender.frames);
        args.sampleKey = keys.meta;
        for (const p of group) args.keyWithText(keys.claimPrefix, p.id);
        args.arg(group.map((p) => `${claimValue(p.token)}\n`).join(""));
        return this.ctx.sender.send("release", RELEASE, args, false);
      }),
    );
  }
}
