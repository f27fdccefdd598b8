/**
 * Stops `iter` when `signal` aborts, or at once if it already has. A client iterator created while a
 * stop was under way (its `await` returned after the abort) would otherwise run on: a KV watch or key
 * listing is an ordered consumer whose heartbeat timer outlives the connection and keeps the process up.
 * Returns the function that detaches the listener once the iterator has ended by itself.
 */
export function stopOnAbort(iter: { stop(): void }, signal: AbortSignal): () => void {
  const onAbort = () => iter.stop();
  if (signal.aborted) {
    onAbort();
    return () => {};
  }
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}
