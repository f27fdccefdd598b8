import { test } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { pino } from "pino";
import { leaseKey } from "../../src/config/lease-key.js";
import { parseConfigText } from "../../src/config/load.js";
import { createGuard } from "../../src/guard/create-guard.js";
import { GroupKeys } from "../../src/guard/layout.js";
import type { ClaimedItem, ClaimResult, GuardItem } from "../../src/guard/types.js";
import { repairLink } from "../../src/verify/repair.js";
import { publishMany, readStream } from "../helpers/streams.js";
import { twoRegions } from "../helpers/scenario.js";

/**
 * `repair` next to the live relay of the same link, in one guard scope. The live relay's guard is built
 * exactly as relay.ts builds it (the link's name, its lease key as the fence) and claims under a lease,
 * as the pipeline does; repair is the real `repairLink`. Whatever the live relay has claimed and
 * published but not committed yet, repair must not put an older version of its entity back after it.
 * On real nats-servers and a real redis-server.
 */
test("repair next to the live relay: an older version is never put back after a newer one the relay has published and not committed (lease mode and keyed)", async (t) => {
  const { src, dst, nca, ncb, servers, yaml } = await twoRegions(t);
  const redis = await servers.startRedis({ appendonly: true });
  const admin = new Redis(redis.url);
  t.after(() => admin.disconnect());
  const configText = yaml(
    `    guard: { redis: { url: "${redis.url}" }, versions: { entity: "header:Test-Entity", version: "header:Test-Version" } }\n`,
  );
  const config = parseConfigText(configText, "test.yaml");
  const link = config.links[0]!;
  const scope = `${link.to.region}:${link.to.stream}`;
  // The live relay's guard, with relay.ts's deps.
  const live = await createGuard(link.guard, {
    logger: pino({ level: "silent" }),
    scope,
    linkName: link.name,
    fence: leaseKey(link),
  });
  t.after(() => live.stop());
  await live.start();
  const lease = { leaseRevision: 1 };

  let seq = 0;
  const source = new Map<string, { seq: number; entity: string; version: number }>();
  /** A source message `id` of `entity` at `version` (the next source seq). */
  const atSource = async (id: string, entity: string, version: number) => {
    await publishMany(
      nca,
      1,
      () => ({
        subject: `${src}.${entity}`,
        headers: { "Nats-Msg-Id": id, "Test-Entity": entity, "Test-Version": String(version) },
      }),
      1,
    );
    source.set(id, { seq: ++seq, entity, version });
  };
  /** What the live relay's pipeline does with `id`: claim (under its lease), publish as the link writes it, and, when `commit`, commit. */
  const relay = async (id: string, commit: boolean): Promise<{ result: ClaimResult; item: GuardItem }> => {
    const s = source.get(id)!;
    const item: GuardItem = { id, entity: s.entity, version: s.version };
    const [result] = await live.claim([item], undefined, lease);
    assert.equal(result?.decision, "relay", `the live relay claims ${id}`);
    await publishMany(
      ncb,
      1,
      () => ({
        subject: `${src}.${s.entity}`,
        headers: {
          "Nats-Msg-Id": id,
          "Test-Entity": s.entity,
          "Test-Version": String(s.version),
          "Relay-Origin": "a",
          "Relay-Path": "a",
          "Relay-Source": `a ${src} ${s.seq}`,
          "Relay-Link": link.name,
        },
      }),
      1,
    );
    if (commit) await live.commit([{ ...item, token: result.token! } as ClaimedItem], lease);
    return { result: result!, item };
  };
  const repair = async () =>
    (await repairLink(config, link.name)).items.map((i) => [i.id, i.outcome, i.storedVersion]);
  const versionsAtDestination = async (entity: string) =>
    (await readStream(ncb, dst))
      .filter((m) => m.headers["Test-Entity"] === entity)
      .map((m) => Number(m.headers["Test-Version"]));

  // E v4 relayed and committed; v5 never reached the destination; v6 published, not committed yet
  // (the live relay claimed it by its lease: no claim key).
  await atSource("e-4", "E", 4);
  await atSource("e-5", "E", 5);
  await atSource("e-6", "E", 6);
  await relay("e-4", true);
  const e6 = await relay("e-6", false);
  assert.equal(await admin.exists(new GroupKeys(scope, 0).claim("e-6")), 0, "claimed by the lease");
  assert.deepEqual(await repair(), [["e-5", "in-flight", 4]], "v5 waits while v6 may still be in flight");
  assert.deepEqual(await versionsAtDestination("E"), [4, 6]);

  // The live relay commits v6: v5 is stale for good.
  await live.commit([{ ...e6.item, token: e6.result.token! } as ClaimedItem], lease);
  assert.deepEqual(await repair(), [["e-5", "stale", 6]]);

  // Keyed: the live relay has seen repair as a second writer of the scope and claims with a key per
  // id. F v1 committed, v2 lost, v3 published under its claim key and not committed.
  await atSource("f-1", "F", 1);
  await atSource("f-2", "F", 2);
  await atSource("f-3", "F", 3);
  await relay("f-1", true);
  const f3 = await relay("f-3", false);
  assert.equal(
    await admin.exists(new GroupKeys(scope, 0).claim("f-3")),
    1,
    "the live relay claims with keys now",
  );
  assert.deepEqual(
    await repair(),
    [
      ["e-5", "stale", 6],
      ["f-2", "in-flight", 1],
    ],
    "f v2 waits while v3 may still be in flight",
  );
  await live.commit([{ ...f3.item, token: f3.result.token! } as ClaimedItem], lease);
  assert.deepEqual(await repair(), [
    ["e-5", "stale", 6],
    ["f-2", "stale", 3],
  ]);

  // Versions never went backwards at the destination; the older versions were never put back.
  assert.deepEqual(await versionsAtDestination("E"), [4, 6]);
  assert.deepEqual(await versionsAtDestination("F"), [1, 3]);
});
