import { JetStreamApiCodes, jetstream } from "@nats-io/jetstream";
import { Bucket, Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { ErrorCodes, RelayError } from "../errors.js";
import { classifyJsError, isApiCode } from "../nats/durable-consumer.js";
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

/**
 * The bucket's incarnation: its stream's creation time (ms since the epoch). A bucket deleted and
 * created again (`nats kv rm`, an R1 bucket lost, a rebuilt region) restarts its revisions at 1, so
 * a lease revision only compares with lease revisions of the same incarnation.
 */
export async function bucketIncarnation(kv: KV): Promise<number> {
  const bucket = asBucket(kv, "bucketIncarnation");
  const info = await bucket.jsm.streams.info(bucket.stream);
  return createdMs(bucket, info.created);
}

function createdMs(bucket: Bucket, created: string): number {
  const ms = Date.parse(created);
  if (Number.isNaN(ms)) throw new RelayError(ErrorCodes.JETSTREAM_API, `group bucket ${bucket.bucket}: the server gave no creation time (${created})`);
  return ms;
}

/**
 * An explicit "stream not found" (10059): the bucket is gone (deleted, or an R1 bucket lost), and only
 * this. A request that meets an election of the bucket's stream answers "no responders" (which the
 * client reports as JetStream not enabled) or times out: transient (DESIGN §11), never proof. A write to
 * a deleted bucket answers "no responders" too (nats-server 2.9.10: nothing listens on its subjects), so
 * a caller whose write failed asks `bucketGoneAfter` instead. The caller opens the bucket again
 * (creating it when it is missing).
 */
export function isBucketGone(err: unknown): boolean {
  return isApiCode(err, JetStreamApiCodes.StreamNotFound) || (err instanceof RelayError && isApiCode(err.cause, JetStreamApiCodes.StreamNotFound));
}

/** "No responders" to a request (the client names it JetStream not enabled): an election, a deleted stream, or JetStream down. */
export function isNoResponders(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === "JetStreamNotEnabled") return true;
  const cause = (err as { cause?: unknown }).cause;
  return /no responders/i.test(err.message) || (cause instanceof Error && /no responders/i.test(cause.message));
}

/**
 * Whether `err`, the failure of a request to `kv`, proves the bucket gone: an explicit "stream not
 * found", or "no responders" confirmed by a stream info that answers "stream not found" (the stream
 * info of a deleted stream is answered by the meta leader; during an election of the stream's leader
 * it is answered, or times out). Anything else (a timeout, an election) is transient. Never rejects.
 */
export async function bucketGoneAfter(kv: KV | undefined, err: unknown): Promise<boolean> {
  if (isBucketGone(err)) return true;
  if (!kv || !isNoResponders(err)) return false;
  try {
    await bucketIncarnation(kv);
    return false;
  } catch (infoErr) {
    return isBucketGone(infoErr);
  }
}

/**
 * The keys matching `filter` (a key pattern such as `_group.members.>`), from one stream-info request
 * that lists the bucket's subjects: no consumer. (`kv.keys()` runs an ordered push consumer that, when
 * a key changes while it lists, can wait out its 5 s idle heartbeat before it ends.) A deleted key is
 * listed too while its delete marker is stored: callers read each key and skip deletes.
 */
export async function listKeys(kv: KV, filter: string): Promise<string[]> {
  return (await listKeysOfIncarnation(kv, filter)).keys;
}

/** `listKeys`, with the bucket's incarnation (`bucketIncarnation`) from the same stream-info reply. */
export async function listKeysOfIncarnation(kv: KV, filter: string): Promise<{ keys: string[]; incarnation: number }> {
  const bucket = asBucket(kv, "listKeys");
  const info = await bucket.jsm.streams.info(bucket.stream, { subjects_filter: bucket.fullKeyName(filter) });
  const keys = Object.keys(info.state.subjects ?? {}).map((subject) => bucket.decodeKey(subject.substring(bucket.prefixLen)));
  return { keys, incarnation: createdMs(bucket, info.created) };
}

/**
 * Removes every stored message of `key`, its delete marker included (a stream purge of its subject):
 * the key is no longer listed. Watchers see nothing of it, so only for keys whose delete was seen long ago.
 */
export async function forgetKey(kv: KV, key: string): Promise<void> {
  const bucket = asBucket(kv, "forgetKey");
  await bucket.jsm.streams.purge(bucket.stream, { filter: bucket.fullKeyName(key) });
}

/**
 * Deletes `key` by compare-and-set on `previousSeq`, as `kv.delete(key, { previousSeq })` does, with
 * `note` (JSON) as the delete marker's body: KV clients see an ordinary delete, and a reader of the key
 * learns why it was deleted (an eviction, session-judge.ts). Rejects with the CAS conflict (10071) when
 * the key changed.
 */
export async function deleteKeyWithNote(kv: KV, key: string, previousSeq: number, note: object): Promise<void> {
  const bucket = asBucket(kv, "deleteKeyWithNote");
  const h = headers();
  h.set("KV-Operation", "DEL");
  h.set("Nats-Expected-Last-Subject-Sequence", String(previousSeq));
  await bucket.js.publish(bucket.subjectForKey(bucket.encodeKey(key), true), JSON.stringify(note), { headers: h });
}

/** The bucket's implementation (its stream and subjects), for the stream requests the KV API lacks. */
function asBucket(kv: KV, what: string): Bucket {
  if (!(kv instanceof Bucket)) throw new RelayError(ErrorCodes.INTERNAL, `${what}: not a KV bucket opened by @nats-io/kv`);
  return kv;
}
