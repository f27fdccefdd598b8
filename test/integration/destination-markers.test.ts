import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { headers } from "@nats-io/nats-core";
import {
  findStoredSourceSeqs,
  lastStoredSourceSeq,
  parseSourceMarker,
} from "../../src/nats/destination-markers.js";
import type { SourceRef } from "../../src/nats/destination-markers.js";
import { isRelayError } from "../../src/errors.js";
import { formatNanos } from "../../src/protocol/headers.js";
import { withServers } from "../helpers/servers.js";
import { uniqueName } from "../helpers/check.js";
import { connectTo, createStream } from "../helpers/streams.js";

// One server and one client for the file; each test has its own streams.
let nc!: NatsConnection;
after(() => nc?.close());
const servers = withServers({ after });
before(async () => {
  const node = await servers.startNats();
  nc = await connectTo({ after: () => undefined }, node.url); // closed by the file's own after hook
});

const A: SourceRef = { region: "a", stream: "ORDERS" };
const T0 = Date.parse("2026-11-30T00:00:00Z");

/** What one test message carries: a marker (source, seq, publish time in ms) or nothing. */
type Marker = { region: string; stream: string; seq: number; timeMs?: number; link?: string } | undefined;

/**
 * A fresh stream holding one message per marker, in order; resolves with the dest seq of each. Published
 * 256 at a time: one connection keeps them in order, so the dest seqs are 1..n.
 */
async function streamWith(markers: readonly Marker[]): Promise<{ stream: string; seqs: number[] }> {
  const stream = uniqueName("DEST");
  await createStream(nc, { name: stream, subjects: [`${stream}.>`] });
  const js = jetstream(nc);
  const seqs: number[] = [];
  for (let i = 0; i < markers.length; i += 256) {
    const acks = await Promise.all(
      markers.slice(i, i + 256).map((mk, j) => {
        const h = headers();
        h.set("Nats-Msg-Id", `m-${i + j}`);
        if (mk) {
          h.set("Relay-Source", `${mk.region} ${mk.stream} ${mk.seq}`);
          h.set(
            "Relay-Source-Time",
            formatNanos(BigInt(Math.round((mk.timeMs ?? T0 + mk.seq) * 1_000)) * 1_000n),
          );
          if (mk.link) h.set("Relay-Link", mk.link);
        }
        return js.publish(`${stream}.${(i + j) % 4}`, "x", { headers: h });
      }),
    );
    seqs.push(...acks.map((a) => a.seq));
  }
  return { stream, seqs };
}

const of = (src: SourceRef, seq: number, timeMs?: number): Marker => ({
  ...src,
  seq,
  ...(timeMs === undefined ? {} : { timeMs }),
});
const range = (n: number, f: (i: number) => Marker): Marker[] => Array.from({ length: n }, (_, i) => f(i));

test("parseSourceMarker accepts what the relay writes and nothing else", () => {
  assert.deepEqual(parseSourceMarker("a ORDERS 7"), { region: "a", stream: "ORDERS", seq: 7 });
  assert.deepEqual(parseSourceMarker("us-east-1 DST_1f2e 9007199254740991"), {
    region: "us-east-1",
    stream: "DST_1f2e",
    seq: 9007199254740991,
  });
  for (const bad of [
    "",
    "a",
    "a ORDERS",
    "a ORDERS 0",
    "a ORDERS 07",
    "a ORDERS -1",
    "a ORDERS +1",
    "a ORDERS 1.5",
    "a ORDERS 1e3",
    "a ORDERS 7x",
    "a  ORDERS 7",
    " a ORDERS 7",
    "a ORDERS 7 ",
    "a\tORDERS 7",
    "a ORDERS 7 8",
    "a ORDERS 9007199254740993",
    "a ORDERS 12345678901234567",
  ]) {
    assert.equal(parseSourceMarker(bad), undefined, JSON.stringify(bad));
  }
});

