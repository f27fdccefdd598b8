import { jetstreamManager, JetStreamApiCodes, RetentionPolicy } from "@nats-io/jetstream";
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { millis } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import type { AllLinks } from "../config/routes.js";
import type { LinkConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { classifyJsError, isApiCode } from "../nats/durable-consumer.js";
import { findStoredSourceSeqs } from "../nats/destination-markers.js";
import type { SourceRef } from "../nats/destination-markers.js";
import { streamFacts } from "../nats/stream-facts.js";
import { unboundSubjects } from "./binding.js";
import { EXPECTED_LAST_SEQ_MAX_LINE, EXPECTED_LAST_SUBJECT_SEQ_MAX_LINE } from "../nats/expected-last-seq.js";
import { otherWriters, otherWritersText } from "./sole-writer.js";
import { parseNanos, RelayHeaders } from "../protocol/headers.js";
import type { DestinationFacts, DestinationMarkers } from "./pipeline.js";

/** The stream allows per-message TTLs (`allow_msg_ttl`, nats-server 2.11+; absent before). */
export function allowsMsgTtl(info: Pick<StreamInfo, "config">): boolean {
  return (info.config as { allow_msg_ttl?: unknown }).allow_msg_ttl === true;
}

/**
 * DESTINATION_UNSUPPORTED for a counter stream (`allow_msg_counter`, nats-server 2.12+): it refuses a
 * publish without `Nats-Incr` (err_code 10169) and sums increments, so it cannot hold a copy.
 */
export function counterStreamError(info: Pick<StreamInfo, "config">, where: string): RelayError | undefined {
  if ((info.config as { allow_msg_counter?: unknown }).allow_msg_counter !== true) return undefined;
  return new RelayError(
    ErrorCodes.DESTINATION_UNSUPPORTED,
    `${where} is a counter stream (allow_msg_counter): it refuses every publish without Nats-Incr and sums what it takes, so the relay cannot copy messages into it. Aggregate counters across regions with server sourcing instead (the counter stream's \`sources\`, which sum the source's counters), or point the link at a stream without allow_msg_counter`,
  );
}

/** The NATS default, for a server that does not say. */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/**
 * One link's view of its destination stream: what it accepts (read before publishing, so that the relay
 * protects the stream binding itself instead of storing `Nats-Expected-Stream` in every message) and
 * the `Relay-Source` markers it holds.
 */
export class Destination {
  private jsm: JetStreamManager | undefined;

  constructor(
    private readonly link: LinkConfig,
    private readonly nc: NatsConnection,
    private readonly domain: string | undefined,
    /** The source as markers name it (its incarnation changes when the source stream is recreated). */
    private readonly source: () => SourceRef,
    /** Every link the relay runs: with `to.order: strict`, none other may write the destination. */
    private readonly links: AllLinks = [],
  ) {}

  /**
   * Reads the destination stream and checks that it keeps what it acknowledges and binds every subject
   * the link publishes. Rejects with STREAM_NOT_FOUND (retryable: it may be created),
   * DESTINATION_RETENTION (interest or work-queue retention: a PubAck does not mean the message stays)
   * or DESTINATION_MISMATCH (a subject the link publishes would be stored by another stream or refused).
   */
  async facts(sourceInfo: StreamInfo | undefined): Promise<DestinationFacts> {
    const { link } = this;
    const where = `link ${link.name}: destination stream ${link.to.stream} in region ${link.to.region}`;
    let info: StreamInfo;
    try {
      info = await (await this.manager()).streams.info(link.to.stream);
    } catch (err) {
      if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) {
        throw new RelayError(ErrorCodes.STREAM_NOT_FOUND, `${where} not found: messages wait until it exists (see \`jetstream-relay check --live\`)`, { cause: err });
      }
      throw classifyJsError(err, where);
    }
    // Interest or work-queue retention: a PubAck does not mean the message stays.
    if (info.config.retention !== RetentionPolicy.Limits) {
      throw new RelayError(
        ErrorCodes.DESTINATION_RETENTION,
        `${where} has ${info.config.retention} retention: it can acknowledge a message it does not keep, and the relay would ack the source for a message that is gone (its Relay-Source markers go too). Fix: use a stream with limits retention (\`jetstream-relay check --live\` says how for this server)`,
      );
    }
    const counter = counterStreamError(info, where);
    if (counter) throw counter;
    if (sourceInfo) {
      const unbound = unboundSubjects(link, streamFacts(sourceInfo), streamFacts(info));
      if (unbound.length > 0) {
        throw new RelayError(
          ErrorCodes.DESTINATION_MISMATCH,
          `${where} does not bind ${unbound.join(", ")} (its subjects: ${(info.config.subjects ?? []).join(", ") || "none"}): the link's messages would be stored elsewhere or refused; add the subjects to the stream or change the link's transform`,
        );
      }
    }
    if (link.to.order === "strict") {
      // Read again after every change of the stream: a writer added while the link runs stops it too.
      const links = typeof this.links === "function" ? this.links() : this.links;
      const reasons = otherWriters(link, sourceInfo ? streamFacts(sourceInfo) : { kind: "missing" }, streamFacts(info), links);
      if (reasons.length > 0) throw new RelayError(ErrorCodes.ORDER_NOT_SOLE_WRITER, otherWritersText(link, reasons));
    }
    const maxPayload = this.nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
    const maxMsgSize = info.config.max_msg_size > 0 ? info.config.max_msg_size : Number.MAX_SAFE_INTEGER;
    return {
      stream: info.config.name,
      // Strict order adds its header to every publish: what the link measures leaves room for it.
      // A KV link adds its expected last subject sequence the same way.
      maxMessageBytes: Math.min(maxPayload, maxMsgSize) - (link.to.order === "strict" ? EXPECTED_LAST_SEQ_MAX_LINE : link.to.bucket !== undefined ? EXPECTED_LAST_SUBJECT_SEQ_MAX_LINE : 0),
      duplicateWindowMs: info.config.duplicate_window ? millis(info.config.duplicate_window) : 120_000,
      allowMsgTtl: allowsMsgTtl(info),
    };
  }

  /** The pipeline's window into the destination (late retries, id collisions). */
  markers(): DestinationMarkers {
    const stream = this.link.to.stream;
    return {
      findStored: (fromDestSeq, wanted) =>
        findStoredSourceSeqs(this.nc, { stream, source: { ...this.source(), link: this.link.name }, fromDestSeq, wanted, ...(this.domain ? { domain: this.domain } : {}) }),
      lastSeq: async () => (await (await this.manager()).streams.info(stream)).state.last_seq,
      lastOnSubject: async (subject) => {
        const m = await (await this.manager()).streams.getMessage(stream, { last_by_subj: subject });
        if (!m) return undefined;
        const timeNs = parseNanos(m.timestamp);
        if (timeNs === undefined) throw new RelayError(ErrorCodes.JETSTREAM_API, `stream ${stream} seq ${m.seq}: unreadable store time ${JSON.stringify(m.timestamp)}`);
        return { seq: m.seq, headers: m.header, timeNs };
      },
      storedAt: async (seq) => {
        const m = await (await this.manager()).streams.getMessage(stream, { seq });
        if (!m) return undefined;
        return { source: m.header.get(RelayHeaders.Source), data: m.data };
      },
    };
  }

  private async manager(): Promise<JetStreamManager> {
    this.jsm ??= await jetstreamManager(this.nc, { checkAPI: false, ...(this.domain ? { domain: this.domain } : {}) });
    return this.jsm;
  }
}
