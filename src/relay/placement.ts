import type { GroupCoordinator, PlacedUnit } from "../group/coordinator.js";

/** One lease key as placement sees it; the Link working it may come and go (a config reload restarts it). */
class Slot implements PlacedUnit {
  link: { readonly token: object; readonly placed: PlacedUnit } | undefined;
  /** The last placement decision, handed to a link that attaches later. */
  wanted: readonly [boolean, string] | undefined;

  constructor(readonly unit: string) {}

  owner(): string | undefined {
    return this.link?.placed.owner();
  }

  setPreferred(preferred: boolean, reason: string): void {
    this.wanted = [preferred, reason];
    this.link?.placed.setPreferred(preferred, reason);
  }
}

/**
 * The relay's links as its group's placement drives them: one slot per lease key, which outlives the
 * Link objects in it, so a link restarted by a config reload gets its slot's placement at once.
 *
 * The coordinator is built once the group is joined, over every slot at once: its placements reach the
 * links only once it has every slot (placing a partial set could hand an owned link over and back).
 * A unit the config no longer has is removed from it.
 */
export class PlacementSlots {
  private readonly slots = new Map<string, Slot>();
  private coordinator: GroupCoordinator | undefined;

  /** Starts placing (once the group is joined) with `coordinator`, over every slot known now. */
  start(coordinator: GroupCoordinator): void {
    this.coordinator?.stop();
    this.coordinator = undefined;
    this.place(coordinator);
  }

  /** Placement stops steering the links (the relay is stopping). */
  stop(): void {
    this.coordinator?.stop();
    this.coordinator = undefined;
  }

  /** `placed` works its lease key now; `token` names it for `detach`. */
  attach(token: object, placed: PlacedUnit): void {
    const known = this.slots.get(placed.unit);
    const slot = known ?? new Slot(placed.unit);
    slot.link = { token, placed };
    if (known) {
      if (slot.wanted) placed.setPreferred(...slot.wanted);
      return;
    }
    this.slots.set(slot.unit, slot);
    this.coordinator?.add(slot);
  }

  /** The link named by `token` stopped working its key (its slot stays until `prune`). */
  detach(token: object): void {
    for (const slot of this.slots.values()) if (slot.link?.token === token) slot.link = undefined;
  }

  /** Drops the slots without a link whose key is not in `keep`; the rest are placed again without them. */
  prune(keep: ReadonlySet<string>): void {
    for (const [key, slot] of this.slots) {
      if (slot.link || keep.has(key)) continue;
      this.slots.delete(key);
      this.coordinator?.remove(key);
    }
  }

  /** Lease key → the member it is placed on, as this member computes it now. */
  placement(): Map<string, string> {
    return this.coordinator?.placement() ?? new Map<string, string>();
  }

  private place(coordinator: GroupCoordinator): void {
    const held = new Map<Slot, readonly [boolean, string]>();
    let holding = true;
    for (const slot of this.slots.values()) {
      coordinator.add({
        unit: slot.unit,
        owner: () => slot.owner(),
        setPreferred: (preferred, reason) => {
          if (holding) held.set(slot, [preferred, reason]);
          else slot.setPreferred(preferred, reason);
        },
      });
    }
    holding = false;
    for (const [slot, wanted] of held) slot.setPreferred(...wanted);
    this.coordinator = coordinator;
  }
}