test("an empty stream: nothing stored, and certain of it", async () => {
  const { stream } = await streamWith([]);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 0,
    complete: true,
  });
  assert.equal((await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 1 })).size, 0);
});

// 5,000 messages: A's markers interleaved with another region's and another stream's copies of the
// same seqs, and messages without markers.
const OTHER_REGION: SourceRef = { region: "b", stream: "ORDERS" };
const OTHER_STREAM: SourceRef = { region: "a", stream: "ORDERS2" };
function interleaved(i: number): Marker {
  const n = Math.floor(i / 4) + 1;
  return [of(A, n), of(OTHER_REGION, n + 10_000), of(OTHER_STREAM, n + 20_000), undefined][i % 4];
}

test("5,000 interleaved messages: each link's newest marker, and the A markers after a dest seq", async () => {
  const markers = range(4_998, interleaved); // ends on A 1,250, then region b's 1,250
  const { stream, seqs } = await streamWith(markers);
  const lastA = markers.reduce((last, m, i) => (m?.region === "a" && m.stream === "ORDERS" ? i : last), -1);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: 1_250,
    destSeq: seqs[lastA],
    scanned: 256,
    complete: true,
  });
  assert.equal((await lastStoredSourceSeq(nc, { stream, source: OTHER_REGION })).sourceSeq, 11_250);
  assert.equal((await lastStoredSourceSeq(nc, { stream, source: OTHER_STREAM })).sourceSeq, 20_000 + 1_249);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: { region: "c", stream: "ORDERS" } }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 4_998,
    complete: true,
  });

  const expected = new Map<number, number>();
  markers.forEach((m, i) => {
    if (m?.region === "a" && m.stream === "ORDERS" && seqs[i]! >= 2_500) expected.set(m.seq, seqs[i]!);
  });
  assert.deepEqual(await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 2_500 }), expected);
  // Wanted: 100 is before dest seq 2,500, 99,999 was never stored.
  const wanted = new Set([100, 700, 1_250, 99_999]);
  assert.deepEqual(
    await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 2_500, wanted }),
    new Map([
      [700, 2_797],
      [1_250, 4_997],
    ]),
  );
  assert.deepEqual(
    await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 1, wanted: new Set([1, 2]) }),
    new Map([
      [1, 1],
      [2, 5],
    ]),
  );
  assert.equal((await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 5_000 })).size, 0);
});

test("the newest marker 3,000 messages deep: found across chunks, or complete:false within maxScan", async () => {
  const markers = [
    ...range(1_000, (i) => of(A, i + 1)),
    ...range(3_000, (i) => (i % 2 ? of(OTHER_REGION, i + 1) : undefined)),
  ];
  const { stream } = await streamWith(markers);
  const found = await lastStoredSourceSeq(nc, { stream, source: A });
  const jsm = await jetstreamManager(nc);
  assert.equal((await jsm.streams.info(stream)).state.consumer_count, 0, "every chunk's consumer deleted");
  assert.deepEqual(found, {
    sourceSeq: 1_000,
    destSeq: 1_000,
    scanned: 256 + 512 + 1_024 + 2_048,
    complete: true,
  });
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A, maxScan: 2_000 }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 2_000,
    complete: false,
  });
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A, maxScan: 3_001 }), {
    sourceSeq: 1_000,
    destSeq: 1_000,
    scanned: 3_001,
    complete: true,
  });
});

