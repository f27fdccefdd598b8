import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { check } from "../helpers/check.js";
import type { HasAfter } from "../helpers/servers.js";
import { streamCount } from "../helpers/streams.js";
import type { RelayProcess } from "../helpers/relays.js";
import { publishIds } from "../helpers/scenario.js";
import type { TwoRegions } from "../helpers/scenario.js";
import { watchLiveness } from "../helpers/liveness.js";
import type { LivenessReport, LivenessWatch } from "../helpers/liveness.js";
import type { FaultReport } from "./checker.js";

/** What the fault tests with relay processes share: load, settling, liveness, clean termination. */

/** SIGTERM, and the exit code once it has drained. */
export async function terminate(relay: RelayProcess): Promise<number | null> {
  relay.signal("SIGTERM");
  return relay.exited;
}

/**
 * Publishes `total` ids (`m-<i>`, five subjects) in the background: first `burst` of them unpaced (a
 * backlog to catch up on), the rest `ratePerSec` a second (unpaced when 0): load that goes on while
 * the fault is injected. `from` numbers the first id (a load that continues an earlier one).
 */
export function startLoad(
  nc: NatsConnection,
  subjectPrefix: string,
  total: number,
  opts: { ratePerSec: number; burst?: number; from?: number },
) {
  const from = opts.from ?? 0;
  const tick = 100;
  const paced = opts.ratePerSec > 0;
  const chunk = paced ? Math.max(1, Math.round((opts.ratePerSec * tick) / 1_000)) : total;
  let published = 0;
  const run = async (): Promise<void> => {
    const burst = Math.min(total, opts.burst ?? 0);
    if (burst > 0) await publishIds(nc, subjectPrefix, "m", burst, from);
    published = burst;
    while (published < total) {
      const started = Date.now();
      const n = Math.min(chunk, total - published);
      await publishIds(nc, subjectPrefix, "m", n, from + published);
      published += n;
      const rest = tick - (Date.now() - started);
      if (paced && rest > 0) await delay(rest);
    }
  };
  const done = run();
  // Awaited by the test; this only keeps an early failure from being an unhandled rejection meanwhile.
  done.catch(() => undefined);
  return {
    done,
    get published() {
      return published;
    },
    get finished() {
      return published >= total;
    },
  };
}

/**
 * Waits until the relay has consumed and acked all of the source: every consumer on it has delivered
 * the last sequence, with nothing pending or unacked. Returns the timeout error instead of throwing it,
 * so the test still reports what the destination holds (the numbers say more than "timed out").
 */
export async function settled(nc: NatsConnection, stream: string, what: string, timeoutMs: number): Promise<Error | undefined> {
  // No account-info check up front: a cluster that has just had a node back ("JetStream system
  // temporarily unavailable" for a moment) would fail the test before the first poll; the polls retry.
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  return check(
    async () => {
      const last = (await jsm.streams.info(stream)).state.last_seq;
      const consumers = await jsm.consumers.list(stream).next();
      return (
        consumers.length > 0 &&
        consumers.every(
          (c) => c.delivered.stream_seq >= last && c.num_pending === 0 && c.num_ack_pending === 0,
        )
      );
    },
    { name: `every message of ${stream} delivered and acked ${what}`, timeoutMs, intervalMs: 200 },
  ).then(
    () => undefined,
    async (err: unknown) => {
      const consumers = await jsm.consumers.list(stream).next();
      const where = consumers.map((c) => ({
        name: c.name,
        delivered: c.delivered.stream_seq,
        ackFloor: c.ack_floor.stream_seq,
        pending: c.num_pending,
        ackPending: c.num_ack_pending,
        redelivered: c.num_redelivered,
      }));
      return new Error(`${String(err)}; consumers: ${JSON.stringify(where)}`, { cause: err });
    },
  );
}

/** A fault test that did not finish: its error, with what the destination held by then. */
export function withReport(err: Error, report: FaultReport): Error {
  return new Error(`${report.fault}: ${err.message}\n${JSON.stringify(report, null, 2)}`, { cause: err });
}

export async function waitReady(url: string, what: string): Promise<void> {
  let last = "";
  await check(
    async () => {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
      last = await res.text();
      return res.ok;
    },
    { name: `${what} /readyz 200`, timeoutMs: 30_000 },
  ).catch((err: unknown) => {
    throw new Error(`${String(err)}; last /readyz: ${last.replace(/\s+/g, " ").slice(0, 1_000)}`, {
      cause: err,
    });
  });
}

/** Waits until the relay at `url` owns its (first) link, by its /status. */
export async function waitOwner(url: string, what: string): Promise<void> {
  await check(
    async () => {
      const res = await fetch(`${url}/status`, { signal: AbortSignal.timeout(1_000) });
      const status = (await res.json()) as { links?: { ownership?: { self?: boolean } }[] };
      return status.links?.[0]?.ownership?.self === true;
    },
    { name: `${what} owns the link`, timeoutMs: 30_000 },
  );
}

/** Fault injected while thousands of messages are still to go, or the test proves nothing. */
export async function assertMidTransfer(r: TwoRegions, total: number, load?: { finished: boolean }): Promise<void> {
  const n = await streamCount(r.ncb, r.dst);
  assert.ok(
    n < total - 1_000 || (load !== undefined && !load.finished),
    `fault injected mid-transfer (${n} of ${total} relayed, load finished: ${load?.finished})`,
  );
}

export function mergeLiveness(reports: readonly LivenessReport[]): LivenessReport | undefined {
  if (reports.length === 0) return undefined;
  const failed = reports.find((r) => r.firstFailure !== undefined);
  return {
    probes: reports.reduce((n, r) => n + r.probes, 0),
    failures: reports.reduce((n, r) => n + r.failures, 0),
    worstMs: Math.max(...reports.map((r) => r.worstMs)),
    ...(failed?.firstFailure === undefined ? {} : { firstFailure: failed.firstFailure }),
  };
}

export function watch(t: HasAfter, url: string): LivenessWatch {
  const w = watchLiveness(url);
  t.after(() => w.stop());
  return w;
}


/** One sample of a relay process's metric from its /metrics (0 when the series is absent). */
export async function scrapeMetric(url: string, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const labelText = line.slice(name.length + 1, line.indexOf("}"));
    if (want.every((w) => labelText.split(",").includes(w))) return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return 0;
}
