import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";
import {
  mergeLiveness,
  scrapeMetric,
  settled,
  startLoad,
  terminate,
  waitReady,
  watch,
  withReport,
} from "./process-harness.js";

/**
 * Leader elections of the group bucket's stream (what every rolling restart of the destination's
 * servers does): a member-key write that meets one answers "no responders", which is transient (DESIGN
 * §11). An election shorter than `group.lease` costs no lease and no pause longer than itself. A
 * stepdown elects a new leader at once; a leader killed is replaced only after the followers' election
 * timeout (nats-server: 4 to 9 s), so that scenario runs with a lease longer than that.
 */

const STEPDOWNS = 4;
const STEPDOWN_EVERY_MS = 5_000;
const RATE = 1_000;
const LOAD_MS = 30_000;
const MAX_IDLE_MS = 3_000;

interface Fault {
  readonly name: string;
  readonly leaseMs: number;
  /** Acts on the leader of the bucket's stream; the test measures idle only where `maxIdleMs` is given. */
  readonly maxIdleMs?: number;
}

const STEPDOWN: Fault = {
  name: `the group bucket's stream leader steps down ${STEPDOWNS} times`,
  leaseMs: 5_000,
  maxIdleMs: MAX_IDLE_MS,
};
const KILL: Fault = {
  name: "the node leading the group bucket's stream is killed (-9) and restarted",
  leaseMs: 15_000,
};

for (const fault of [STEPDOWN, KILL]) {
  test(`${fault.name} under load (B a 3-node cluster, bucket and destination R3): no lease lost${fault.maxIdleMs ? `, B never idle over ${fault.maxIdleMs / 1000} s` : ""}; every id once, in order`, async (t) => {
    const servers = withServers(t);
    const [a, cluster] = await Promise.all([servers.startNats(), servers.startNatsCluster({ size: 3 })]);
    const src = uniqueName("SRC");
    const dst = uniqueName("DST");
    const bucket = uniqueName("grp");
    const nca = await connectTo(t, a.url);
    const ncb = await connectTo(t, cluster.urls);
    await createStream(nca, { name: src, subjects: [`${src}.>`] });
    await createStream(ncb, { name: dst, subjects: [`${src}.>`], replicas: 3 });
    const config = await writeConfig(
      linkYaml({
        regions: { a: [a.url], b: cluster.urls },
        links: [
          {
            name: "a-to-b",
            from: "a",
            fromStream: src,
            to: "b",
            toStream: dst,
            extra: "    batchSize: 200\n    inFlight: 512\n",
          },
        ],
        // The bucket is created by the relays: R3 on a 3-node cluster.
        extra: `group: { bucket: ${bucket}, lease: ${fault.leaseMs / 1000}s, renew: ${fault.leaseMs / 5}ms }\nhttp: { listen: "127.0.0.1:0" }`,
      }),
    );
    const relays = [
      spawnRelay(t, ["run", "--config", config, "--region", "b"]),
      spawnRelay(t, ["run", "--config", config, "--region", "b"]),
    ];
    const urls = await Promise.all(relays.map((r) => r.httpUrl()));
    await Promise.all(urls.map((u, i) => waitReady(u, `relay ${i}`)));
    const jsm = await jetstreamManager(ncb);
    const stream = `KV_${bucket}`;
    assert.equal((await jsm.streams.info(stream)).config.num_replicas, 3, "the group bucket is R3");

    const load = startLoad(nca, src, (RATE * LOAD_MS) / 1_000, { ratePerSec: RATE });
    const probes = urls.map((u) => watch(t, u));
    // The destination's last sequence, sampled: the longest time it did not move while the load ran.
    let lastSeq = 0;
    let movedAt = Date.now();
    let longestIdleMs = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const seq = await jsm.streams.info(dst).then(
          (i) => i.state.last_seq,
          () => lastSeq,
        );
        const now = Date.now();
        if (seq !== lastSeq) {
          if (lastSeq > 0) longestIdleMs = Math.max(longestIdleMs, now - movedAt);
          lastSeq = seq;
          movedAt = now;
        }
        await delay(50);
      }
    })();
    await check(() => lastSeq > 0, { name: "the destination receives the load", timeoutMs: 20_000 });
    const leaders: string[] = [];
    if (fault === STEPDOWN) {
      for (let i = 0; i < STEPDOWNS; i++) {
        await delay(STEPDOWN_EVERY_MS);
        const before = (await jsm.streams.info(stream)).cluster?.leader ?? "?";
        const reply = await ncb.request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, undefined, {
          timeout: 5_000,
        });
        assert.ok(
          reply.json<{ success?: boolean }>().success,
          `stepdown ${i + 1} of ${stream}: ${reply.string()}`,
        );
        leaders.push(before);
      }
    } else {
      await delay(STEPDOWN_EVERY_MS);
      const name = (await jsm.streams.info(stream)).cluster?.leader;
      const leader = cluster.nodes.find((n) => n.name === name);
      if (!leader) throw new Error(`stream leader ${name} is not one of the cluster's nodes`);
      const dstLeader = (await jsm.streams.info(dst)).cluster?.leader;
      leaders.push(`${leader.name}${dstLeader === leader.name ? " (the destination's leader too)" : ""}`);
      await leader.kill();
      await delay(STEPDOWN_EVERY_MS);
      await leader.restart();
    }
    await load.done;
    // The load's last messages are in too: idle counts only while there was something to relay.
    const stuck = await settled(nca, src, "after the stepdowns", 60_000);
    sampling = false;
    await sampler;
    const lost = await Promise.all(
      urls.map((u) => scrapeMetric(u, "relay_lease_transitions_total", { link: "a-to-b", reason: "lost" })),
    );
    const failures = await Promise.all(
      urls.map(async (u) => ({
        transient: await scrapeMetric(u, "relay_group_bucket_failures_total", { kind: "transient" }),
        gone: await scrapeMetric(u, "relay_group_bucket_failures_total", { kind: "gone" }),
      })),
    );
    const liveness = mergeLiveness(await Promise.all(probes.map((p) => p.stop())));
    t.diagnostic(
      `leaders stepped down: ${leaders.join(", ")}; longest idle of the destination: ${longestIdleMs} ms; leases lost per relay: ${lost.join(", ")}; group bucket failures per relay: ${JSON.stringify(failures)}`,
    );
    const codes = await Promise.all(relays.map((r) => terminate(r)));
    const report = {
      ...(await checkDelivery({
        fault: `${fault === STEPDOWN ? `group bucket stream leader stepdown x${STEPDOWNS}` : "group bucket stream leader node kill -9"} (bucket R3)`,
        dest: ncb,
        stream: dst,
        source: await readSource(nca, src),
      })),
      ...(liveness ? { liveness } : {}),
    };
    await recordRow(report);
    if (stuck) throw withReport(stuck, report);
    assertDelivery(report);
    assert.deepEqual(lost, [0, 0], "no relay lost the link's lease to an election");
    // A member write meets an election only when one falls into it (not asserted); none may be taken for a bucket gone.
    assert.deepEqual(
      failures.map((f) => f.gone),
      [0, 0],
      `no group bucket failure counted as gone: ${JSON.stringify(failures)}`,
    );
    // A killed node may lead the destination stream too: its election pauses the destination itself.
    if (fault.maxIdleMs !== undefined) {
      assert.ok(
        longestIdleMs <= fault.maxIdleMs,
        `the destination was idle ${longestIdleMs} ms (at most ${fault.maxIdleMs} ms allowed)`,
      );
    }
    assert.deepEqual(codes, [0, 0], "both relays drain and exit 0");
  });
}
