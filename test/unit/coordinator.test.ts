import { test } from "node:test";
import assert from "node:assert/strict";
import pino from "pino";
import { GroupCoordinator } from "../../src/group/coordinator.js";
import type { GroupMembership, MemberView } from "../../src/group/membership.js";
import { placeUnits } from "../../src/group/placement.js";

/** The part of a membership the coordinator reads: the live members, and a change to tell it of. */
class Members {
  members: readonly MemberView[] = [];
  private listener: ((members: readonly MemberView[], changed: boolean) => void) | undefined;
  onChange(cb: (members: readonly MemberView[], changed: boolean) => void): void {
    this.listener = cb;
  }
  set(members: readonly MemberView[], changed: boolean): void {
    this.members = members;
    this.listener?.(members, changed);
  }
}

const member = (id: string): MemberView => ({ id, name: id, startedAt: "" });
const A = member("relay-a");
const B = member("relay-b");

/**
 * Four unit names where A's takes of all four (in flight when B joined) leave the placement as it was:
 * A keeps the two it was placed, the two placed on B stay placed on B. Before the fix, nothing told A
 * again, so A kept all four and B none (seen in CI).
 */
function stuckCase(): { units: string[]; onB: string[] } {
  for (let n = 0; n < 200; n++) {
    const units = [0, 1, 2, 3].map((p) => `a.SRC${n}.relay-orders-p${p}`);
    const first = placeUnits(units, [A, B]); // nobody owns anything yet
    const again = placeUnits(units, [A, B], new Map(units.map((u) => [u, A.id])));
    if ([...first].every(([u, m]) => again.get(u) === m)) return { units, onB: units.filter((u) => first.get(u) === B.id) };
  }
  throw new Error("no unit names found where A's late takes leave the placement unchanged");
}

test("leases taken while placement moved them elsewhere are handed over once the ownership shows, though the placement did not change", () => {
  const { units, onB } = stuckCase();
  const membership = new Members();
  const owner = new Map<string, string>();
  const told: [string, boolean][] = [];
  const coordinator = new GroupCoordinator(membership as unknown as GroupMembership, A, pino({ level: "silent" }));
  for (const unit of units) coordinator.add({ unit, owner: () => owner.get(unit), setPreferred: (preferred) => told.push([unit, preferred]) });
  membership.set([A], true); // alone: every unit is placed here, and its leases are being taken...
  assert.equal(told.filter(([, p]) => p).length, 4);
  told.length = 0;
  membership.set([A, B], true); // ...when B joins
  assert.deepEqual(told.sort(), onB.map((u) => [u, false]), "placement moved two units to B");
  told.length = 0;
  for (const unit of units) owner.set(unit, A.id); // the takes land: A owns all four
  membership.set([A, B], false); // the next read shows it
  assert.deepEqual(told.sort(), onB.map((u) => [u, false]), "told again to hand B's units over, and only those");
  told.length = 0;
  membership.set([A, B], false);
  assert.deepEqual(told, [], "the same inputs: told once");
  owner.set(onB[0]!, B.id); // handed over: B owns it
  membership.set([A, B], false);
  assert.deepEqual(told, [], "nothing to tell while B owns it");
  owner.set(onB[0]!, A.id); // taken here again later: told again
  membership.set([A, B], false);
  assert.deepEqual(told, [[onB[0], false]], "a new ownership here is told again");
});

test("the same members and owners place nothing again; a changed owner, or a unit in place of another, is placed", () => {
  const membership = new Members();
  const owner = new Map<string, string>();
  const told: [string, boolean][] = [];
  const coordinator = new GroupCoordinator(membership as unknown as GroupMembership, A, pino({ level: "silent" }));
  const unit = (name: string) => ({ unit: name, owner: () => owner.get(name), setPreferred: (preferred: boolean) => void told.push([name, preferred]) });
  for (const name of ["u1", "u2"]) coordinator.add(unit(name));
  told.length = 0; // not placed while the group is not seen
  membership.set([A], true);
  assert.deepEqual(told.sort(), [["u1", true], ["u2", true]]);
  told.length = 0;
  membership.set([A], false);
  assert.deepEqual(told, [], "owners re-read, nothing changed: nothing told");
  owner.set("u1", B.id); // another member took u1 (placed here): the placement is computed again, it stays here
  membership.set([A], false);
  assert.deepEqual(told, [], "still preferred here: nothing to tell");
  coordinator.remove("u2");
  coordinator.add(unit("u3"));
  assert.deepEqual(told, [["u3", true]], "the unit in u2's place is placed");
});
