import { test } from "node:test";
import assert from "node:assert/strict";
import { judgeSoak } from "../faults/kv-soak/verdict.js";
import type { Observed } from "../faults/kv-soak/watcher.js";
import type { LoggedWrite } from "../faults/kv-soak/writers.js";

/**
 * The KV soak's own verdict (test/faults/kv-soak/verdict.ts) on hand-made histories: it passes a
 * converged run, and names each way a relay could break last writer wins.
 */

const write = (id: string, key: string, seq: number, op: LoggedWrite["op"] = "PUT"): LoggedWrite => ({
  id,
  region: id.split("-")[0] as string,
  key,
  op,
  value: op === "PUT" ? `value of ${id}` : "",
  sentMs: 1_000 + seq,
  seq,
  outcome: "acked",
});

/** Write `w` stored in `region` at `seq`: locally (its own store time `ns`) or as a relayed copy carrying `ns`. */
const stored = (w: LoggedWrite, region: string, seq: number, ns: number): Observed => ({
  seq,
  key: w.key,
  storedNs: BigInt(region === w.region ? ns : ns + 500),
  id: w.id,
  op: w.op,
  value: w.value,
  carried: region === w.region ? "" : `${ns} ${w.region}`,
  origin: region === w.region ? "" : w.region,
});

const latest = (entries: Record<string, Observed[]>) => new Map(Object.entries(entries).map(([r, os]) => [r, new Map(os.map((o) => [o.key, o]))]));

/** a writes k (t=100), b writes k later (t=200): b's wins; a's copy to b was older (a conflict). */
function converged() {
  const a1 = write("a-0", "k", 1);
  const b1 = write("b-0", "k", 1);
  const inA = [stored(a1, "a", 1, 100), stored(b1, "a", 2, 200)];
  const inB = [stored(b1, "b", 1, 200)];
  return { a1, b1, inA, inB };
}

test("a converged run passes: the newest write is everywhere, a's older write was a conflict on a→b", () => {
  const { a1, b1, inA, inB } = converged();
  const v = judgeSoak({
    regions: ["a", "b"],
    writes: [a1, b1],
    stored: new Map([["a", inA], ["b", inB]]),
    holes: new Map(),
    final: latest({ a: [inA[1] as Observed], b: [inB[0] as Observed] }),
    keys: ["k"],
  });
  assert.deepEqual(v.problems, []);
  assert.deepEqual(
    v.links.map((l) => `${l.from}→${l.to} ${l.notApplied}`),
    ["a→b 1", "b→a 0"],
  );
});

test("a remote write stored over a newer one, a bucket left on an older winner, a loop and a wrong carried version are each named", () => {
  const { a1, b1, inA } = converged();
  // b applied a's older write over its own newer one, and ends on it; it also holds a copy of its own write.
  const inB = [stored(b1, "b", 1, 200), stored(a1, "b", 2, 100), { ...stored(b1, "a", 3, 200), carried: "200 b" }];
  const v = judgeSoak({
    regions: ["a", "b"],
    writes: [a1, b1],
    stored: new Map([["a", inA], ["b", inB]]),
    holes: new Map(),
    final: latest({ a: [inA[1] as Observed], b: [inB[1] as Observed] }),
    keys: ["k"],
  });
  const text = v.problems.join("\n");
  assert.match(text, /b key k: seq 2 \(write a-0, version 100 a\) stored after seq 1 \(version 200 b\): not newer/);
  assert.match(text, /b key k: holds a-0 PUT "value of a-0" @100 a, the newest write is b-0/);
  assert.match(text, /b seq 3: write b-0 came back to its own region/);
  assert.match(text, /b: write b-0 stored twice/);

  // A copy carrying another version than its write's store time.
  const wrong = judgeSoak({
    regions: ["a", "b"],
    writes: [a1, b1],
    stored: new Map([["a", [stored(a1, "a", 1, 100), { ...stored(b1, "a", 2, 200), carried: "250 b" }]], ["b", [stored(b1, "b", 1, 200)]]]),
    holes: new Map(),
    final: latest({ a: [], b: [] }),
    keys: [],
  });
  assert.match(wrong.problems.join("\n"), /write b-0: a copy carries version 250 b, its region stored it at 200 b/);
});

test("an acked write no bucket kept is fine only when a later write of its key is in its region's bucket", () => {
  const a0 = write("a-0", "k", 1);
  const a1 = write("a-1", "k", 2, "PURGE");
  const inA = [stored(a1, "a", 2, 300)]; // the purge rolled a-0 up before anyone saw it
  const ok = judgeSoak({ regions: ["a"], writes: [a0, a1], stored: new Map([["a", inA]]), holes: new Map([["a", 1]]), final: latest({ a: inA }), keys: ["k"] });
  assert.deepEqual(ok.problems, []);
  assert.equal(ok.dominated, 1);
  assert.equal(ok.tombstones, 1);
  const lost = judgeSoak({ regions: ["a"], writes: [a0], stored: new Map([["a", []]]), holes: new Map([["a", 1]]), final: latest({ a: [] }), keys: ["k"] });
  assert.match(lost.problems.join("\n"), /write a-0 \(acked at a seq 1\) is in no bucket/);
});
