import { test } from "node:test";
import assert from "node:assert/strict";
import { JetStreamApiError } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { pino } from "pino";
import { SessionJudge } from "../../src/group/session-judge.js";
import { memberKeyOf } from "../../src/group/member-session.js";

type Entry = { revision: number; operation: "PUT" | "DEL" | "PURGE"; value?: object };

/** A group bucket holding one member key (or none), as far as a judge reads it (a real server in test/integration/member-mode.test.ts). */
function bucket(initial: Entry | null) {
  const deletes: { key: string; previousSeq: number; note?: object }[] = [];
  let entry = initial;
  let refuseDelete = false;
  const kv = {
    get: (_key: string) => Promise.resolve(entry ? { ...entry, json: () => entry?.value } : null),
    /** The judge's eviction (a CAS delete whose marker names the session), recorded. */
    evict: (key: string, previousSeq: number, note: object): Promise<void> => {
      deletes.push({ key, previousSeq, note });
      return refuseDelete
        ? Promise.reject(
            new JetStreamApiError({ err_code: 10071, code: 400, description: "wrong last sequence" }),
          )
        : Promise.resolve();
    },
  };
  return {
    kv: kv as unknown as KV,
    deletes,
    refuse: () => (refuseDelete = true),
    set: (e: Entry | null) => (entry = e),
  };
}

const silent = pino({ level: "silent" });

/** A judge whose evictions go to the fake bucket they are made in. */
function newJudge(opts: ConstructorParameters<typeof SessionJudge>[0]): SessionJudge {
  const deleteKey = (kv: KV, key: string, previousSeq: number, note: object) =>
    (kv as unknown as { evict: (k: string, s: number, n: object) => Promise<void> }).evict(
      key,
      previousSeq,
      note,
    );
  return new SessionJudge({ ...opts, deleteKey });
}

test("session judge: a session is over only on proof, and leases of another session of the same member are judged on their own", async () => {
  let now = 0;
  const judge = newJudge({ leaseMs: 1_000, now: () => now, logger: silent });
  // Member a is on its session 5 (first written at revision 5), last written at revision 9.
  const b = bucket({ revision: 9, operation: "PUT", value: { id: "a", session: 5, leaseMs: 1_000 } });
  judge.attach(b.kv, 1);
  const [old, current] = await Promise.all([judge.ended("a", 3), judge.ended("a", 5)]);
  assert.equal(old, true, "session 3 is over: the key holds a later session of the same member");
  assert.equal(current, false, "session 5 is live: its last write was just seen");
  assert.equal(b.deletes.length, 0);
  now = 999;
  assert.equal(await judge.ended("a", 5), false, "unchanged for less than its lease: no eviction");
  assert.equal(b.deletes.length, 0);
  now = 1_000;
  assert.equal(await judge.ended("a", 5), true, "unchanged for its lease (own clock): evicted");
  assert.deepEqual(
    b.deletes,
    [{ key: memberKeyOf("a"), previousSeq: 9, note: { ended: { id: "a", session: 5 } } }],
    "by CAS on the revision it saw, its marker naming the session",
  );
  assert.equal(await judge.ended("a", 5), true, "remembered");
});

test("session judge: an eviction refused (the member wrote meanwhile) proves nothing; a replica behind proves nothing; a delete proves nothing until unchanged for the member's lease", async () => {
  let now = 0;
  const judge = newJudge({ leaseMs: 1_000, now: () => now, logger: silent });
  const b = bucket({ revision: 9, operation: "PUT", value: { id: "a", session: 5 } });
  judge.attach(b.kv, 1);
  judge.saw(memberKeyOf("a"), 9);
  now = 5_000;
  b.refuse();
  assert.equal(await judge.ended("a", 5), false, "the CAS delete was refused: alive");
  b.set({ revision: 4, operation: "DEL" });
  assert.equal(await judge.ended("a", 7), false, "a revision before the session: a replica behind");
  b.set({ revision: 12, operation: "DEL" });
  assert.equal(
    await judge.ended("a", 7),
    false,
    "deleted after the session began: its member may still be within its deadline",
  );
  now = 5_999;
  assert.equal(await judge.ended("a", 7), false, "deleted, seen so for less than its lease");
  now = 6_000;
  assert.equal(await judge.ended("a", 7), true, "deleted and seen unchanged for its lease (own clock): over");
});

