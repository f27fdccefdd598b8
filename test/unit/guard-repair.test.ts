import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { MemoryGuard } from "../../src/guard/memory-guard.js";

test("the repair claim: a committed id is claimed again, an equal version passes, a newer stored version is stale", async () => {
  const guard = new MemoryGuard({ idTtlMs: 60_000, claimTtlMs: 60_000 }, { logger: pino({ level: "silent" }), scope: "b:DST", linkName: "a-to-b" });
  const [first] = await guard.claim([{ id: "m-1", entity: "e", version: 5 }]);
  assert.equal(first?.decision, "relay");
  await guard.commit([{ id: "m-1", entity: "e", version: 5, token: first?.token ?? "" }]);
  // As the pipeline claims: the id is done, and version 5 is not newer than 5.
  assert.deepEqual((await guard.claim([{ id: "m-1", entity: "e", version: 5 }])).map((r) => r.decision), ["duplicate"]);
  assert.deepEqual((await guard.claim([{ id: "m-0", entity: "e", version: 5 }])).map((r) => r.decision), ["stale"]);
  // As repair claims (the destination lost m-1): it is the message that set version 5.
  const [again] = await guard.claim([{ id: "m-1", entity: "e", version: 5 }], undefined, { repair: true });
  assert.equal(again?.decision, "relay");
  assert.equal(again?.storedVersion, 5);
  // A version older than the stored one is stale under repair too.
  const [old] = await guard.claim([{ id: "m-0", entity: "e", version: 4 }], undefined, { repair: true });
  assert.deepEqual([old?.decision, old?.storedVersion], ["stale", 5]);
});
