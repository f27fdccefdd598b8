import { setTimeout as delay } from "node:timers/promises";
import { jetstream } from "@nats-io/jetstream";
import { headers as createHeaders } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { random } from "../chaos/schedule.js";

/**
 * The KV soak's writers: one per region, writing a shared set of keys at a steady rate. Each write is
 * what the KV client sends (a publish to `$KV.<bucket>.<key>`; a delete with `KV-Operation: DEL`, a
 * purge with `KV-Operation: PURGE` and `Nats-Rollup: sub`), plus a `Test-Write` header naming the
 * write (`<region>-<n>`), so every copy of it can be found in every bucket. No `KV-Version`: a write's
 * version is its store time in its region (docs/kv.md), which the soak reads back from the bucket.
 *
 * Paced in ticks of 50 ms, each tick's writes sent at once and awaited; a tick that is late (its
 * region's server stopped: the publishes time out) is not caught up, so a paused region writes little.
 * A publish that timed out is `uncertain`: it may have been stored (the server reads it once it runs
 * again); the bucket watchers decide.
 */

export type KvOp = "PUT" | "DEL" | "PURGE";

export interface LoggedWrite {
  /** `<region>-<n>`: the `Test-Write` header of every copy. */
  readonly id: string;
  readonly region: string;
  readonly key: string;
  readonly op: KvOp;
  /** The payload (empty for deletes and purges). */
  readonly value: string;
  /** When it was sent (ms, this machine's clock: the servers' too). */
  readonly sentMs: number;
  /** Its sequence in its region's bucket stream, from the PubAck; undefined when the publish failed. */
  seq?: number;
  /** `acked`: stored at `seq`; `uncertain`: the publish failed or timed out (stored or not). */
  outcome: "pending" | "acked" | "uncertain";
}

export const WRITE_HEADER = "Test-Write";
const TICK_MS = 50;

export interface KvWriters {
  readonly log: readonly LoggedWrite[];
  /** Resolves once every writer has stopped and its last tick is answered. */
  stop(): Promise<void>;
  readonly done: Promise<void>;
}

/**
 * Starts one writer per region: `ratePerSec` writes a second in all (split evenly), each on a key
 * drawn from `keys` (the same set everywhere: the keys overlap), 12 % deletes, `purges` (a share) purges, the rest puts,
 * for `lengthMs` or until `stop()`. `seed` makes the choice of keys and operations repeatable.
 */
export function startKvWriters(
  regions: readonly { name: string; nc: NatsConnection }[],
  bucket: string,
  opts: { ratePerSec: number; keys: readonly string[]; lengthMs: number; seed: number; purges: number },
): KvWriters {
  const log: LoggedWrite[] = [];
  const stopper = new AbortController();
  const perTick = (opts.ratePerSec * TICK_MS) / 1_000 / regions.length;
  const run = async (region: { name: string; nc: NatsConnection }, ri: number): Promise<void> => {
    const js = jetstream(region.nc);
    const next = random(opts.seed * 31 + ri);
    const started = Date.now();
    let n = 0;
    let owed = 0;
    for (let tick = 0; !stopper.signal.aborted; tick++) {
      const due = started + tick * TICK_MS;
      if (due >= started + opts.lengthMs) break;
      if (due < Date.now() - TICK_MS) continue; // late (the region was stopped): not caught up
      if (due > Date.now()) await delay(due - Date.now());
      owed += perTick;
      const count = Math.floor(owed);
      owed -= count;
      const writes: Promise<void>[] = [];
      for (let i = 0; i < count; i++) {
        const pick = next();
        const op: KvOp = pick < opts.purges ? "PURGE" : pick < opts.purges + 0.12 ? "DEL" : "PUT";
        const key = opts.keys[Math.floor(next() * opts.keys.length)] as string;
        const id = `${region.name}-${n++}`;
        const w: LoggedWrite = { id, region: region.name, key, op, value: op === "PUT" ? `value of ${id}` : "", sentMs: Date.now(), outcome: "pending" };
        log.push(w);
        const h = createHeaders();
        h.set(WRITE_HEADER, id);
        if (op !== "PUT") h.set("KV-Operation", op);
        if (op === "PURGE") h.set("Nats-Rollup", "sub");
        writes.push(
          js.publish(`$KV.${bucket}.${key}`, new TextEncoder().encode(w.value), { headers: h, timeout: 2_000 }).then(
            (ack) => {
              w.seq = ack.seq;
              w.outcome = "acked";
            },
            () => {
              w.outcome = "uncertain";
            },
          ),
        );
      }
      await Promise.all(writes);
    }
  };
  const done = Promise.all(regions.map((r, i) => run(r, i))).then(() => undefined);
  done.catch(() => undefined); // awaited by the test
  return {
    log,
    done,
    stop: async () => {
      stopper.abort();
      await done;
    },
  };
}
