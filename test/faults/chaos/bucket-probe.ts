import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";

/**
 * The group bucket's write outages, as a writer outside the relays sees them: a put of a probe key
 * every 200 ms (1 s timeout). A destination node killed while it leads the bucket's stream leaves the
 * bucket without a leader for its election (seconds after a kill -9 on 2.9: the followers wait their
 * election timeout), and a relay whose lease is shorter than that outage loses its lease by design
 * (docs/operations.md: `group.lease` longer than an election). The soak counts the outages at least
 * `minMs` long, to allow each relay one lost lease per such outage and none otherwise.
 */
export function startBucketProbe(nc: NatsConnection, bucket: string, minMs: number) {
  const outages: number[] = [];
  let stopped = false;
  const run = async (): Promise<void> => {
    const kv = await new Kvm(nc).open(bucket);
    let failingSince: number | undefined;
    while (!stopped) {
      const at = Date.now();
      try {
        await Promise.race([
          kv.put("_probe.chaos-soak", String(at)),
          new Promise((_, reject) =>
            setTimeout(() => reject(new Error("probe put timed out")), 1_000).unref(),
          ),
        ]);
        if (failingSince !== undefined && at - failingSince >= minMs) outages.push(at - failingSince);
        failingSince = undefined;
      } catch {
        failingSince ??= at;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  const done = run().catch(() => undefined);
  return {
    /** Outages of at least `minMs` (ms each), once each ended. */
    get long(): readonly number[] {
      return outages;
    },
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}
