import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { classifyJsError } from "../nats/durable-consumer.js";
import { createWithReplicas } from "../nats/replicas.js";

export interface GroupBucketOptions {
  /** Connection to the region's own cluster. Not closed here. */
  readonly nc: NatsConnection;
  readonly domain?: string | undefined;
  readonly bucket: string;
  /** Timeout of one KV request (ms). */
  readonly timeoutMs: number;
  /** Replicas when it has to be created; default min(3, cluster size). */
  readonly replicas?: number | undefined;
}

/**
 * Opens the group's KV bucket (leases and members), creating it when missing (replicas min(3, cluster
 * size) unless given): history 1, no TTL, reads
 * from the stream leader (no direct get: a lagging replica would only cost futile CAS attempts and
 * stale member views). An existing bucket is used as it is.
 */
export async function openGroupBucket(opts: GroupBucketOptions): Promise<KV> {
  const js = jetstream(opts.nc, { timeout: opts.timeoutMs, ...(opts.domain ? { domain: opts.domain } : {}) });
  const kvm = new Kvm(js);
  const create = (replicas: number) => kvm.create(opts.bucket, { history: 1, replicas, allow_direct: false });
  try {
    if (opts.replicas !== undefined) return await create(opts.replicas);
    // min(3, cluster size): 3, else as many as the cluster has.
    return (await createWithReplicas(true, create)).value;
  } catch (err) {
    throw classifyJsError(err, `group bucket ${opts.bucket}`);
  }
}
