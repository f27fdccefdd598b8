import { KvWatchInclude } from "@nats-io/kv";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import { sleep } from "../lifecycle/backoff.js";

/**
 * What makes the lease loop act before its next poll: the naps it takes between steps, which a
 * wake-up ends early, and the watch on the lease key that wakes it on a delete and reports writes
 * as they happen. Best effort: polling stays the fallback.
 */

/** The loop's sleeps; `wake()` ends the current one, or the next one at once when none is running. */
export class Napper {
  private wakePending = false;
  private waker: (() => void) | undefined;

  /** Sleeps `ms`; ends early on abort and on `wake()` (a wake while awake ends the next nap at once). */
  async nap(ms: number, signal: AbortSignal): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return;
    }
    const ac = new AbortController();
    const onAbort = () => ac.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    this.waker = onAbort;
    try {
      await sleep(ms, ac.signal);
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.waker = undefined;
    }
  }

  wake(): void {
    if (this.waker) this.waker();
    else this.wakePending = true;
  }
}

export interface KeyWatchHandlers {
  /** A delete or purge of the key. */
  onRemoved(): void;
  /** A write of the key. */
  onPut(e: KvWatchEntry): void;
  /** The watch ended (stopped, or it failed: logged at debug). */
  onEnd(): void;
}

/** Watches `key` for updates (not its current value) until the returned handle is stopped. */
export function watchLeaseKey(kv: KV, key: string, logger: Logger, on: KeyWatchHandlers): { stop(): void } {
  let iter: QueuedIterator<KvWatchEntry> | undefined;
  let stopped = false;
  const handle = {
    stop: () => {
      stopped = true;
      iter?.stop();
    },
  };
  const run = async () => {
    iter = await kv.watch({ key, include: KvWatchInclude.UpdatesOnly });
    if (stopped) return iter.stop();
    for await (const e of iter) {
      if (e.operation !== "PUT") on.onRemoved();
      else on.onPut(e);
    }
  };
  run()
    .catch((err: unknown) => logger.debug({ err: toRelayError(err).message }, "lease watch ended"))
    .finally(() => on.onEnd());
  return handle;
}
