import { createHash } from "node:crypto";

/** A live member of a region's group, as placement sees it. */
export interface PlacementMember {
  /** Unique process id (what leases name). */
  readonly id: string;
  /** Stable name (the host or pod name): what ranks it, so a fresh group places links the same way. */
  readonly name: string;
}

/**
 * Which member should own each unit (a link, or a partition of one). Balanced: every member gets
 * ⌊units/members⌋ or ⌈units/members⌉ (the larger shares go to the members that own the most now).
 * Sticky: a unit stays with its current owner while that owner is within its share, so a join moves
 * only what the newcomer needs and a steady group moves nothing. The rest is placed by rendezvous
 * hashing (a score per member name and unit, best first). Every member computes the same answer from
 * the same inputs (ties go by member id).
 *
 * `current`: unit → member id that owns it now (owners that are not live members are ignored).
 */
export function placeUnits(
  units: readonly string[],
  members: readonly PlacementMember[],
  current: ReadonlyMap<string, string> = new Map(),
): Map<string, string> {
  const placed = new Map<string, string>();
  if (members.length === 0 || units.length === 0) return placed;
  const sortedUnits = [...new Set(units)].sort();
  const live = new Set(members.map((m) => m.id));
  const names = new Map(members.map((m) => [m.id, m.name]));
  const owned = new Map<string, string[]>();
  for (const unit of sortedUnits) {
    const owner = current.get(unit);
    if (owner !== undefined && live.has(owner)) owned.set(owner, [...(owned.get(owner) ?? []), unit]);
  }
  const base = Math.floor(sortedUnits.length / members.length);
  const extra = sortedUnits.length % members.length;
  const byHoldings = [...members].sort((x, y) => (owned.get(y.id)?.length ?? 0) - (owned.get(x.id)?.length ?? 0) || cmp(x.id, y.id));
  const quota = new Map(byHoldings.map((m, i) => [m.id, base + (i < extra ? 1 : 0)]));
  const load = new Map<string, number>();
  // Current owners keep what fits in their share (their best-scoring units first).
  for (const [member, list] of owned) {
    const keep = list
      .map((unit) => ({ unit, score: score(names.get(member) ?? member, unit) }))
      .sort((x, y) => cmp(y.score, x.score) || cmp(x.unit, y.unit))
      .slice(0, quota.get(member) ?? 0);
    for (const { unit } of keep) placed.set(unit, member);
    load.set(member, keep.length);
  }
  // The rest: best-scoring pairs first, to members with room.
  const pairs: { unit: string; member: string; score: string }[] = [];
  for (const unit of sortedUnits) {
    if (placed.has(unit)) continue;
    for (const m of members) pairs.push({ unit, member: m.id, score: score(m.name, unit) });
  }
  pairs.sort((x, y) => cmp(y.score, x.score) || cmp(x.member, y.member) || cmp(x.unit, y.unit));
  for (const p of pairs) {
    if (placed.has(p.unit)) continue;
    const n = load.get(p.member) ?? 0;
    if (n >= (quota.get(p.member) ?? 0)) continue;
    placed.set(p.unit, p.member);
    load.set(p.member, n + 1);
  }
  return placed;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function score(memberName: string, unit: string): string {
  return createHash("sha256").update(memberName).update("\0").update(unit).digest("hex").slice(0, 16);
}
