import { millis } from "@nats-io/nats-core";
import type { StreamInfo } from "@nats-io/jetstream";

/**
 * What the relay needs to know of a stream, read from its info: the pre-flight checks, `streams plan`
 * and a link checking its destination all judge a stream by these facts.
 */
export interface StreamFacts {
  readonly name: string;
  /** The stream's own subjects; empty for a mirror or a stream fed only by sources. */
  readonly subjects: readonly string[];
  readonly retention: string;
  /** 0 when the server reports none. */
  readonly duplicateWindowMs: number;
  /** 0 = unlimited. */
  readonly maxAgeMs: number;
  readonly messages: number;
  /** What the stream holds (with `messages`: the average message size the window is sized by). */
  readonly bytes?: number;
  /** A mirror, or a stream with sources. */
  readonly sourced: boolean;
  /** The stream's `max_msg_size`; 0 or less when it sets none. */
  readonly maxMsgSize?: number;
  /** A counter stream (`allow_msg_counter`, nats-server 2.12+): it sums `Nats-Incr` publishes and refuses others. */
  readonly counter?: boolean;
  /** From its first message's publish time to its last's (ms), with two messages or more: `messages` over it is the source's average rate. */
  readonly spanMs?: number;
}

export type StreamFact =
  | { readonly kind: "found"; readonly stream: StreamFacts }
  | { readonly kind: "missing" }
  /** The JetStream API call failed (no JetStream, timeout, permissions). */
  | { readonly kind: "failed"; readonly reason: string }
  /** The region was not reachable: the region row says why. */
  | { readonly kind: "unreachable" };

/** A stream's facts from its info. */
export function streamFacts(info: StreamInfo): StreamFact {
  const c = info.config;
  const spanMs = Date.parse(info.state.last_ts) - Date.parse(info.state.first_ts);
  return {
    kind: "found",
    stream: {
      name: c.name,
      subjects: c.subjects ?? [],
      retention: c.retention,
      duplicateWindowMs: c.duplicate_window ? millis(c.duplicate_window) : 0,
      maxAgeMs: c.max_age ? millis(c.max_age) : 0,
      messages: info.state.messages,
      bytes: info.state.bytes,
      maxMsgSize: c.max_msg_size ?? -1,
      sourced:
        info.mirror !== undefined ||
        (info.sources?.length ?? 0) > 0 ||
        c.mirror !== undefined ||
        (c.sources?.length ?? 0) > 0,
      ...((c as { allow_msg_counter?: unknown }).allow_msg_counter === true ? { counter: true } : {}),
      ...(info.state.messages > 1 && Number.isFinite(spanMs) && spanMs > 0 ? { spanMs } : {}),
    },
  };
}
