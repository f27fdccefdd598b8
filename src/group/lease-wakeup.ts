import { KvWatchInclude } from "@nats-io/kv";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import { sleep } from "../lifecycle/backoff.js";
import type { TickGrid } from "../lifecycle/tick-grid.js";

/**
 * What makes the lease loop act before its next poll: the naps it takes between steps, which a
 * wake-up ends early, and the watch on the lease key that wakes it on a delete and reports writes
 * as they happen. Best effort: polling stays the fallback.
 */

/** The loop's sleeps; `wake()` ends the current one, or the next one at once when none is running. */
export class Napper {
  private wakePending = false;
  private waker: (() => void) | undefined;

  /** `ticks`: the relay's shared grid, for naps given a `gridMs` (see TickGrid). */
  constructor(private readonly ticks?: TickGrid) {}

  /**
   * Sleeps `ms` (with `gridMs` and a grid: until the last tick of the grid at or before that, so the
   * links' renewals leave together); ends early on abort and on `wake()` (a wake while awake ends the
   * next nap at once).
   */
  async nap(ms: number, signal: AbortSignal, gridMs?: number): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return;
    }
    const ticks = this.ticks;
    if (ticks && gridMs) {
      // The renewals' nap, a thousand a second: no controller of its own. A wake settles the nap at
      // once; the grid's waiter settles nothing more at its tick.
      await new Promise<void>((resolve) => {
        this.waker = resolve;
        void ticks.sleep(ms, gridMs, signal).then(resolve);
      });
      this.waker = undefined;
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

/**
 * Watches `key` for updates (not its current value) until the returned handle is stopped: through
 * `shared` (the relay's one watch over the bucket) when given, else with a watch of its own.
 */
export function watchLeaseKey(kv: KV, key: string, logger: Logger, on: KeyWatchHandlers, shared?: LeaseKeyWatches): { stop(): void } {
  if (shared) return shared.watch(kv, key, on);
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

/**
 * One watch over the group bucket for every lease of a relay, instead of one per lease key: a thousand
 * links are one ordered consumer on the server, not a thousand, each with its heartbeats and flow
 * control. Writes are handed to the leases watching their key; a key nobody here watches is ignored.
 * Best effort like the watch per key: when it ends (stopped, failed, or `restart()` after the bucket was
 * found gone) every lease hears `onEnd` and watches again at its next step, which starts a new watch on
 * the bucket that lease has open.
 */
export class LeaseKeyWatches {
  private readonly byKey = new Map<string, Set<KeyWatchHandlers>>();
  private current: { iter: QueuedIterator<KvWatchEntry> | undefined; stopAsked: boolean } | undefined;

  constructor(private readonly logger: Logger) {}

  /** Watches `key` (through the shared watch, started on `kv` when none runs) until stopped. */
  watch(kv: KV, key: string, on: KeyWatchHandlers): { stop(): void } {
    let handlers = this.byKey.get(key);
    if (!handlers) this.byKey.set(key, (handlers = new Set()));
    handlers.add(on);
    if (!this.current) this.start(kv);
    const mine = handlers;
    return {
      stop: () => {
        mine.delete(on);
        if (mine.size === 0 && this.byKey.get(key) === mine) this.byKey.delete(key);
        if (this.byKey.size === 0) this.restart(); // nobody left to tell: the watch ends (a relay stopping)
      },
    };
  }

  /** A watch runs (or is starting). */
  get watching(): boolean {
    return this.current !== undefined;
  }

  /** The bucket was found gone: the watch ends, and the leases start a new one on the bucket they open next. */
  restart(): void {
    if (!this.current) return;
    this.current.stopAsked = true;
    this.current.iter?.stop();
  }

  private start(kv: KV): void {
    const run = { iter: undefined as QueuedIterator<KvWatchEntry> | undefined, stopAsked: false };
    this.current = run;
    const loop = async () => {
      run.iter = await kv.watch({ key: ">", include: KvWatchInclude.UpdatesOnly });
      if (run.stopAsked) return run.iter.stop();
      for await (const e of run.iter) {
        const handlers = this.byKey.get(e.key);
        if (!handlers) continue;
        for (const on of [...handlers]) {
          if (e.operation !== "PUT") on.onRemoved();
          else on.onPut(e);
        }
      }
    };
    loop()
      .catch((err: unknown) => this.logger.debug({ err: toRelayError(err).message }, "lease watch ended"))
      .finally(() => {
        if (this.current === run) this.current = undefined;
        const all = [...this.byKey.values()].flatMap((set) => [...set]);
        this.byKey.clear();
        for (const on of all) on.onEnd();
      });
  }
}
