/**
 * One error class for the whole relay. `code` is stable and catalogued in the README
 * ("Error codes"); callers branch on codes and on `isRetryable()`, never on message text.
 */
export const ErrorCodes = {
  /** Config file missing, unreadable, not YAML, or failing the schema. Exit code 2. */
  CONFIG_INVALID: "CONFIG_INVALID",
  /** Command line usage error. Exit code 2. */
  USAGE: "USAGE",
  /** A region cannot be reached (connect refused, DNS, TLS handshake). Retryable. */
  NATS_CONNECT: "NATS_CONNECT",
  /** Authentication or authorization rejected by a region. Not retryable. */
  NATS_AUTH: "NATS_AUTH",
  /** The source or destination stream does not exist. Retryable (it may be created). */
  STREAM_NOT_FOUND: "STREAM_NOT_FOUND",
  /** A JetStream API call failed (no leader, timeout, 503). Retryable. */
  JETSTREAM_API: "JETSTREAM_API",
  /** A destination publish got no PubAck in time. Retryable. */
  PUBLISH_TIMEOUT: "PUBLISH_TIMEOUT",
  /** A destination publish was answered with an error (no responders, no leader, ...). Retryable. */
  PUBLISH_FAILED: "PUBLISH_FAILED",
  /** A PubAck said duplicate with seq 0: the message was not stored. Retryable. */
  PUBLISH_NOT_STORED: "PUBLISH_NOT_STORED",
  /**
   * The destination refused a publish with an error no retry of that message heals by itself, for
   * every message of the link alike (a 4xx other than the size): the link pauses and retries slowly.
   */
  PUBLISH_REJECTED: "PUBLISH_REJECTED",
  /**
   * The destination answered 429 (JSStreamTooManyRequests, err_code 10167, nats-server 2.11+: the
   * stream's ingest queue is full): backpressure, not a failure. The publish is retried after a backoff,
   * the pull window shrinks, nothing is dropped and the link neither pauses nor halts.
   */
  DESTINATION_BUSY: "DESTINATION_BUSY",
  /** The destination stream is full (discard new) or cannot store: the link pauses until it can. */
  DESTINATION_FULL: "DESTINATION_FULL",
  /** A message (headers included) is larger than the destination accepts: the bad-message policy applies. */
  MESSAGE_TOO_LARGE: "MESSAGE_TOO_LARGE",
  /**
   * The destination stream does not bind every subject the link publishes (read at start and whenever the
   * stream changes), a PubAck came from another stream, or the server refused the link's
   * `Nats-Expected-Stream` (err_code 10060): the link halts.
   */
  DESTINATION_MISMATCH: "DESTINATION_MISMATCH",
  /**
   * The destination stream has interest or work-queue retention: it can answer a publish with a PubAck
   * and not keep the message (no interest, or consumed), so acking the source would lose it. The link fails.
   */
  DESTINATION_RETENTION: "DESTINATION_RETENTION",
  /**
   * The destination stream is a counter stream (`allow_msg_counter`, nats-server 2.12+): it refuses a
   * publish without `Nats-Incr` and sums what it takes, so it cannot hold a copy. The link fails; server
   * sourcing (the stream's `sources`) is how counters are aggregated across regions.
   */
  DESTINATION_UNSUPPORTED: "DESTINATION_UNSUPPORTED",
  /**
   * `to.order: strict`: the destination refused a publish for its `Nats-Expected-Last-Sequence`
   * (err_code 10071, "wrong last sequence"): an earlier publish of the window was not stored, or
   * another writer moved the stream on. The link rolls back and resumes from the destination's last
   * sequence and markers. Retryable.
   */
  ORDER_REJECTED: "ORDER_REJECTED",
  /**
   * `to.order: strict` on a link that is not its destination stream's only writer (another link into
   * it, subjects it binds beyond the link's, sources or a mirror, the dead-letter subject): the link fails.
   */
  ORDER_NOT_SOLE_WRITER: "ORDER_NOT_SOLE_WRITER",
  /** The guard's Redis is unreachable or failing over. Retryable; the link pauses. */
  GUARD_UNAVAILABLE: "GUARD_UNAVAILABLE",
  /**
   * `guard.strict` is set and the guard's Redis does not keep what it writes: no AOF, or a
   * maxmemory-policy that can evict the guard's keys. (Too few replicas for `waitReplicas` under
   * `strict` is GUARD_UNAVAILABLE: the link waits for them.)
   */
  GUARD_NOT_DURABLE: "GUARD_NOT_DURABLE",
  /**
   * The guard's memory is gone: its scope marker has no entry for a link whose consumer has acked
   * messages (Redis flushed, restarted empty, failed over to a replica without the data). The link
   * pauses until an operator runs `jetstream-relay guard resume` (accept, or `--resync`). Not retried.
   */
  GUARD_STATE_LOST: "GUARD_STATE_LOST",
  /**
   * The guard refused a claim or commit made under an older lease revision than one it has seen for the
   * link: another relay of the group owns the link now (this one was paused past its lease).
   */
  LEASE_FENCED: "LEASE_FENCED",
  /** The guard's Redis is older than the guard needs (6.2: `SET ... GET`). */
  GUARD_UNSUPPORTED: "GUARD_UNSUPPORTED",
  /** A message lacks, or carries a malformed, entity/version the link requires. */
  BAD_MESSAGE: "BAD_MESSAGE",
  /**
   * The source has messages for the link and delivers none (no heartbeat, or no progress for
   * `stallAfter` while every connection looks healthy): the link is `stalled` and healed in steps. Retryable.
   */
  SOURCE_STALLED: "SOURCE_STALLED",
  /** Source retention deleted messages the link had not relayed, and the link's policy is `halt`. */
  SOURCE_GAP: "SOURCE_GAP",
  /**
   * The link has no source consumer and its position cannot be known: no checkpoint in the group bucket,
   * and the destination scan ended at its bound without finding the link's record and without covering
   * the stream. The link halts rather than guess (DESIGN §11) until an operator gives an explicit start
   * (`jetstream-relay link start-at`). Not retried.
   */
  POSITION_UNKNOWN: "POSITION_UNKNOWN",
  /** The HTTP server cannot listen on its address (in use, not this host's, not permitted). Exit code 1. */
  HTTP_LISTEN: "HTTP_LISTEN",
  /** `status` cannot reach the relay's HTTP address (refused, timed out, not HTTP). Exit code 1. */
  RELAY_UNREACHABLE: "RELAY_UNREACHABLE",
  /** Shutdown did not finish within the grace period. */
  SHUTDOWN_TIMEOUT: "SHUTDOWN_TIMEOUT",
  /** Anything else: a bug. */
  INTERNAL: "INTERNAL",
} as const;

export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

const retryable: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  ErrorCodes.NATS_CONNECT,
  ErrorCodes.STREAM_NOT_FOUND,
  ErrorCodes.JETSTREAM_API,
  ErrorCodes.PUBLISH_TIMEOUT,
  ErrorCodes.PUBLISH_FAILED,
  ErrorCodes.PUBLISH_NOT_STORED,
  ErrorCodes.PUBLISH_REJECTED,
  ErrorCodes.DESTINATION_FULL,
  ErrorCodes.DESTINATION_BUSY,
  ErrorCodes.ORDER_REJECTED,
  ErrorCodes.GUARD_UNAVAILABLE,
  ErrorCodes.SOURCE_STALLED,
]);

export class RelayError extends Error {
  override readonly name = "RelayError";
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  isRetryable(): boolean {
    return retryable.has(this.code);
  }
}

export function isRelayError(err: unknown, code?: ErrorCode): err is RelayError {
  return err instanceof RelayError && (code === undefined || err.code === code);
}

/** Wraps anything thrown into a RelayError, keeping the original as `cause`. */
export function toRelayError(err: unknown, fallback: ErrorCode = ErrorCodes.INTERNAL): RelayError {
  if (err instanceof RelayError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new RelayError(fallback, message, { cause: err });
}
