import { ErrorCodes, RelayError } from "../errors.js";

/**
 * `p`, or a JETSTREAM_API RelayError after `ms`, or the signal's reason when it aborts first. For
 * client calls that can wait without a timeout of their own (an ordered consumer re-trying its
 * creation while its stream has no leader or its server is down): the caller moves on, the call
 * itself is left to end by itself.
 */
export function withDeadline<T>(p: Promise<T>, ms: number, what: string, signal?: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => done(() => reject(new RelayError(ErrorCodes.JETSTREAM_API, `${what}: no answer within ${ms} ms`))), ms);
    const onAbort = () => done(() => reject(signal?.reason));
    let settled = false;
    const done = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      fn();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) onAbort();
    p.then(
      (v) => done(() => resolve(v)),
      (err: unknown) => done(() => reject(err)),
    );
  });
}
