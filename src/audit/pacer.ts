/**
 * The audit's read budget (audit.maxReadRate): a token bucket over messages read. `spend(n)` waits as
 * long as `n` more reads cost at the rate, letting a second's worth go at once. One per kind of pass
 * (range passes and the sweep each have their own share), on the audit's clock.
 */
import { sleep } from "../lifecycle/backoff.js";
import type { StreamSide } from "../nats/stream-reader.js";
import { readStream } from "../nats/stream-reader.js";
import type { ReadOptions } from "../nats/stream-reader.js";

/**
 * Messages per pull of a paced read. The audit reads on the link's own connections: a chunk pulled at
 * once (a second's worth, 3,000 by default) comes as one burst ahead of the link's PubAcks on the same
 * connection and is parsed in one go. Pulled a few hundred at a time, the reads interleave with the
 * link's traffic.
 */
export const PACED_BATCH = 256;

/** Thrown out of a paced read when the audit stops or this relay no longer works the link. */
export class AuditStopped extends Error {
  constructor() {
    super("audit stopped");
  }
}

export class Pacer {
  private paidUntil = 0;

  constructor(
    private readonly rate: () => number,
    private readonly now: () => number,
  ) {}

  async spend(messages: number): Promise<void> {
    const now = this.now();
    this.paidUntil = Math.max(this.paidUntil, now) + (messages * 1000) / this.rate();
    const wait = this.paidUntil - now - 1_000;
    if (wait > 0) await sleep(wait);
  }

  /** Messages read in one chunk: a second's worth, within bounds. */
  get chunk(): number {
    return Math.max(100, Math.min(50_000, Math.floor(this.rate())));
  }
}

/**
 * Reads `side` from `from` (a sequence, or the first message stored at/after a time) to `to`, headers
 * only, in chunks of the pacer's size, paying for each chunk before the next; throws AuditStopped
 * between chunks once `going()` says no.
 */
export async function readPaced(
  side: StreamSide,
  from: { readonly seq: number } | { readonly ms: number },
  to: number,
  pacer: Pacer,
  going: () => boolean,
  onMessage: Parameters<typeof readStream>[2],
  filterSubject?: string,
): Promise<void> {
  const chunk = pacer.chunk;
  const filter = filterSubject === undefined ? {} : { filterSubject };
  let start: Pick<ReadOptions, "startSeq" | "startMs"> = "seq" in from ? { startSeq: from.seq } : { startMs: from.ms };
  for (;;) {
    if (!going()) throw new AuditStopped();
    const r = await readStream(side, { ...start, ...filter, endSeq: to, maxMessages: chunk, batch: PACED_BATCH }, onMessage);
    await pacer.spend(r.delivered);
    if (r.delivered < chunk || r.lastSeq >= to) return;
    start = { startSeq: r.lastSeq + 1 };
  }
}
