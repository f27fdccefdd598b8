import { DeliverPolicy, jetstream } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { LinkConfig } from "../config/types.js";
import type { Delivery } from "../nats/delivery.js";
import { toDelivery } from "../nats/delivery.js";
import { durableConfig } from "../nats/durable-consumer.js";

export type ResyncReason = "gap" | "max_replay_age";

export interface ResyncDeps {
  readonly link: LinkConfig;
  readonly source: NatsConnection;
  readonly jsm: JetStreamManager;
  readonly domain?: string;
  /** Feeds one snapshot message into the pipeline. */
  readonly push: (msg: Delivery, snapshotId: string) => void;
  /** Resolves when the pipeline has relayed (or suppressed) everything pushed so far. */
  readonly drained: () => Promise<void>;
  readonly signal: AbortSignal;
  /** Told after every snapshot message: how many were sent and how many are left. */
  readonly progress?: (resyncId: string, sent: number, remaining: number) => void;
}

export interface ResyncResult {
  readonly id: string;
  readonly messages: number;
  /** The source's last sequence when the snapshot started: live relaying continues after it. */
  readonly snapshotSeq: number;
}

/**
 * Full resync (DESIGN §4): instead of replaying every delta, send the latest message per subject of
 * the link's filter (a DeliverLastPerSubject pass), marked `Relay-Snapshot: <id>`, through the normal
 * pipeline — so the version guard drops anything older than the destination holds — then move the
 * link's durable cursor to just after the snapshot point and continue live from there.
 * The caller has stopped the durable consumer and drained the pipeline before calling.
 */
export async function runResync(deps: ResyncDeps, reason: ResyncReason): Promise<ResyncResult> {
  const { link, jsm } = deps;
  const id = `${link.name}-${reason}-${Date.now()}`;
  const stream = link.from.stream;
  const snapshotSeq = (await jsm.streams.info(stream)).state.last_seq;
  let messages = 0;
  const js = jetstream(deps.source, deps.domain ? { domain: deps.domain } : {});
  const consumer = await js.consumers.get(stream, {
    filter_subjects: link.from.filterSubject ?? ">",
    deliver_policy: DeliverPolicy.LastPerSubject,
  });
  const info = await consumer.info(true);
  let remaining = info.num_pending;
  if (remaining > 0) {
    const iter = await consumer.consume({ max_messages: link.batchSize });
    const stop = (): void => iter.stop();
    deps.signal.addEventListener("abort", stop, { once: true });
    try {
      for await (const m of iter) {
        if (deps.signal.aborted) break;
        const d = toDelivery(m);
        if (d.streamSequence > snapshotSeq) break; // newer than the snapshot point: live traffic
        deps.push(d, id);
        messages++;
        remaining = d.pending;
        deps.progress?.(id, messages, remaining);
        if (remaining === 0) break;
      }
    } finally {
      deps.signal.removeEventListener("abort", stop);
      await iter.close();
    }
  }
  await deps.drained();
  // Cut short (the lease lost, or the link stopping): the durable stays where it was.
  if (deps.signal.aborted) throw new Error(`resync ${id} abandoned before moving the cursor`);
  // The durable's cursor moves past the snapshot: the old deltas are not replayed.
  await jsm.consumers.delete(stream, link.durableName).catch(() => false);
  await jsm.consumers.add(stream, {
    ...durableConfig(link),
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: snapshotSeq + 1,
  });
  return { id, messages, snapshotSeq };
}
