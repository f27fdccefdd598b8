/**
 * Reading back what the source consumer jumped over (nats/purge-skips.ts): on a nats-server before
 * 2.10.11 a subject purge moves a link's consumer past messages the stream still holds, and forgets
 * the ones it had delivered. A jump the link sees — in the deliveries, or an ack floor above what it
 * was delivered when it places its cursor — is read back from the stream before it counts as a loss:
 * what the stream still holds in the range goes into the pipeline as a delivery with no ack subject
 * (the server no longer waits for it), in source order; only what it no longer holds is a gap (or, on
 * a KV link, superseded). While a jump found in the deliveries is read back, the deliveries after it
 * wait here, so the pipeline still takes everything in source order.
 */
import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import { toRelayError } from "../errors.js";
import type { RelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { storedDelivery } from "../nats/delivery.js";
import type { Delivery } from "../nats/delivery.js";
import { isApiCode } from "../nats/durable-consumer.js";
import { nextStored } from "../nats/purge-skips.js";
import type { RelayMetrics } from "../observability/metrics.js";

export interface SkipRecoveryDeps {
  readonly config: LinkConfig;
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  readonly metrics: Pick<RelayMetrics, "skipsReadBack">;
  /** The source's JetStream manager (undefined until the consume loop has one). */
  jsm(): JetStreamManager | undefined;
  /** The link owns its source and has not failed: a read-back goes on only while this holds. */
  owns(): boolean;
  /** The pipeline has room for one more message (its inFlight bound). */
  room(): boolean;
  /** A message read back: into the pipeline, as a delivery with no ack subject. */
  take(d: Delivery): void;
  /** Part of the jump the stream no longer holds (deleted before the link read it). False: the link halts on it. */
  gone(fromSeq: number, toSeq: number): boolean;
  /** A bug while taking what was read back: the link stops rather than ack past it. */
  fail(err: RelayError): void;
}

/** How often a read-back waiting for room in the pipeline looks again (ms). */
const ROOM_POLL_MS = 10;

export class SkipRecovery {
  /** Deliveries that came after a jump being read back, in order; undefined while nothing is held. */
  private queued: Delivery[] | undefined;
  private running: Promise<void> = Promise.resolve();
  private readonly filter: string;

  constructor(private readonly deps: SkipRecoveryDeps) {
    this.filter = deps.config.from.filterSubject ?? ">";
  }

  /** A jump found in the deliveries is being read back: deliveries wait (offer). */
  get holding(): boolean {
    return this.queued !== undefined;
  }

  /** A delivery after the jump: it waits for the read-back. */
  offer(d: Delivery): void {
    this.queued?.push(d);
  }

  /**
   * The consumer jumped over `fromSeq`..`toSeq` to `next`: reads the range back, then hands `next` and
   * every delivery that came meanwhile to `resume`, in order.
   */
  hold(fromSeq: number, toSeq: number, next: Delivery, resume: (queued: Delivery[]) => void): void {
    this.queued = [next];
    this.running = this.readBack(fromSeq, toSeq)
      .then(() => {
        const queued = this.queued ?? [];
        this.queued = undefined;
        if (this.deps.owns() && !this.deps.signal.aborted) resume(queued);
      })
      .catch((err: unknown) => this.deps.fail(toRelayError(err)));
  }

  /** The pull ended: whatever waits stays unacked at the source (the cursor placed next puts it first). */
  async settled(): Promise<void> {
    await this.running;
    this.queued = undefined;
  }

  /**
   * Reads `fromSeq`..`toSeq` back from the source: each message the stream still holds there is taken,
   * in order; each range it no longer holds is reported gone. Stops when the link loses its source or
   * halts on a gone range; a failed read is retried.
   */
  async readBack(fromSeq: number, toSeq: number): Promise<void> {
    const { config, logger, signal } = this.deps;
    const backoff = new Backoff(100, 5_000);
    let seq = fromSeq;
    let readBack = 0;
    while (seq <= toSeq && this.deps.owns() && !signal.aborted) {
      const jsm = this.deps.jsm();
      if (!this.deps.room() || !jsm) {
        await sleep(ROOM_POLL_MS, signal).catch(() => undefined);
        continue;
      }
      let sm;
      try {
        sm = await nextStored(jsm, config.from.stream, this.filter, seq);
      } catch (err) {
        // The stream itself is gone (deleted, to be created again): so is what the jump went over.
        if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) {
          this.deps.gone(seq, toSeq);
          break;
        }
        logger.warn({ err: toRelayError(err).message, fromSeq: seq, toSeq }, "reading back messages the source consumer jumped over failed: retrying");
        await sleep(backoff.next(), signal).catch(() => undefined);
        continue;
      }
      backoff.reset();
      if (!this.deps.owns() || signal.aborted) break;
      const found = sm !== undefined && sm.seq <= toSeq ? sm : undefined;
      const goneTo = found ? found.seq - 1 : toSeq;
      if (goneTo >= seq && !this.deps.gone(seq, goneTo)) break;
      if (!found) break;
      this.deps.take(storedDelivery(found));
      this.deps.metrics.skipsReadBack.inc({ link: config.name });
      readBack++;
      seq = found.seq + 1;
    }
    if (readBack > 0) {
      // Every purge of a key a KV link is behind on does this on such a server: info there, a warning
      // on a stream link (an operator's subject purge).
      logger[config.to.bucket !== undefined ? "info" : "warn"](
        { fromSeq, toSeq, readBack },
        `the source consumer jumped over ${readBack === 1 ? "1 message" : `${readBack} messages`} the stream still holds (a subject purge on a nats-server before 2.10.11): read back and relayed`,
      );
    }
  }
}
