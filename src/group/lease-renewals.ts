import { Bucket } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import { headers } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { ErrorCodes } from "../errors.js";
import type { RelayError } from "../errors.js";
import { JetStreamPublisher } from "../nats/publisher.js";

/** The header a KV update carries: the write lands only while the key's last revision is this one. */
const EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence";
const encoder = new TextEncoder();

/**
 * The relay's lease renewals as plain JetStream publishes under one inbox subscription (the relay's
 * data path, nats/publisher.ts), instead of `kv.update()` per renewal: that is a request with its own
 * timer, promise and reply subscription entry, and the client builds an Error for every request it
 * ends, answered or not. A thousand links renew a thousand times a second; most of that work was this.
 *
 * The write is the one `kv.update()` sends (the key's subject in the bucket, the expected revision as
 * a header) and a stored PubAck is the same answer. Any other answer (a CAS conflict, no responders, a
 * refused write) sends the update again through `kv.update()`, which fails the same way with the
 * client's own errors, the ones the lease tells apart (lease-value.ts `isCasConflict`, bucket.ts
 * `isBucketGone`). A timeout is a timeout on both paths (the write may have landed: the lease's next
 * renewal conflicts and reads the key, lease.ts `afterConflict`).
 *
 * One per relay, for the connection its leases use; `close()` when the relay stops.
 */
export class LeaseRenewals {
  private publisher: { nc: NatsConnection; writer: JetStreamPublisher } | undefined;

  constructor(private readonly timeoutMs: number) {}

  /** Writes `value` under `key` if its revision is still `revision`; resolves with the new revision. */
  update(nc: NatsConnection, kv: KV, key: string, value: string, revision: number): Promise<number> {
    if (!(kv instanceof Bucket) || nc.isClosed()) return kv.update(key, value, revision, this.timeoutMs);
    const writer = this.writerFor(nc);
    const h = headers();
    h.set(EXPECTED_LAST_SUBJECT_SEQUENCE, String(revision));
    const subject = kv.subjectForKey(kv.encodeKey(key), true);
    return new Promise<number>((resolve, reject) => {
      writer.publish(subject, encoder.encode(value), h, (err: RelayError | null, ack) => {
        if (ack && !ack.duplicate) return resolve(ack.seq);
        if (err?.code === ErrorCodes.PUBLISH_TIMEOUT) return reject(err);
        // Anything but a stored write: the client's own update says what it is, in its own errors.
        kv.update(key, value, revision, this.timeoutMs).then(resolve, reject);
      });
    });
  }

  /** Ends the inbox subscription (the relay stops; a renewal still waiting fails as not answered). */
  close(): void {
    this.publisher?.writer.close();
    this.publisher = undefined;
  }

  private writerFor(nc: NatsConnection): JetStreamPublisher {
    if (this.publisher?.nc !== nc) {
      this.publisher?.writer.close();
      this.publisher = { nc, writer: new JetStreamPublisher(nc, this.timeoutMs) };
    }
    return this.publisher.writer;
  }
}
