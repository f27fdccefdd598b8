import type { Logger } from "pino";
import type { GroupMembership, MemberView } from "./membership.js";
import { placeUnits } from "./placement.js";
import type { PlacementMember } from "./placement.js";

/** A link (or a partition of one) as placement drives it. */
export interface PlacedUnit {
  /** Its lease key: unique in the group. */
  readonly unit: string;
  /** The member that owns it now, as this member sees it (undefined: nobody, or not known). */
  owner(): string | undefined;
  /** Whether this member should own it; a member that owns it and is not preferred hands it over. */
  setPreferred(preferred: boolean, reason: string): void;
}

/**
 * Spreads a region's links over the live members of its group (DESIGN §9): every time the member set
 * changes, each member computes the same placement (placement.ts) and makes its own links eligible or
 * not; an owner that is no longer preferred hands its link over (drain, ack, release) to the one that is.
 * A member that cannot see the group (its own key not written within the lease) prefers nothing: it
 * cannot hold leases either, and the others take its links.
 */
export class GroupCoordinator {
  private readonly units = new Map<string, PlacedUnit>();
  private readonly preferred = new Map<string, boolean>();
  /** Units owned here though placed elsewhere whose link was told again to hand over (told once per ownership). */
  private readonly retold = new Set<string>();
  private stopped = false;
  /** What the last placement was computed from (see `apply`): the members as seen, and each unit's owner. */
  private lastInputs: { readonly members: string; readonly owners: ReadonlyMap<string, string | undefined> } | undefined;

  constructor(
    private readonly membership: GroupMembership,
    private readonly self: PlacementMember,
    private readonly logger: Logger,
    private readonly onMembers: (members: readonly MemberView[]) => void = () => {},
  ) {
    membership.onChange((members, changed) => {
      if (this.stopped) return;
      if (changed) this.onMembers(members);
      this.apply(members, changed ? "group members changed" : "owners re-read");
    });
  }

  /** Adds a link; it is placed at once when the group is known (else at the first member read). */
  add(unit: PlacedUnit): void {
    this.units.set(unit.unit, unit);
    this.apply(this.membership.members, "link started");
  }

  /** Drops a link the config no longer has; the others are placed again without it. */
  remove(unit: string): void {
    if (!this.units.delete(unit)) return;
    this.preferred.delete(unit);
    this.retold.delete(unit);
    this.apply(this.membership.members, "link removed");
  }

  /** Placement stops steering the links (the relay is stopping: its links drain and release on their own). */
  stop(): void {
    this.stopped = true;
  }

  /** The member each unit is placed on, as this member computes it now. */
  placement(): Map<string, string> {
    return placeUnits([...this.units.keys()], this.membership.members, this.owners());
  }

  private owners(): Map<string, string> {
    const owners = new Map<string, string>();
    for (const [key, unit] of this.units) {
      const owner = unit.owner();
      if (owner !== undefined) owners.set(key, owner);
    }
    return owners;
  }

  /** The members as seen, the same units, each with the owner it had at the last placement. */
  private sameInputs(members: string): boolean {
    const last = this.lastInputs;
    if (last === undefined || last.members !== members || last.owners.size !== this.units.size) return false;
    for (const [key, unit] of this.units) if (!last.owners.has(key) || last.owners.get(key) !== unit.owner()) return false;
    return true;
  }

  private apply(members: readonly MemberView[], why: string): void {
    if (this.stopped) return;
    const visible = members.some((m) => m.id === this.self.id);
    // The members and owners are re-read every renewal: the same inputs place every unit the same way,
    // so a steady group skips the hashing and sorting, and builds nothing to tell (a thousand links
    // would do it every second).
    const seen = `${visible}|${members.map((m) => `${m.id}=${m.name}`).join(",")}`;
    if (this.sameInputs(seen)) return;
    const owners = this.owners();
    this.lastInputs = { members: seen, owners: new Map([...this.units.keys()].map((u) => [u, owners.get(u)])) };
    const placed = visible ? placeUnits([...this.units.keys()], members, owners) : new Map<string, string>();
    for (const [key, unit] of this.units) {
      const target = placed.get(key);
      const mine = target === this.self.id;
      const reason = !visible
        ? "this relay cannot see its group: the others take its links"
        : mine
          ? `placed on this relay (${members.length} members)`
          : `placed on ${target ?? "?"} (${members.length} members)`;
      if (this.preferred.get(key) === mine) {
        // Unchanged, yet owned here while placed elsewhere: a lease this relay took while the decision
        // was on its way (its take was in flight when placement moved the unit). Told again, the link
        // hands it over (a link already handing over, or not owning it, ignores the repeat).
        const ownedHere = !mine && owners.get(key) === this.self.id;
        if (!ownedHere) this.retold.delete(key);
        else if (!this.retold.has(key)) {
          this.retold.add(key);
          this.logger.info({ unit: key, target, why }, `placement: this relay owns a link placed elsewhere: handing it over (${reason})`);
          unit.setPreferred(false, reason);
        }
        continue;
      }
      this.preferred.set(key, mine);
      this.retold.delete(key);
      this.logger.info({ unit: key, preferred: mine, target, why }, `placement: ${reason}`);
      unit.setPreferred(mine, reason);
    }
  }
}
