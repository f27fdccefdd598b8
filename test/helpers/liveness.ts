import { setTimeout as delay } from "node:timers/promises";

/** What `/healthz` probes saw while a fault was injected. */
export interface LivenessReport {
  /** Probes sent. */
  probes: number;
  /** Probes answered with a non-2xx, failing, or not answered within the per-probe timeout. */
  failures: number;
  /** Slowest probe in ms (a timed-out probe counts as its timeout). */
  worstMs: number;
  /** What the first failure was, for the assertion message. */
  firstFailure?: string;
}

export interface LivenessWatch {
  /** Ends probing (waiting for the probe in flight) and resolves with the report. Idempotent. */
  stop(): Promise<LivenessReport>;
}

/**
 * Probes `GET ${url}/healthz` every `intervalMs` (default 100) with a per-probe timeout
 * (`timeoutMs`, default 1000) until `stop()`. The point is the relay's event loop: a relay busy
 * retrying a dead dependency must still answer its liveness probe, or Kubernetes would restart it
 * in the middle of a recovery. Timers are unref'd, so a test that fails before `stop()` does not
 * hang its process; register `stop()` in `t.after` anyway.
 */
export function watchLiveness(
  url: string,
  opts: { intervalMs?: number; timeoutMs?: number } = {},
): LivenessWatch {
  const intervalMs = opts.intervalMs ?? 100;
  const timeoutMs = opts.timeoutMs ?? 1_000;
  const report: LivenessReport = { probes: 0, failures: 0, worstMs: 0 };
  const stopping = new AbortController();
  const fail = (why: string): void => {
    report.failures++;
    report.firstFailure ??= `probe ${report.probes}: ${why}`;
  };

  const probe = async (): Promise<void> => {
    report.probes++;
    const started = performance.now();
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(timeoutMs) });
      await res.arrayBuffer();
      if (!res.ok) fail(`HTTP ${res.status}`);
    } catch (err) {
      const name = err instanceof Error ? err.name : "";
      if (name === "TimeoutError") fail(`no answer within ${timeoutMs}ms`);
      else fail(describe(err));
    } finally {
      report.worstMs = Math.max(report.worstMs, Math.round(performance.now() - started));
    }
  };

  const loop = async (): Promise<void> => {
    while (!stopping.signal.aborted) {
      const next = performance.now() + intervalMs;
      await probe();
      const pause = next - performance.now();
      if (pause > 0)
        await delay(pause, undefined, { signal: stopping.signal, ref: false }).catch(() => undefined);
    }
  };
  // probe() catches everything, so the loop cannot reject; the catch only keeps that provable.
  const running = loop().catch((err: unknown) => fail(`probe loop crashed: ${describe(err)}`));

  let stopped: Promise<LivenessReport> | undefined;
  return {
    stop() {
      stopped ??= (async () => {
        stopping.abort();
        await running;
        return { ...report };
      })();
      return stopped;
    },
  };
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    // fetch() hides the useful part (ECONNREFUSED, ...) in `cause`.
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}