test("incarnation: markers older than the source stream's creation are ignored", async () => {
  const createdMs = T0 + 60_000;
  const old = range(100, (i) => of(A, i + 1, T0 + i)); // the deleted stream's 1..100
  const current = range(30, (i) => of(A, i + 1, createdMs + i)); // the new stream's 1..30
  const { stream } = await streamWith([...old, ...current, of(A, 200, createdMs - 0.001)]);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: { ...A, createdMs } }), {
    sourceSeq: 30,
    destSeq: 130,
    scanned: 131,
    complete: true,
  });
  assert.equal(
    (await lastStoredSourceSeq(nc, { stream, source: A })).sourceSeq,
    200,
    "without createdMs every incarnation counts",
  );
  const onlyOld = await streamWith(old);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream: onlyOld.stream, source: { ...A, createdMs } }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 100,
    complete: true,
  });
  const all = await findStoredSourceSeqs(nc, { stream, source: { ...A, createdMs }, fromDestSeq: 95 });
  assert.deepEqual([...all.entries()].slice(0, 2), [
    [1, 101],
    [2, 102],
  ]);
  assert.equal(all.size, 30);

  // Relay-Source without Relay-Source-Time: the incarnation cannot be told, so it is not trusted.
  const noTime = uniqueName("DEST");
  await createStream(nc, { name: noTime, subjects: [`${noTime}.>`] });
  const h = headers();
  h.set("Relay-Source", "a ORDERS 500");
  await jetstream(nc).publish(`${noTime}.x`, "x", { headers: h });
  assert.equal(
    (await lastStoredSourceSeq(nc, { stream: noTime, source: { ...A, createdMs } })).sourceSeq,
    undefined,
  );
  assert.equal((await lastStoredSourceSeq(nc, { stream: noTime, source: A })).sourceSeq, 500);
});

test("purged head: first_seq > 1, with and without a surviving marker", async () => {
  const jsm = await jetstreamManager(nc);
  const { stream } = await streamWith([...range(1_000, (i) => of(A, i + 1)), ...range(300, () => undefined)]);
  await jsm.streams.purge(stream, { seq: 600 }); // keeps 600..1,300
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: 1_000,
    destSeq: 1_000,
    scanned: 701,
    complete: true,
  });
  const fromStart = await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 1 });
  assert.deepEqual([fromStart.size, fromStart.get(600), fromStart.has(599)], [401, 600, false]);

  await jsm.streams.purge(stream, { seq: 1_001 }); // every marker gone
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 300,
    complete: true,
  });
  await jsm.streams.purge(stream); // empty, first_seq = last_seq + 1
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: undefined,
    destSeq: undefined,
    scanned: 0,
    complete: true,
  });
});

test("interior and tail deletes, including a whole chunk at the top", async () => {
  const jsm = await jetstreamManager(nc);
  const { stream } = await streamWith([...range(700, (i) => of(A, i + 1)), ...range(400, () => undefined)]);
  // 2.9 keeps last_seq on a deleted last message: reading must not wait for it.
  for (let seq = 1_100; seq > 700; seq--) await jsm.streams.deleteMessage(stream, seq, false);
  for (const seq of [700, 699, 500, 100]) await jsm.streams.deleteMessage(stream, seq, false);
  assert.equal((await jsm.streams.info(stream)).state.last_seq, 1_100);
  const started = Date.now();
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: A }), {
    sourceSeq: 698,
    destSeq: 698,
    scanned: 698 - 333 + 1 - 1, // chunk 845..1,100 is empty; chunk 333..844 holds 333..698 but 500
    complete: true,
  });
  assert.ok(
    Date.now() - started < 5_000,
    "a deleted range ends on the server's word, not on the 10 s timeout",
  );
  const found = await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 90 });
  assert.deepEqual(
    [found.size, found.has(100), found.has(500), found.get(698)],
    [698 - 90 + 1 - 2, false, false, 698],
  );
  assert.deepEqual(
    await findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 1, wanted: new Set([100, 500, 698]) }),
    new Map([[698, 698]]),
  );
});

