import { test } from "node:test";
import assert from "node:assert/strict";
import { placeUnits } from "../../src/group/placement.js";
import type { PlacementMember } from "../../src/group/placement.js";

const units = (n: number) => Array.from({ length: n }, (_, i) => `a.S${i}.relay-l${i}`);
const members = (...names: string[]): PlacementMember[] => names.map((name, i) => ({ id: `${name}-${i}`, name }));

function loads(placed: Map<string, string>): number[] {
  const by = new Map<string, number>();
  for (const m of placed.values()) by.set(m, (by.get(m) ?? 0) + 1);
  return [...by.values()].sort();
}

test("every unit is placed once; every member gets ⌊units/members⌋ or ⌈units/members⌉", () => {
  for (const [u, m] of [[6, 3], [6, 4], [7, 3], [1, 3], [10, 1], [5, 5], [3, 2]] as const) {
    const ms = members(...Array.from({ length: m }, (_, i) => `host-${i}`));
    const placed = placeUnits(units(u), ms);
    assert.equal(placed.size, u, `${u} units over ${m}: all placed`);
    const l = loads(placed);
    assert.ok(Math.max(...l) <= Math.ceil(u / m), `${u} units over ${m}: ${l.join("/")}`);
    if (u >= m) assert.equal(l.length, m, `${u} units over ${m}: every member gets one`);
  }
  assert.deepEqual(loads(placeUnits(units(6), members("x", "y", "z"))), [2, 2, 2]);
});

test("every member computes the same placement whatever order it lists members and units in", () => {
  const ms = members("p", "q", "r", "s");
  const current = new Map([["a.S1.relay-l1", "q-1"], ["a.S2.relay-l2", "q-1"], ["a.S3.relay-l3", "q-1"]]);
  const a = placeUnits(units(9), ms, current);
  const b = placeUnits(units(9).reverse(), [...ms].reverse(), new Map([...current].reverse()));
  assert.deepEqual([...a.entries()].sort(), [...b.entries()].sort());
});

test("sticky: a steady group moves nothing; a member that joins takes only its share", () => {
  const three = members("h1", "h2", "h3");
  const before = placeUnits(units(6), three);
  assert.deepEqual(placeUnits(units(6), three, before), before, "the same inputs: nothing moves");
  const four = [...three, { id: "h4-9", name: "h4" }];
  const joined = placeUnits(units(6), four, before);
  assert.deepEqual(loads(joined), [1, 1, 2, 2]);
  const moved = [...before].filter(([unit, member]) => joined.get(unit) !== member);
  assert.equal(moved.length, 1, "the newcomer takes one link (6 over 4: 2/2/1/1); the rest stay");
  assert.equal(joined.get(moved[0]?.[0] ?? ""), "h4-9");
});

test("a member that leaves: only its units move, spread over the others", () => {
  const three = members("h1", "h2", "h3");
  const before = placeUnits(units(6), three);
  const two = three.filter((m) => m.id !== "h2-1");
  const after = placeUnits(units(6), two, before);
  assert.deepEqual(loads(after), [3, 3]);
  for (const [unit, member] of before) if (member !== "h2-1") assert.equal(after.get(unit), member, `${unit} stays`);
});

test("a fresh group places by member name: a relay restarted under its name gets the same links", () => {
  const a = placeUnits(units(8), [{ id: "h1-1", name: "h1" }, { id: "h2-1", name: "h2" }]);
  const b = placeUnits(units(8), [{ id: "h1-7", name: "h1" }, { id: "h2-8", name: "h2" }]);
  for (const [unit, member] of a) assert.equal(b.get(unit)?.split("-")[0], member.split("-")[0], unit);
});

test("members sharing a name (several relays on one host) still split the units evenly", () => {
  const placed = placeUnits(units(6), [{ id: "a", name: "host" }, { id: "b", name: "host" }, { id: "c", name: "host" }]);
  assert.deepEqual(loads(placed), [2, 2, 2]);
});
