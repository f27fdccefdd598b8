import { test } from "node:test";
import assert from "node:assert/strict";
import { MemberSession, memberModeKeyLeaseMs } from "../../src/group/member-session.js";
import { LeaseMode } from "../../src/group/lease-mode.js";
import { encodeLeaseValue, readLeaseValue, writeLeaseMs } from "../../src/group/lease-value.js";

test("member session: valid from its last write's send time + lease - margin; a new session ends the old; ended is final and told once", () => {
  let now = 0;
  let ends = 0;
  const session = new MemberSession({ leaseMs: 5_000, marginMs: 500, now: () => now, onEnded: () => ends++ });
  let told = 0;
  session.onChange(() => told++);
  assert.equal(session.current(), undefined, "none before its first write");
  session.renewed(7, 100);
  assert.equal(session.current(), 7);
  assert.ok(session.validFor(7));
  assert.equal(session.validFor(6), false, "another session is never valid");
  now = 4_599;
  assert.ok(session.validFor(7), "until sent + 5000 - 500");
  now = 4_600;
  assert.equal(session.validFor(7), false, "not at the deadline");
  assert.equal(session.current(), undefined);
  session.renewed(7, 4_000); // a later write of the chain: valid again from its send time
  assert.ok(session.validFor(7));
  session.renewed(9, 4_100); // a new chain (this one ended): the old one is told and never valid again
  assert.equal(told, 1);
  assert.equal(session.validFor(7), false);
  assert.ok(session.validFor(9));
  session.ended(true);
  assert.equal(session.current(), undefined);
  assert.equal(told, 2);
  assert.equal(ends, 1, "a broken chain is counted");
  session.ended(true);
  assert.equal(told, 2, "told once");
  assert.equal(ends, 1);
});

test("lease mode: a write with the session stores the long key lease and the member's own; the owner holds while its session does; key mode always holds", () => {
  let now = 0;
  const own = new MemberSession({ leaseMs: 5_000, marginMs: 500, now: () => now });
  const mode = new LeaseMode({ own, judge: { ended: () => Promise.resolve(false) } });
  assert.equal(mode.next(), undefined, "no session: key mode");
  mode.wrote(undefined);
  assert.ok(mode.holds());
  own.renewed(3, 0);
  assert.equal(mode.next(), 3);
  mode.wrote(3);
  assert.ok(mode.member && mode.holds());
  now = 4_500;
  assert.equal(mode.holds(), false, "the session lapsed: the lease does not hold");
  const opts = { owner: "a", leaseMs: 5_000, renewMs: 1_000 };
  assert.equal(writeLeaseMs(opts, 3), memberModeKeyLeaseMs(5_000));
  assert.equal(memberModeKeyLeaseMs(5_000), 30_000);
  assert.equal(memberModeKeyLeaseMs(10_000), 60_000);
  const value = readLeaseValue({ json: <T>() => JSON.parse(encodeLeaseValue(opts, 11, 3)) as T });
  assert.deepEqual({ owner: value?.owner, leaseRevision: value?.leaseRevision, leaseMs: value?.leaseMs, session: value?.session, memberLeaseMs: value?.memberLeaseMs }, { owner: "a", leaseRevision: 11, leaseMs: 30_000, session: 3, memberLeaseMs: 5_000 });
  const keyMode = readLeaseValue({ json: <T>() => JSON.parse(encodeLeaseValue(opts, 11)) as T });
  assert.equal(keyMode?.leaseMs, 5_000);
  assert.equal(keyMode?.session, undefined);
});
