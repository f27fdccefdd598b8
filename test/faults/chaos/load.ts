import { setTimeout as delay } from "node:timers/promises";
import { jetstream } from "@nats-io/jetstream";
import { headers as createHeaders } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";

/**
 * The soak's publisher: one message at a time, at `ratePerSec`, each retried (same `Nats-Msg-Id`, so
 * the source stream's dedup absorbs a retry whose first attempt was stored) until the source acks it.
 * One at a time is what makes the soak's versions a promise the source keeps: message i is stored
 * before i + 1 is sent, so every entity's versions rise in source order, through node kills and
 * leader elections, and a version the guard calls stale can only come from the relay's own reorder.
 *
 * Message i: id `c-<i>`, subject `<prefix>.<i % 5>`, entity `e<i % entities>`, version i.
 */
export interface ChaosLoad {
  readonly done: Promise<void>;
  readonly published: number;
  /** Publishes that failed and were retried (node kills, elections). */
  readonly retries: number;
  stop(): void;
}

export function startChaosLoad(nc: NatsConnection, prefix: string, opts: { total: number; ratePerSec: number; entities: number }): ChaosLoad {
  const js = jetstream(nc);
  const stopper = new AbortController();
  let published = 0;
  let retries = 0;
  const run = async (): Promise<void> => {
    const started = Date.now();
    for (let i = 0; i < opts.total && !stopper.signal.aborted; i++) {
      // Paced against the start: a stall (an election) is caught up afterwards, still one at a time.
      const due = started + (i * 1_000) / opts.ratePerSec;
      if (due > Date.now()) await delay(due - Date.now());
      const h = createHeaders();
      h.set("Nats-Msg-Id", `c-${i}`);
      h.set("Test-Entity", `e${i % opts.entities}`);
      h.set("Test-Version", String(i));
      for (;;) {
        try {
          await js.publish(`${prefix}.${i % 5}`, new TextEncoder().encode(`payload-${i}`), { headers: h, timeout: 2_000 });
          break;
        } catch (err) {
          if (stopper.signal.aborted) throw err;
          retries++;
          await delay(100);
        }
      }
      published = i + 1;
    }
  };
  const done = run();
  done.catch(() => undefined); // awaited by the test; this keeps an early failure from being unhandled meanwhile
  return {
    done,
    get published() {
      return published;
    },
    get retries() {
      return retries;
    },
    stop: () => stopper.abort(),
  };
}