test("a missing stream, an aborted signal and a JetStream domain", async (t) => {
  await assert.rejects(lastStoredSourceSeq(nc, { stream: uniqueName("NOPE"), source: A }), (err) =>
    isRelayError(err, "STREAM_NOT_FOUND"),
  );
  const { stream } = await streamWith(range(10, (i) => of(A, i + 1)));
  await assert.rejects(lastStoredSourceSeq(nc, { stream, source: A, signal: AbortSignal.abort() }), {
    name: "AbortError",
  });
  await assert.rejects(
    findStoredSourceSeqs(nc, { stream, source: A, fromDestSeq: 1, signal: AbortSignal.abort() }),
    { name: "AbortError" },
  );

  const hub = await servers.startNats({ domain: "hub" });
  const hubNc = await connectTo(t, hub.url);
  const name = uniqueName("DEST");
  await createStream(hubNc, { name, subjects: [`${name}.>`] });
  const h = headers();
  h.set("Relay-Source", "a ORDERS 42");
  await jetstream(hubNc).publish(`${name}.x`, "x", { headers: h });
  // Asked through the domain's API prefix from a connection to the same server.
  assert.deepEqual(await lastStoredSourceSeq(hubNc, { stream: name, domain: "hub", source: A }), {
    sourceSeq: 42,
    destSeq: 1,
    scanned: 1,
    complete: true,
  });
  await assert.rejects(lastStoredSourceSeq(hubNc, { stream: name, domain: "elsewhere", source: A }), (err) =>
    isRelayError(err, "JETSTREAM_API"),
  );
});

test("a server that stops answering: the signal ends the call", async (t) => {
  const node = await servers.startNats();
  const paused = await connectTo(t, node.url);
  const stream = uniqueName("DEST");
  await createStream(paused, { name: stream, subjects: [`${stream}.>`] });
  await node.pause();
  t.after(() => node.resume());
  const started = Date.now();
  await assert.rejects(lastStoredSourceSeq(paused, { stream, source: A, signal: AbortSignal.timeout(300) }), {
    name: "TimeoutError",
  });
  assert.ok(Date.now() - started < 3_000, `rejected after ${Date.now() - started} ms`);
});

test("Relay-Link: a marker naming another link is never this link's; unnamed ones (older relays) count by source, and lose to named ones within a chunk", async () => {
  const mine: SourceRef = { ...A, link: "x-link" };
  const named = (seq: number, link: string): Marker => ({ ...A, seq, link });
  // Older relays first (no Relay-Link: x's 1..10 and y's 11..20), then both links named: x up to 25, y up to 40.
  const markers: Marker[] = [
    ...range(10, (i) => of(A, i + 1)),
    ...range(10, (i) => of(A, i + 11)),
    ...range(5, (i) => named(i + 21, "x-link")),
    ...range(15, (i) => named(i + 26, "y-link")),
  ];
  const { stream, seqs } = await streamWith(markers);
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream, source: mine }), { sourceSeq: 25, destSeq: seqs[24], scanned: 40, complete: true });
  assert.equal((await lastStoredSourceSeq(nc, { stream, source: { ...A, link: "y-link" } })).sourceSeq, 40);
  // No link asked for: every marker of the source counts, as before the header.
  assert.equal((await lastStoredSourceSeq(nc, { stream, source: A })).sourceSeq, 40);
  // Only unnamed markers: the newest by source, as before the header (it may be the other link's: README).
  const legacy = await streamWith(range(20, (i) => of(A, i + 1)));
  assert.equal((await lastStoredSourceSeq(nc, { stream: legacy.stream, source: mine })).sourceSeq, 20);
  // A named marker of another link only: none of this link's.
  const others = await streamWith(range(3, (i) => named(i + 1, "y-link")));
  assert.deepEqual(await lastStoredSourceSeq(nc, { stream: others.stream, source: mine }), { sourceSeq: undefined, destSeq: undefined, scanned: 3, complete: true });

  const found = await findStoredSourceSeqs(nc, { stream, source: mine, fromDestSeq: 1 });
  assert.deepEqual([...found.keys()], range(25, (i) => of(A, i + 1)).map((m) => m!.seq));
  assert.equal((await findStoredSourceSeqs(nc, { stream, source: mine, fromDestSeq: 1, wanted: new Set([30]) })).size, 0);
});
