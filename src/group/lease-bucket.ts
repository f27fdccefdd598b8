import { Bucket } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import type { Logger } from "pino";
import { ErrorCodes, RelayError } from "../errors.js";
import { bucketIncarnation, isBucketGone, openGroupBucket } from "./bucket.js";
import type { CompiledLeaseOptions, LeaseState } from "./types.js";

/**
 * The group bucket as one lease uses it: opened (created when missing) on first use, forgotten when
 * it is gone so the next step opens it again, and its incarnation (creation time) followed, so that a
 * bucket deleted and created again, whose revisions (lease revisions among them) start over, is
 * noticed.
 *
 * A member that opens the bucket for the first time cannot tell a bucket created for the first time
 * from one re-created a moment ago while an owner of the old bucket still acts (its last renewal
 * reached the old bucket before it was deleted, so its deadline ends within its lease of the new
 * bucket's creation). It reads the bucket's age on the server's clock (`bucketAge`) and, when the bucket
 * is younger than the longest lease it knows (its own group.lease), takes no key until the bucket is that
 * old (`young`).
 */

export interface LeaseBucketEvents {
  /** The lease's state, for the log line of a bucket that is gone. */
  state(): LeaseState;
  /** The opened bucket is gone and was forgotten: the watch starts over. */
  dropped(): void;
  /** The incarnation changed from `known` to `incarnation`: the bucket was deleted and created again. */
  recreated(known: number, incarnation: number): void;
  /** First opened, the bucket was `ageMs` old at the latest (server clock) when the reply arrived. */
  young(ageMs: number): void;
}

/** A key the lease writes to learn the server's time when the bucket has nothing recent to tell it (`bucketAge`). */
export const CLOCK_KEY = "_group.clock";

/**
 * The bucket's incarnation (its stream's creation time) and a lower bound of its age (ms) when the reply
 * arrives, both on the server's clock: now as the reply states it (`ts`, nats-server 2.10+; `exact`),
 * else the time of the last message stored (earlier than the reply), minus the creation time. 0 when
 * neither is known (an empty bucket on a 2.9 server): a lower bound only ever makes a hold-off longer,
 * never shorter. In a cluster the creation time is stamped by the meta leader and the rest by the
 * stream leader: their clocks are taken to agree (NTP).
 */
export async function bucketAge(kv: KV): Promise<{ incarnation: number; ageMs: number; exact: boolean }> {
  if (!(kv instanceof Bucket))
    throw new RelayError(ErrorCodes.INTERNAL, "bucketAge: not a KV bucket opened by @nats-io/kv");
  const info = await kv.jsm.streams.info(kv.stream);
  const incarnation = Date.parse(info.created);
  if (Number.isNaN(incarnation))
    throw new RelayError(
      ErrorCodes.JETSTREAM_API,
      `group bucket ${kv.bucket}: the server gave no creation time (${info.created})`,
    );
  const stamps = [info.ts, info.state.last_seq > 0 ? info.state.last_ts : undefined]
    .map((t) => (t ? Date.parse(t) : NaN))
    .filter((t) => Number.isFinite(t));
  const serverNow = Math.max(incarnation, ...stamps);
  return { incarnation, ageMs: serverNow - incarnation, exact: info.ts !== undefined };
}

export class LeaseBucket {
  private kv: KV | undefined;
  /** The incarnation (creation time) of the bucket as this member last read it. */
  private knownIncarnation: number | undefined;

  constructor(
    private readonly opts: Pick<
      CompiledLeaseOptions,
      "nc" | "domain" | "bucket" | "requestTimeoutMs" | "replicas" | "leaseMs" | "owner"
    >,
    private readonly logger: Logger,
    private readonly on: LeaseBucketEvents,
  ) {}

  /** The bucket as opened, if it is (undefined before the first step and after it was found gone). */
  get opened(): KV | undefined {
    return this.kv;
  }

  async open(): Promise<KV> {
    if (this.kv) return this.kv;
    const kv = await openGroupBucket({
      nc: this.opts.nc,
      domain: this.opts.domain,
      bucket: this.opts.bucket,
      timeoutMs: this.opts.requestTimeoutMs,
      replicas: this.opts.replicas,
    });
    if (this.knownIncarnation === undefined) {
      let read = await this.guarded(bucketAge(kv));
      if (!read.exact && read.ageMs < this.opts.leaseMs) {
        // Young, or nothing written lately to tell: a write of our own stamps the server's time now.
        await this.guarded(kv.put(CLOCK_KEY, this.opts.owner));
        read = await this.guarded(bucketAge(kv));
      }
      const { incarnation, ageMs } = read;
      this.noteIncarnation(incarnation);
      this.on.young(ageMs);
    } else {
      this.noteIncarnation(await this.readIncarnation(kv));
    }
    this.kv = kv;
    return kv;
  }

  /** Forgets the opened bucket (it is gone): the next step opens it again, and the watch starts over. */
  drop(): void {
    if (!this.kv) return;
    this.kv = undefined;
    this.on.dropped();
    this.logger.warn(
      { state: this.on.state() },
      "the group bucket is gone: opening it again (created when missing)",
    );
  }

  async readIncarnation(kv: KV): Promise<number> {
    return this.guarded(bucketIncarnation(kv));
  }

  /** A read of the bucket: one that finds it gone forgets it. */
  private async guarded<T>(read: Promise<T>): Promise<T> {
    try {
      return await read;
    } catch (err) {
      if (isBucketGone(err)) this.drop();
      throw err;
    }
  }

  /**
   * The bucket's incarnation as just read. Another than the one this member knew: the bucket was
   * deleted and created again (`recreated`). Returns whether it changed.
   */
  noteIncarnation(incarnation: number): boolean {
    const known = this.knownIncarnation;
    this.knownIncarnation = incarnation;
    if (known === undefined || known === incarnation) return false;
    this.on.recreated(known, incarnation);
    return true;
  }
}
