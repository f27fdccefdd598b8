import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { startBlackHoleProxy } from "../helpers/blackhole-proxy.js";
import { metricValue, startRelay } from "../helpers/relays.js";
import { DEFAULT_GROUP, linkYaml, publishIds, twoRegions, waitForCount } from "../helpers/scenario.js";
import { streamCount } from "../helpers/streams.js";
import type { Relay } from "../../src/relay/relay.js";
import { watchLiveness } from "../helpers/liveness.js";
import { assertDelivery, checkDelivery, readSource, recordRow } from "./checker.js";

/**
 * The destination connection drops while publishes await their PubAck (1d45c88). Before, those
 * publishes were not rolled back: after the reconnect the relay published newer messages on the new
 * connection at once, and the older ones only when their PubAck timers (`publishTimeout`) ran out, so
 * the destination stored them after the newer ones (`relay_reordered_total`, "the destination stored a
 * message after a later one"). A single-node destination killed -9 hit that about 1 run in 8; here it is
 * forced every run.
 *
 * The relay reaches region b through a proxy that black-holes the path (both ways: the server never
 * gets the window's publishes, as a server killed -9 never stored them) until every message of one
 * window was written into it, then resets the connection: the client reconnects at once, well before
 * its PINGs could call the connection stale. Newer messages are published only after the reconnect,
 * and `publishTimeout` is 10 s, so without the rollback they are stored seconds before the lost window
 * is published again. The checker ends it: every id once, in source order (overall and per subject),
 * and the relay counted no reorder.
 */

const LINK = "a-to-b";
/** Long, so that waiting for the PubAck timers instead of rolling back shows as a reorder every time. */
const PUBLISH_TIMEOUT = "10s";
/** Messages relayed before the fault; published into the black hole; published after the reconnect. */
const BEFORE = 100;
const LOST = 200;
const AFTER = 200;

/** The relay's own connection to region b (publishes), as /status shows it. */
function destConnection(relay: Relay) {
  return relay.status().connections?.find((c) => c.region === "b" && c.role === "local");
}

test(
  "destination connection reset while a window awaits its PubAcks: the window is published again first, before newer messages; every id once, in order, nothing counted as reordered",
  { timeout: 60_000 },
  async (t) => {
    const startedAt = Date.now();
    const r = await twoRegions(t);
    const proxy = await startBlackHoleProxy({ port: r.b.port });
    t.after(() => proxy.close());
    const yaml = linkYaml({
      regions: { a: [r.a.url], b: [`nats://127.0.0.1:${proxy.port}`] },
      links: [{ name: LINK, from: "a", fromStream: r.src, to: "b", toStream: r.dst }],
      // The group bucket is reached through the black hole too: the default lease, as the scenario was written.
      extra: DEFAULT_GROUP,
    }).replace("publishTimeout: 2s", `publishTimeout: ${PUBLISH_TIMEOUT}`);
    assert.match(yaml, new RegExp(`publishTimeout: ${PUBLISH_TIMEOUT}`));
    const { relay, logs, url } = await startRelay(t, yaml, "b", { http: true });
    // /healthz answers from before the fault to the end.
    const live = watchLiveness(url);
    t.after(() => live.stop());

    // One sequence of ids, entities and versions across the three phases (m-0.., entities m-e0..e4,
    // versions rising in source order): a message stored after a newer one is also a version going back.
    await publishIds(r.nca, r.src, "m", BEFORE);
    await waitForCount(r.ncb, r.dst, BEFORE, 30_000, "relayed before the fault");
    await check(() => relay.status().links[0]?.inFlight === 0, {
      name: "every PubAck of the first messages in",
      timeoutMs: 10_000,
    });

    // The path to region b goes silent: every message of the next window is published into it.
    proxy.blackHole({ record: true });
    const lost = await publishIds(r.nca, r.src, "m", LOST, BEFORE);
    await check(
      () => {
        const sent = proxy.swallowed().toString("latin1");
        return lost.every((id) => sent.includes(`Nats-Msg-Id: ${id}\r\n`));
      },
      {
        name: `all ${LOST} messages of the window published into the black hole (no PubAck can come back)`,
        timeoutMs: 5_000,
      },
    );
    assert.equal(await streamCount(r.ncb, r.dst), BEFORE, "the destination got none of them");

    // The path comes back as a reset: the client reconnects through the proxy at once.
    const reconnects = destConnection(relay)?.reconnects ?? 0;
    const cutAt = Date.now();
    proxy.restore();
    await check(
      () => {
        const c = destConnection(relay);
        return c !== undefined && c.state === "connected" && c.reconnects > reconnects;
      },
      { name: "the relay's destination connection reconnected", timeoutMs: 10_000 },
    );
    const reconnectMs = Date.now() - cutAt;

    // Newer messages, after the reconnect and long before the lost window's PubAck timers run out.
    await publishIds(r.nca, r.src, "m", AFTER, BEFORE + LOST);
    // Without the rollback: the lost window is published again only after publishTimeout (10 s).
    await waitForCount(r.ncb, r.dst, BEFORE + LOST + AFTER, 30_000, "every message relayed after the reset");
    // Every PubAck handled (each one counts a reorder it reveals) before the counter is read.
    await check(() => relay.status().links[0]?.inFlight === 0, {
      name: "the relay holds no message",
      timeoutMs: 10_000,
    });

    const reordered = await metricValue(relay, "relay_reordered_total", { link: LINK });
    const report = {
      ...(await checkDelivery({
        fault: "destination connection reset with a window awaiting PubAcks",
        dest: r.ncb,
        stream: r.dst,
        source: await readSource(r.nca, r.src),
      })),
      liveness: await live.stop(),
    };
    t.diagnostic(
      `${report.fault}: reconnected ${reconnectMs} ms after the reset; messages ${report.messages}, lost ${report.lost}, duplicated ${report.duplicated}, ` +
        `reordered ${report.reordered} (per subject ${report.reorderedBySubject}, e.g. ${report.samples.reordered.slice(0, 3).join(" ") || "-"}), ` +
        `relay_reordered_total ${reordered}; ${Date.now() - startedAt} ms`,
    );
    await recordRow(report);
    assertDelivery(report);
    assert.equal(reordered, 0, "relay_reordered_total: the destination stored no message after a later one");
    assert.equal(
      logs.lines.filter((l) => l.includes("the destination stored a message after a later one")).length,
      0,
      "no reorder logged",
    );
  },
);
