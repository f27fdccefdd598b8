import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { withServers } from "../helpers/servers.js";
import { connectTo } from "../helpers/streams.js";
import { LogSink } from "../helpers/relays.js";
import { createLogger } from "../../src/observability/logger.js";
import { WriteGate } from "../../src/nats/write-gate.js";

/**
 * Review #21 item 3: ownership is checked when a publish is issued, but nats.js writes the bytes in a
 * microtask. What a process paused in between would send after waking is modelled exactly here: the
 * writer's ownership ends after the publish is issued and before the client writes it.
 */
test("write gate: bytes issued while owning and written after the lease lapsed never leave; the connection reconnects and carries the next owner's bytes", async (t) => {
  const servers = withServers(t);
  const nats = await servers.startNats();
  const writerNc = await connectTo(t, nats.url);
  const readerNc = await connectTo(t, nats.url);
  const seen: string[] = [];
  readerNc.subscribe("gate.>", { callback: (_e, m) => void seen.push(m.string()) });
  await readerNc.flush();
  const logs = new LogSink();
  const discarded: string[][] = [];
  const gate = new WriteGate(writerNc, { name: "test", logger: createLogger({ level: "info", destination: logs, secrets: [] }), discarded: (w) => discarded.push([...w]) });
  assert.equal(gate.active, true, "the gate is installed on this nats.js");

  let owned = true;
  const writer = { name: "link-a", owns: () => owned };
  // Owned when written: it leaves.
  gate.wrote(writer);
  writerNc.publish("gate.a", "while-owned");
  await writerNc.flush();
  await check(() => seen.includes("while-owned"), { name: "the owned publish arrives", timeoutMs: 5_000 });

  // Issued while owned, the lease lapses before the microtask writes it (a pause between the two).
  gate.wrote(writer);
  writerNc.publish("gate.a", "issued-then-lapsed");
  owned = false;
  await check(() => discarded.length === 1, { name: "the gate discarded the lapsed bytes", timeoutMs: 5_000 });
  assert.deepEqual(discarded[0], ["link-a"]);
  assert.ok(logs.lines.some((l) => /lease lapsed before its bytes were written/.test(l)), "logged");

  // The connection comes back and carries bytes again (another writer, or this one owning again).
  const reconnected = await check(
    async () => {
      await writerNc.flush();
      return true;
    },
    { name: "the writer's connection answers again after the discard", timeoutMs: 10_000, intervalMs: 200 },
  ).catch(() => false);
  assert.equal(reconnected, true);
  owned = true;
  gate.wrote(writer);
  writerNc.publish("gate.a", "owned-again");
  await writerNc.flush();
  await check(() => seen.includes("owned-again"), { name: "the next owned publish arrives", timeoutMs: 5_000 });
  // Bytes with no writer registered (requests, PINGs) and writers still owning are never held.
  writerNc.publish("gate.b", "unregistered");
  await writerNc.flush();
  await check(() => seen.includes("unregistered"), { name: "unregistered bytes arrive", timeoutMs: 5_000 });
  assert.ok(!seen.includes("issued-then-lapsed"), `the lapsed publish never reached the server (seen: ${seen.join(", ")})`);
});