test("session judge: an operator's delete of a live member's key proves nothing a CAS eviction would not, whatever the judge's own lease", async () => {
  let now = 0;
  const proofs: string[] = [];
  // The judge runs with a 1 s lease; member a stored 3 s.
  const judge = newJudge({
    leaseMs: 1_000,
    now: () => now,
    logger: silent,
    onOver: (p) => proofs.push(p),
  });
  const key = memberKeyOf("a");
  const b = bucket({ revision: 20, operation: "PUT", value: { id: "a", session: 5, leaseMs: 3_000 } });
  judge.attach(b.kv, 1);
  judge.saw(key, 20);
  now = 100;
  assert.equal(await judge.ended("a", 5, 3_000), false, "live");
  // An operator deletes a's key at revision 21; the judge receives it at 200 (through the watch).
  b.set({ revision: 21, operation: "DEL" });
  now = 200;
  judge.saw(key, 21, "DEL");
  assert.equal(
    await judge.ended("a", 5, 3_000),
    false,
    "a delete just seen: a may still be within its deadline",
  );
  now = 1_500;
  assert.equal(
    await judge.ended("a", 5, 3_000),
    false,
    "the judge's own lease since the delete is not the member's",
  );
  now = 3_199;
  assert.equal(
    await judge.ended("a", 5, 3_000),
    false,
    "less than the member's lease since the delete was first seen",
  );
  now = 3_200;
  assert.equal(
    await judge.ended("a", 5, 3_000),
    true,
    "its stored lease since the delete was first seen: over",
  );
  assert.equal(b.deletes.length, 0, "no eviction of a deleted key");
  assert.deepEqual(proofs, ["key_deleted"], "counted by its proof");

  // Another member whose key is written by someone else, then gone altogether (purged).
  const c = memberKeyOf("c");
  const other = bucket({ revision: 30, operation: "PUT", value: { id: "not-c" } });
  const judge2 = newJudge({ leaseMs: 1_000, now: () => now, logger: silent });
  judge2.attach(other.kv, 1);
  judge2.saw(c, 30);
  assert.equal(await judge2.ended("c", 25, 2_000), false, "a foreign write: not over yet");
  other.set(null);
  now += 1_000;
  assert.equal(await judge2.ended("c", 25, 2_000), false, "absent, first read now");
  now += 1_999;
  assert.equal(await judge2.ended("c", 25, 2_000), false, "absent for less than its lease");
  now += 1;
  assert.equal(await judge2.ended("c", 25, 2_000), true, "absent for its lease: over");
});

test("session judge: the member's own later session proves the earlier one over at once", async () => {
  const judge = newJudge({ leaseMs: 1_000, now: () => 0, logger: silent });
  const b = bucket({ revision: 40, operation: "PUT", value: { id: "a", session: 38 } });
  judge.attach(b.kv, 1);
  assert.equal(await judge.ended("a", 30), true);
  assert.equal(await judge.ended("a", 38), false);
});

test("session judge: what it proved and saw by the revisions of one bucket incarnation is forgotten when another is attached", async () => {
  let now = 0;
  const judge = newJudge({ leaseMs: 1_000, now: () => now, logger: silent });
  const key = memberKeyOf("a");
  const old = bucket({ revision: 100, operation: "PUT", value: { id: "a", session: 50 } });
  judge.attach(old.kv, 1);
  judge.saw(key, 100);
  now = 1_000;
  assert.equal(await judge.ended("a", 50), true, "evicted in the first incarnation");
  // The bucket is deleted and created again: revisions start at 1. Member a began session 3 there (live).
  const fresh = bucket({ revision: 4, operation: "PUT", value: { id: "a", session: 3 } });
  judge.attach(fresh.kv, 2);
  judge.saw(key, 4);
  assert.equal(
    await judge.ended("a", 3),
    false,
    "session 3 of the new bucket is live: a proof of session 50 of the old one says nothing",
  );
  // Member b crashed in the new bucket at revision 6 (session 6); the judge saw revision 90 of b in the old one.
  const b = memberKeyOf("b");
  judge.attach(old.kv, 1);
  judge.saw(b, 90);
  const crashed = bucket({ revision: 6, operation: "PUT", value: { id: "b", session: 6 } });
  judge.attach(crashed.kv, 3);
  now = 2_000;
  judge.saw(b, 6);
  now = 3_000;
  assert.equal(
    await judge.ended("b", 6),
    true,
    "its last write unchanged for its lease since first seen in this incarnation: evicted",
  );
  assert.deepEqual(crashed.deletes, [{ key: b, previousSeq: 6, note: { ended: { id: "b", session: 6 } } }]);
});

test("session judge: another member's eviction (its delete marker names the session) proves the session over at once; a plain delete does not", async () => {
  let now = 0;
  const proofs: string[] = [];
  const judge = newJudge({ leaseMs: 1_000, now: () => now, logger: silent, onOver: (p) => proofs.push(p) });
  const key = memberKeyOf("a");
  const b = bucket({ revision: 30, operation: "DEL", value: { ended: { id: "a", session: 5 } } });
  judge.attach(b.kv, 1);
  judge.saw(key, 30, "DEL");
  assert.equal(await judge.ended("a", 5), true, "evicted by another member: over");
  assert.equal(await judge.ended("a", 4), true, "and every earlier session");
  assert.deepEqual(proofs, ["ended_marker"]);
  const other = bucket({ revision: 31, operation: "DEL", value: { ended: { id: "x", session: 9 } } });
  judge.attach(other.kv, 2);
  now = 10;
  judge.saw(memberKeyOf("c"), 31, "DEL");
  assert.equal(await judge.ended("c", 9), false, "a marker naming another member proves nothing at once");
  const later = bucket({ revision: 32, operation: "DEL", value: { ended: { id: "d", session: 3 } } });
  judge.attach(later.kv, 3);
  judge.saw(memberKeyOf("d"), 32, "DEL");
  assert.equal(
    await judge.ended("d", 7),
    false,
    "a marker naming an earlier session proves nothing of a later one",
  );
});
