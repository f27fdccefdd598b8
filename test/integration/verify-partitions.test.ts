import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../../src/config/load.js";
import { formatReport } from "../../src/verify/report.js";
import { repairLink } from "../../src/verify/repair.js";
import { verifyLink } from "../../src/verify/verify.js";
import { withServers } from "../helpers/servers.js";
import type { NatsNode } from "../helpers/types.js";
import { uniqueName } from "../helpers/check.js";
import { connectTo, createStream, publishMany, readStream } from "../helpers/streams.js";
import { linkYaml } from "../helpers/scenario.js";

/**
 * verify and repair judge each partition of a partitioned link by its own horizon (the last source
 * seq the destination holds from that partition): every partition has its own relay, durable and
 * cursor, so one may be behind the others while it still delivers. On real nats-servers; the
 * destination holds the copies exactly as the partitions' relays stamp them.
 */

const servers = withServers({ after });
let a: NatsNode;
let b: NatsNode;
before(async () => {
  [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
});

async function publishAll(
  nc: NatsConnection,
  list: readonly { subject: string; headers: Record<string, string> }[],
): Promise<void> {
  for (const m of list) await publishMany(nc, 1, () => m, 1);
}

test("a partition behind the others is not yet relayed, not missing, and repair leaves it alone; a gap below its own horizon is still missing", async (t) => {
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  // Source seqs 1..12, `m-<seq - 1>`: partition 0 holds the odd seqs, partition 1 the even ones.
  const partitionOf = (seq: number) => (seq % 2 === 1 ? 0 : 1);
  await publishAll(
    nca,
    Array.from({ length: 12 }, (_, i) => ({
      subject: `${src}.${partitionOf(i + 1)}.x`,
      headers: { "Nats-Msg-Id": `m-${i}` },
    })),
  );
  // Partition 0 is up to seq 11, except seq 5 (lost: missing); partition 1 is behind, at seq 4.
  const held = [1, 2, 3, 4, 7, 9, 11];
  await publishAll(
    ncb,
    held.map((seq) => ({
      subject: `${src}.${partitionOf(seq)}.x`,
      headers: {
        "Nats-Msg-Id": `m-${seq - 1}`,
        "Relay-Origin": "a",
        "Relay-Path": "a",
        "Relay-Source": `a ${src} ${seq}`,
        "Relay-Link": `a-to-b/p${partitionOf(seq)}`,
      },
    })),
  );
  const yaml = linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [] }).replace(
    "links:\n",
    `links:
  - name: a-to-b
    from: { region: a, stream: ${src}, filter: "${src}.*.>" }
    to: { region: b, stream: ${dst} }
    partitions: { count: 2, token: 2 }
`,
  );
  const config = parseConfigText(yaml, "test.yaml");

  const report = await verifyLink(config, "a-to-b");
  assert.deepEqual(
    report.missing.examples,
    [{ id: "m-4", sourceSeq: 5 }],
    "only the gap below partition 0's own horizon",
  );
  assert.equal(
    report.notYetRelayed.count,
    4,
    "partition 1's seqs 6, 8, 10, 12: its relay is still delivering them",
  );
  assert.deepEqual(report.notYetRelayed.examples, ["m-5", "m-7", "m-9", "m-11"]);
  assert.equal(report.destination.lastRelayedSourceSeq, 11);
  assert.deepEqual(report.destination.lastRelayedSourceSeqByPartition, { "0": 11, "1": 4 });
  assert.match(formatReport(report), /last Relay-Source seq 11 \(per partition: 0: 11, 1: 4\)/);

  const repaired = await repairLink(config, "a-to-b");
  assert.deepEqual(
    repaired.items.map((i) => [i.id, i.outcome]),
    [["m-4", "repaired"]],
    "repair puts back the gap only",
  );
  const ids = (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"]);
  assert.deepEqual(
    ids,
    [...held.map((seq) => `m-${seq - 1}`), "m-4"],
    "nothing of the partition that is behind was published",
  );
});
