import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { pino } from "pino";
import { bucketGoneAfter, deleteKeyWithNote, isBucketGone, openGroupBucket } from "../../src/group/bucket.js";
import { isCasConflict } from "../../src/group/lease-value.js";
import { GroupMembership } from "../../src/group/membership.js";
import { groupSessions } from "../../src/group/session-judge.js";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";

/**
 * What a request to the group bucket answers once the bucket is deleted, on a real nats-server
 * (2.9.10): a write "no responders" (the client's JetStream not enabled, also what an election of
 * the bucket's stream answers), a read and a stream info "stream not found" (10059). Only the latter
 * proves the bucket gone; test/faults/group-election.test.ts shows elections are survived.
 */

const logger = pino({ level: "silent" });
const shared = withServers({ after });
let node: NatsNode;
before(async () => {
  node = await shared.startNats();
});

test("a write to a deleted group bucket meets no responders, which alone proves nothing; confirmed by a stream info (10059) it proves the bucket gone", async (t) => {
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const bucket = uniqueName("grp");
  const kv = await openGroupBucket({ nc, bucket, timeoutMs: 1_000 });
  const revision = await kv.put("k", "v");
  const writeErr = await kv.update("k", "v", revision + 5).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(writeErr, "a CAS write on a stale revision fails");
  assert.equal(
    await bucketGoneAfter(kv, writeErr),
    false,
    "a refused write of a bucket that exists proves nothing",
  );
  await (await jetstreamManager(nc)).streams.delete(`KV_${bucket}`);
  const err = await kv.put("k", "v").then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(
    err instanceof Error && err.name === "JetStreamNotEnabled",
    `a write to the deleted bucket: ${String(err)}`,
  );
  assert.equal(isBucketGone(err), false, "no responders alone is not proof (an election answers the same)");
  assert.equal(await bucketGoneAfter(kv, err), true, "confirmed by a stream info: gone");
  const readErr = await kv.get("k").then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.equal(isBucketGone(readErr), true, "a read answers stream not found");
});

test("an eviction's delete is a CAS delete whose marker names what it ended: refused when the key changed, read back as a delete with its note", async (t) => {
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const kv = await openGroupBucket({ nc, bucket: uniqueName("grp"), timeoutMs: 1_000 });
  const key = "_group.members.a";
  const revision = await kv.put(key, JSON.stringify({ id: "a", name: "a" }));
  const refused = await deleteKeyWithNote(kv, key, revision - 1 || revision + 1, {
    ended: { id: "a", session: revision },
  }).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(isCasConflict(refused), `a stale revision is refused as a CAS conflict: ${String(refused)}`);
  await deleteKeyWithNote(kv, key, revision, { ended: { id: "a", session: revision } });
  const entry = await kv.get(key);
  assert.equal(entry?.operation, "DEL", "an ordinary delete to KV clients");
  assert.deepEqual(entry?.json(), { ended: { id: "a", session: revision } });
  assert.ok((await kv.create(key, "{}")) > revision, "a new chain can begin on it (create after a delete)");
});

test("a member whose group bucket is deleted ends its session at its next write (not at its deadline) and starts a new one in the bucket it creates again", async (t) => {
  const nc = await connect({ servers: node.url });
  t.after(() => nc.close());
  const bucket = uniqueName("grp");
  const leaseMs = 5_000;
  const sessions = groupSessions({ leaseMs, renewMs: 250 }, logger);
  const failures: string[] = [];
  const membership = new GroupMembership({
    nc,
    bucket,
    member: { id: "a", name: "a" },
    leaseMs,
    renewMs: 250,
    logger,
    sessions,
    onBucketFailure: (kind) => failures.push(kind),
  });
  t.after(() => membership.stop());
  membership.start();
  await check(() => sessions.own.current() !== undefined, { name: "a's session begins", timeoutMs: 5_000 });
  const first = sessions.own.current();
  let ended = false;
  sessions.own.onChange(() => (ended ||= sessions.own.current() === undefined));
  const deletedAt = performance.now();
  await (await jetstreamManager(nc)).streams.delete(`KV_${bucket}`);
  await check(() => ended, { name: "a's session ends", timeoutMs: leaseMs });
  assert.ok(performance.now() - deletedAt < leaseMs / 2, "at its next write, well before its deadline");
  assert.ok(failures.includes("gone"), `counted as gone: ${failures.join(", ")}`);
  await check(() => sessions.own.current() !== undefined, {
    name: "a new session in the bucket created again",
    timeoutMs: 5_000,
  });
  assert.ok((await (await jetstreamManager(nc)).streams.info(`KV_${bucket}`)).state.messages > 0);
  t.diagnostic(`sessions: ${first} then ${sessions.own.current()}`);
});
