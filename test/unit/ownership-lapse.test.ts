import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { Ownership } from "../../src/link/ownership.js";
import { check } from "../helpers/check.js";

/**
 * A lease that lapses for a moment and is never lost (a renewal answered after its deadline, a member
 * session renewed late): `valid()` goes false, then true again under the same lease revision, and no
 * acquisition ever follows. A link that asked for the lease in that moment must go on; it used to wait
 * in holdLease for an acquisition that never came (seen with 1,000 links on a starved machine: links
 * `recovering: waiting for the link lease` for 10 minutes while /status named this relay their owner).
 */
function parts(revision: number | undefined) {
  let valid = false;
  const events: string[] = [];
  const lease = {
    valid: () => valid,
    holder: undefined,
    resumed: false,
    leaseRevision: revision,
    acquired: (signal?: AbortSignal) =>
      new Promise<number>((_resolve, reject) => signal?.addEventListener("abort", () => reject(new Error("stopped")), { once: true })),
    setEligible: () => undefined,
    release: () => Promise.resolve(),
    start: () => undefined,
  };
  const pipeline = { size: 3, drained: () => Promise.resolve(), abandon: () => (events.push("abandon"), Promise.resolve()), resume: () => events.push("resume") };
  const abort = new AbortController();
  const ownership = new Ownership({
    lease: lease as never,
    pipeline,
    source: { flush: () => Promise.resolve() },
    dest: { flush: () => Promise.resolve() },
    publishTimeoutMs: 1_000,
    logger: pino({ level: "silent" }),
    signal: abort.signal,
    guardLost: () => false,
    events: { stopPulling: () => undefined, refreshState: () => undefined, lapseWrites: () => undefined, resetStall: () => undefined, tookOver: () => undefined },
  });
  return { ownership, events, abort, setValid: (v: boolean) => (valid = v) };
}

test("a lease that lapsed and holds again under the same revision ends the wait: the link goes on with what it holds", async (t) => {
  const p = parts(7);
  t.after(() => p.abort.abort());
  let done: boolean | undefined;
  void p.ownership.holdLease().then((v) => (done = v));
  assert.equal(p.ownership.standby, true);
  p.setValid(true);
  await check(() => done === true, { name: "holdLease returns once the lease holds again", timeoutMs: 5_000 });
  assert.deepEqual(p.events, ["resume"], "nothing dropped: the lease was never lost");
  assert.equal(p.ownership.standby, false);
});

test("a relay that never held the lease still waits for an acquisition", async () => {
  const p = parts(undefined);
  let done: boolean | undefined;
  const waiting = p.ownership.holdLease().then((v) => (done = v));
  p.setValid(true); // cannot happen without an acquisition; even so, no revision to hold again
  await new Promise((resolve) => setTimeout(resolve, 600));
  assert.equal(done, undefined);
  p.abort.abort();
  await waiting;
  assert.equal(done, false, "stopping ends the wait");
});
