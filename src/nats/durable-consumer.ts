import { AckPolicy, DeliverPolicy, JetStreamApiCodes, JetStreamApiError, ReplayPolicy } from "@nats-io/jetstream";
import type { ConsumerConfig, ConsumerInfo, JetStreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/nats-core";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";

/**
 * Where a new cursor starts: a source sequence, the next message stored (`"new"`), or the first message
 * stored at or after a time (a link's `startAt`, link/start-at.ts).
 */
export type CursorStart = number | "new" | { readonly time: string };

/** The deliver policy of a consumer that starts at `start` (from the start of the stream when absent). */
export function deliverFrom(start: CursorStart | undefined): Partial<ConsumerConfig> {
  if (start === "new") return { deliver_policy: DeliverPolicy.New };
  if (typeof start === "object") return { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.time };
  return start !== undefined && start > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start } : { deliver_policy: DeliverPolicy.All };
}

/**
 * The source cursor of a link (DESIGN §2.1): its ack floor advances only after the destination has it.
 * `startSeq`: where a new cursor starts (after what the destination already holds, or the link's
 * `startAt`); from the start when absent.
 */
export function durableConfig(link: LinkConfig, startSeq?: CursorStart): Partial<ConsumerConfig> & { durable_name: string } {
  const start = deliverFrom(startSeq);
  return {
    durable_name: link.durableName,
    ack_policy: ackPolicyOf(link),
    ...start,
    replay_policy: ReplayPolicy.Instant,
    max_deliver: -1,
    ack_wait: nanos(link.ackWaitMs),
    max_ack_pending: link.inFlight,
    max_waiting: 512,
    description: `jetstream-relay link ${link.name}`,
    ...(link.from.filterSubject ? { filter_subject: link.from.filterSubject } : {}),
  };
}

/** The consumer's ack policy for the link's `sourceAcks`. */
export function ackPolicyOf(link: LinkConfig): AckPolicy {
  return link.sourceAcks === "cumulative" ? AckPolicy.All : AckPolicy.Explicit;
}

/**
 * Reads the link's durable pull consumer and brings it to the link's settings (ack wait, max ack
 * pending, max deliver, no inactive threshold); undefined when it does not exist (the caller decides
 * where a new one starts). Safe to call on every start. A filter change on an existing consumer is
 * refused (it would move the cursor): the error says how to proceed.
 */
export async function readDurable(jsm: JetStreamManager, link: LinkConfig): Promise<ConsumerInfo | undefined> {
  const want = durableConfig(link);
  const stream = link.from.stream;
  try {
    let info: ConsumerInfo | undefined;
    try {
      info = await jsm.consumers.info(stream, link.durableName);
    } catch (err) {
      if (!isApiCode(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
    }
    if (!info) return undefined;
    const have = info.config;
    if ((have.filter_subject ?? "") !== (want.filter_subject ?? "")) {
      throw new RelayError(
        ErrorCodes.CONFIG_INVALID,
        `link ${link.name}: durable ${link.durableName} on stream ${stream} filters "${have.filter_subject ?? ""}" but the link says "${want.filter_subject ?? ""}"; delete the consumer or choose another durable name`,
      );
    }
    // An inactive_threshold someone else set would let the server delete the cursor while the link is
    // idle (or its relay down): 0 clears it (nats-server 2.9.10 accepts that in an update and stops the
    // delete timer; test/integration/durable-consumer.test.ts).
    const inactive = (have.inactive_threshold ?? 0) > 0;
    if (have.ack_wait !== want.ack_wait || have.max_ack_pending !== want.max_ack_pending || have.max_deliver !== -1 || inactive) {
      const updated = await jsm.consumers.update(stream, link.durableName, {
        ack_wait: want.ack_wait,
        max_ack_pending: want.max_ack_pending,
        max_deliver: -1,
        description: want.description,
        ...(inactive ? { inactive_threshold: 0 } : {}),
      });
      return updated;
    }
    return info;
  } catch (err) {
    throw classifyJsError(err, `link ${link.name}: source stream ${stream} in region ${link.from.region}`);
  }
}

/**
 * Creates the durable starting at `startSeq` (from the start when absent; `"new"` or a time for a
 * link's `startAt`), replacing any consumer of that
 * name: the way to move a cursor on servers without a consumer reset API (2.9, 2.10). The caller owns the
 * link (nobody else consumes from it meanwhile).
 */
export async function createDurable(jsm: JetStreamManager, link: LinkConfig, startSeq?: CursorStart, replace = false): Promise<ConsumerInfo> {
  const stream = link.from.stream;
  try {
    if (replace) {
      await jsm.consumers.delete(stream, link.durableName).catch((err: unknown) => {
        if (!isApiCode(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
      });
    }
    return await jsm.consumers.add(stream, durableConfig(link, startSeq));
  } catch (err) {
    throw classifyJsError(err, `link ${link.name}: source stream ${stream} in region ${link.from.region}`);
  }
}

export function isApiCode(err: unknown, code: number): boolean {
  return err instanceof JetStreamApiError && err.code === code;
}

/** JetStream API failures by code: a missing stream is STREAM_NOT_FOUND, everything else JETSTREAM_API. */
export function classifyJsError(err: unknown, where: string): RelayError {
  if (err instanceof RelayError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) {
    return new RelayError(ErrorCodes.STREAM_NOT_FOUND, `${where}: stream not found`, { cause: err });
  }
  return new RelayError(ErrorCodes.JETSTREAM_API, `${where}: ${message}`, { cause: err });
}
