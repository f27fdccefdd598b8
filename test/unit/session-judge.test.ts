import { test } from "node:test";
import assert from "node:assert/strict";
import type { KV } from "@nats-io/kv";
import { pino } from "pino";
import { SessionJudge } from "../../src/group/session-judge.js";
import { memberKeyOf } from "../../src/group/member-session.js";

/** A group bucket holding one member key, as far as a judge reads and writes it (a real server in test/integration/member-mode.test.ts). */
function bucket(entry: { revision: number; operation: "PUT" | "DEL"; value?: object }) {
  const deletes: { key: string; previousSeq: number | undefined }[] = [];
  let refuseDelete = false;
  const kv = {
    get: (_key: string) => Promise.resolve({ ...entry, json: () => entry.value }),
    delete: (key: string, opts?: { previousSeq?: number }) => {
      deletes.push({ key, previousSeq: opts?.previousSeq });
      return refuseDelete ? Promise.reject(Object.assign(new Error("wrong last sequence"), { api_error: { err_code: 10071 } })) : Promise.resolve();
    },
  };
  return { kv: kv as unknown as KV, deletes, refuse: () => (refuseDelete = true) };
}

test("session judge: a session is over only on proof, and leases of another session of the same member are judged on their own", async () => {
  let now = 0;
  const judge = new SessionJudge({ leaseMs: 1_000, now: () => now, logger: pino({ level: "silent" }) });
  // Member a is on its session 5 (first written at revision 5), last written at revision 9.
  const b = bucket({ revision: 9, operation: "PUT", value: { id: "a", session: 5, leaseMs: 1_000 } });
  judge.attach(b.kv);
  const [old, current] = await Promise.all([judge.ended("a", 3), judge.ended("a", 5)]);
  assert.equal(old, true, "session 3 is over: the key holds a write of another session");
  assert.equal(current, false, "session 5 is live: its last write was just seen");
  assert.equal(b.deletes.length, 0);
  now = 999;
  assert.equal(await judge.ended("a", 5), false, "unchanged for less than its lease: no eviction");
  assert.equal(b.deletes.length, 0);
  now = 1_000;
  assert.equal(await judge.ended("a", 5), true, "unchanged for its lease (own clock): evicted");
  assert.deepEqual(b.deletes, [{ key: memberKeyOf("a"), previousSeq: 9 }], "by CAS on the revision it saw");
  assert.equal(await judge.ended("a", 5), true, "remembered");
});

test("session judge: an eviction refused (the member wrote meanwhile) proves nothing; a replica behind proves nothing", async () => {
  let now = 0;
  const judge = new SessionJudge({ leaseMs: 1_000, now: () => now, logger: pino({ level: "silent" }) });
  const b = bucket({ revision: 9, operation: "PUT", value: { id: "a", session: 5 } });
  judge.attach(b.kv);
  judge.saw(memberKeyOf("a"), 9);
  now = 5_000;
  b.refuse();
  assert.equal(await judge.ended("a", 5), false, "the CAS delete was refused: alive");
  const behind = bucket({ revision: 4, operation: "DEL" });
  judge.attach(behind.kv);
  assert.equal(await judge.ended("a", 7), false, "a revision before the session: a replica behind");
  const deleted = bucket({ revision: 12, operation: "DEL" });
  judge.attach(deleted.kv);
  assert.equal(await judge.ended("a", 7), true, "deleted after the session began: over");
});
