import type { Logger } from "pino";

export interface ShutdownOptions {
  readonly graceMs: number;
  readonly logger: Logger;
  /** Drains and closes everything; receives a signal that aborts when the grace period is over. */
  readonly drain: (deadline: AbortSignal) => Promise<void>;
  /** Injected for tests; defaults to process.exit. */
  readonly exit?: (code: number) => void;
  readonly signals?: readonly NodeJS.Signals[];
  /** Time after the grace period before the watchdog forces exit 1 (default 5 s, for closing). */
  readonly marginMs?: number;
}

/**
 * SIGTERM/SIGINT drain the relay within the grace period and exit 0. A second signal, or a drain that
 * is still running when the grace timer (plus a short margin for closing) fires, forces exit 1 — the
 * watchdog that keeps a hung shutdown from outliving a Kubernetes terminationGracePeriod.
 * Returns a function that removes the handlers.
 */
export function installShutdown(opts: ShutdownOptions): () => void {
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  const signals = opts.signals ?? ["SIGTERM", "SIGINT"];
  let shuttingDown = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (shuttingDown) {
      opts.logger.warn({ signal }, "second signal: exiting now");
      exit(1);
      return;
    }
    shuttingDown = true;
    opts.logger.info({ signal, graceMs: opts.graceMs }, "draining");
    const deadline = new AbortController();
    const graceTimer = setTimeout(() => deadline.abort(), opts.graceMs);
    graceTimer.unref();
    const watchdog = setTimeout(() => {
      opts.logger.error({ graceMs: opts.graceMs }, "shutdown did not finish within the grace period: exiting");
      exit(1);
    }, opts.graceMs + (opts.marginMs ?? 5_000));
    watchdog.unref();
    opts
      .drain(deadline.signal)
      .then(() => {
        clearTimeout(graceTimer);
        clearTimeout(watchdog);
        opts.logger.info("drained: exiting");
        exit(0);
      })
      .catch((err: unknown) => {
        opts.logger.error({ err: err instanceof Error ? err.message : String(err) }, "drain failed");
        exit(1);
      });
  };
  for (const s of signals) process.on(s, onSignal);
  return () => {
    for (const s of signals) process.off(s, onSignal);
  };
}
