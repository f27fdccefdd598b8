import { test } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { check, uniqueName } from "../helpers/check.js";
import { startRelay } from "../helpers/relays.js";
import { publishIds, TEST_GROUP, waitForCount } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";
import { connectTo, createStream, exactlyOnce, readStream } from "../helpers/streams.js";

/**
 * Two links read disjoint subjects of one source stream (`<src>.x.>`, `<src>.y.>`) and rewrite both to
 * `<dst>.>` in one destination: their Relay-Source markers share source and subjects. Each relayed
 * message names its link (Relay-Link), so a link whose durable is gone starts after its own newest
 * marker, not after the other link's newer one (which would skip everything in between).
 */
test("two links from one source with overlapping rewritten subjects: a re-created durable starts after its own link's newest marker, nothing skipped", async (t) => {
  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url);
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${dst}.>`] });
  const link = (name: string, part: string) => `  - name: ${name}
    from: { region: a, stream: ${src}, filter: "${src}.${part}.>" }
    to: { region: b, stream: ${dst}, subject: { stripPrefix: "${src}.${part}.", addPrefix: "${dst}." } }
    ackWait: 5s
    publishTimeout: 2s
`;
  const yaml = (...links: string[]) =>
    `regions:\n  a: { servers: ["${a.url}"] }\n  b: { servers: ["${b.url}"] }\nlinks:\n${links.join("")}log: { level: info }\n${TEST_GROUP}\nshutdown: { grace: 10s }\n`;
  const both = yaml(link("x-link", "x"), link("y-link", "y"));
  // Interleaved in the source: x-i and y-i take turns, so each link's source seqs lie between the other's.
  const publish = async (from: number, count: number) => {
    const ids: string[] = [];
    for (let i = from; i < from + count; i++) {
      ids.push(...(await publishIds(nca, `${src}.x`, "x", 1, i)), ...(await publishIds(nca, `${src}.y`, "y", 1, i)));
    }
    return ids;
  };

  const first = await publish(0, 20); // source seqs 1..40
  const run1 = await startRelay(t, both, "b");
  await waitForCount(ncb, dst, 40, 30_000, "both links relayed their first 20");
  await run1.relay.stop(AbortSignal.timeout(10_000));

  const second = await publish(20, 20); // source seqs 41..80
  // Only y-link runs: its newest marker (source seq 80) is now past everything x-link has not relayed.
  const run2 = await startRelay(t, yaml(link("y-link", "y")), "b");
  await waitForCount(ncb, dst, 60, 30_000, "y-link relayed its next 20");
  await run2.relay.stop(AbortSignal.timeout(10_000));

  // x-link's cursor is gone: its new one is placed from the destination's markers.
  await (await jetstreamManager(nca)).consumers.delete(src, "relay-x-link");
  const run3 = await startRelay(t, both, "b");
  const expected = [...first, ...second];
  const read = async () => (await readStream(ncb, dst)).map((m) => m.headers["Nats-Msg-Id"] ?? "");
  await check(async () => (await read()).length >= expected.length, {
    name: "x-link's re-created durable relays x-20..x-39 (the destination holds all 80)",
    timeoutMs: 20_000,
    intervalMs: 200,
  }).catch(async (err: unknown) => {
    const { missing } = exactlyOnce(await read(), expected);
    const created = run3.logs.lines.find((l) => l.includes("no source consumer: created one"));
    throw new Error(`${(err as Error).message}; missing ${missing.join(",")}; ${created ?? "(no cursor line)"}`);
  });
  await check(() => run3.relay.status().links.every((l) => l.state === "live"), { name: "both links live", timeoutMs: 10_000 });
  const stored = await readStream(ncb, dst);
  const { missing, duplicated } = exactlyOnce(
    stored.map((m) => m.headers["Nats-Msg-Id"] ?? ""),
    expected,
  );
  assert.deepEqual({ missing, duplicated }, { missing: [], duplicated: [] });
  assert.equal(stored.length, expected.length);
  // Every copy names the link that relayed it.
  for (const m of stored) {
    const want = m.headers["Nats-Msg-Id"]?.startsWith("x-") ? "x-link" : "y-link";
    assert.equal(m.headers["Relay-Link"], want, `${m.headers["Nats-Msg-Id"]} names ${want}`);
  }
  // And the cursor line says where it started: after x-19 (source seq 39).
  const created = run3.logs.lines.find((l) => l.includes("no source consumer: created one"));
  assert.match(created ?? "", /"startSeq":40\b/);
});
