import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import { classifyJsError, isApiCode } from "../nats/durable-consumer.js";

/** JetStream's "replicas > 1 not supported in non-clustered mode": a single server, so R1 is all there is. */
const REPLICAS_NOT_SUPPORTED = 10074;

export interface GroupBucketOptions {
  /** Connection to the region's own cluster. Not closed here. */
  readonly nc: NatsConnection;
  readonly domain?: string | undefined;
  readonly bucket: string;
  /** Timeout of one KV request (ms). */
  readonly timeoutMs: number;
  /** Replicas when it has to be created; default 3, or 1 on a server that is not clustered. */
  readonly replicas?: number | undefined;
}

/**
 * Opens the group's KV bucket (leases and members), creating it when missing: history 1, no TTL, reads
 * from the stream leader (no direct get: a lagging replica would only cost futile CAS attempts and
 * stale member views). An existing bucket is used as it is.
 */
export async function openGroupBucket(opts: GroupBucketOptions): Promise<KV> {
  const js = jetstream(opts.nc, { timeout: opts.timeoutMs, ...(opts.domain ? { domain: opts.domain } : {}) });
  const kvm = new Kvm(js);
  const create = (replicas: number) => kvm.create(opts.bucket, { history: 1, replicas, allow_direct: false });
  try {
    try {
      return await create(opts.replicas ?? 3);
    } catch (err) {
      if (opts.replicas !== undefined || !isApiCode(err, REPLICAS_NOT_SUPPORTED)) throw err;
      return await create(1);
    }
  } catch (err) {
    throw classifyJsError(err, `group bucket ${opts.bucket}`);
  }
}
