/**
 * The `consume()` options of a link's pulls. The client buffers up to `max_messages` requested-but-not-
 * received messages and sends a new pull once that many minus `threshold_messages` have arrived: with
 * the threshold `batchSize` below the window, each pull asks for about `batchSize` and pulls stay
 * outstanding for the whole window, so a link that reads another region gets the window per round trip
 * (one pull of 500 at a time over 40 ms caps it at 12,500/s).
 *
 * The window is `inFlight` messages, but never more than `inFlightBytes` of messages as large as the
 * source allows (`maxMessageBytes`: the stream's max_msg_size, else the server's max_payload), and never
 * less than one batch: what is on its way when the byte bound is hit arrives anyway, and this keeps it
 * within the bound again. (With the defaults, 64 MiB and a 1 MiB max_payload, that is one batch: a WAN
 * link gets its full window from a larger `inFlightBytes` or a stream with a smaller max_msg_size.)
 * The server's MaxAckPending (= inFlight) still bounds what the relay holds.
 */
export function pullWindow(
  link: { readonly batchSize: number; readonly inFlight: number; readonly inFlightBytes: number },
  maxMessageBytes: number,
): { max_messages: number; threshold_messages?: number } {
  const bySize = maxMessageBytes > 0 ? Math.floor(link.inFlightBytes / maxMessageBytes) : link.inFlight;
  const max = Math.max(link.batchSize, Math.min(link.inFlight, bySize));
  const threshold = max - link.batchSize;
  // A threshold of 0 would mean "the client's default" (75 % of max): give it only when it is one.
  return threshold > 0 ? { max_messages: max, threshold_messages: threshold } : { max_messages: max };
}

/** The largest message the source can hold: its stream's max_msg_size, else the server's max_payload (0: unknown). */
export function maxMessageBytes(streamMaxMsgSize: number | undefined, serverMaxPayload: number | undefined): number {
  if (streamMaxMsgSize !== undefined && streamMaxMsgSize > 0) return streamMaxMsgSize;
  return serverMaxPayload ?? 0;
}

/** What a window allows: one window per round trip, in messages per second (undefined without a round trip). */
export function windowPerSecond(window: number, rttMs: number | undefined): number | undefined {
  return rttMs !== undefined && rttMs > 0 ? Math.round((window * 1000) / rttMs) : undefined;
}
