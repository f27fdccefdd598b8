import { randomBytes } from "node:crypto";
import { setTimeout as delay } from "node:timers/promises";

export interface CheckOptions {
  /** What we are waiting for; it is the first thing a reader of a timeout error sees. */
  name: string;
  /** Overall budget (default 10 s). */
  timeoutMs?: number;
  /** Pause between attempts (default 50 ms). */
  intervalMs?: number;
  /** Gives up early (rejecting with the abort reason), e.g. when the process being polled died. */
  signal?: AbortSignal;
}

/** What a truthiness test lets through. */
export type Truthy<T> = Exclude<T, false | 0 | 0n | "" | null | undefined>;

/** Kept distinct from a real result so a hung attempt can be told apart from a falsy one. */
const TIMED_OUT = Symbol("timed out");

/**
 * Polls `fn` until it returns a truthy value and resolves with that value.
 * A falsy result or a thrown error both mean "not yet"; the last error is reported on timeout.
 * Each attempt is raced against the remaining budget, so an attempt that hangs (a socket that
 * never answers, say) still ends in the named timeout instead of hanging the test.
 */
export async function check<T>(fn: () => T | Promise<T>, opts: CheckOptions): Promise<Truthy<T>> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const intervalMs = opts.intervalMs ?? 50;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  let lastValue: unknown;
  let hung = false;
  for (;;) {
    opts.signal?.throwIfAborted();
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const ac = new AbortController();
    try {
      const result = await Promise.race([
        Promise.resolve().then(fn),
        delay(remaining, TIMED_OUT, { signal: ac.signal }),
      ]);
      if (result === TIMED_OUT) {
        hung = true;
        break;
      }
      if (result) return result as Truthy<T>;
      lastValue = result;
    } catch (err) {
      lastError = err;
    } finally {
      ac.abort();
    }
    const pause = Math.min(intervalMs, deadline - Date.now());
    if (pause > 0) await delay(pause, undefined, { signal: opts.signal });
  }
  const detail = hung
    ? "the last attempt was still pending"
    : lastError !== undefined
      ? `last error: ${describe(lastError)}`
      : `last result: ${String(lastValue)}`;
  throw new Error(`timed out after ${timeoutMs}ms waiting for: ${opts.name}; ${detail}`, {
    cause: lastError,
  });
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    // fetch() hides the useful part (ECONNREFUSED, ...) in `cause`.
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}

/** `PREFIX_<8 hex>`: unique per call and valid as a stream, consumer or server name. */
export function uniqueName(prefix: string): string {
  const safe = prefix.replace(/[^A-Za-z0-9_-]/g, "_");
  return `${safe}_${randomBytes(4).toString("hex")}`;
}
