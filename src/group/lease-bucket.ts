import type { KV } from "@nats-io/kv";
import type { Logger } from "pino";
import { bucketIncarnation, isBucketGone, openGroupBucket } from "./bucket.js";
import type { CompiledLeaseOptions, LeaseState } from "./types.js";

/**
 * The group bucket as one lease uses it: opened (created when missing) on first use, forgotten when
 * it is gone so the next step opens it again, and its incarnation (creation time) followed, so that a
 * bucket deleted and created again, whose revisions (lease revisions among them) start over, is
 * noticed.
 */

export interface LeaseBucketEvents {
  /** The lease's state, for the log line of a bucket that is gone. */
  state(): LeaseState;
  /** The opened bucket is gone and was forgotten: the watch starts over. */
  dropped(): void;
  /** The incarnation changed from `known` to `incarnation`: the bucket was deleted and created again. */
  recreated(known: number, incarnation: number): void;
}

export class LeaseBucket {
  private kv: KV | undefined;
  /** The incarnation (creation time) of the bucket as this member last read it. */
  private knownIncarnation: number | undefined;

  constructor(
    private readonly opts: Pick<
      CompiledLeaseOptions,
      "nc" | "domain" | "bucket" | "requestTimeoutMs" | "replicas"
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
    this.noteIncarnation(await this.readIncarnation(kv));
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
    try {
      return await bucketIncarnation(kv);
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
