/**
 * The `consume()` options that keep a link's whole window requested from the source: the client buffers
 * up to `max_messages` requested-but-not-received messages and sends a new pull once that many minus
 * `threshold_messages` have arrived. With `max_messages = inFlight` and the threshold `batchSize` below
 * it, each pull asks for about `batchSize` messages and pulls stay outstanding for the whole window, so
 * a link that reads another region gets up to `inFlight` messages per round trip (one pull of 500 at a
 * time over 40 ms would cap it at 12,500/s). The server's MaxAckPending (= inFlight) still bounds what
 * the relay holds.
 */
export function pullWindow(batchSize: number, inFlight: number): { max_messages: number; threshold_messages?: number } {
  const max = Math.max(batchSize, inFlight);
  const threshold = max - batchSize;
  // A threshold of 0 would mean "the client's default" (75 % of max): give it only when it is one.
  return threshold > 0 ? { max_messages: max, threshold_messages: threshold } : { max_messages: max };
}
