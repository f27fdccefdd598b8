/**
 * The link's source stream as last read: its incarnation (creation time, carried by derived ids and
 * destination markers), the source as markers name it, and what it says of its message sizes.
 */
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { LinkConfig } from "../config/types.js";
import type { SourceRef } from "../nats/destination-markers.js";
import { transformPattern } from "../protocol/subjects.js";

export interface SourceStreamDeps {
  readonly config: LinkConfig;
  readonly logger: Logger;
  /** The largest payload the source connection's server allows (when it said). */
  maxPayload(): number | undefined;
  /** Every read: the incarnation the pipeline derives ids with. */
  incarnation(createdMs: number | undefined): void;
  /** The stream was deleted and recreated under the same name: it restarts at seq 1. */
  recreated(): void;
}

export class SourceStream {
  private current: StreamInfo | undefined;

  constructor(private readonly deps: SourceStreamDeps) {}

  /** The stream as last read (undefined before the first read). */
  get info(): StreamInfo | undefined {
    return this.current;
  }

  /**
   * Reads the source stream. Its creation time is its incarnation: a stream deleted and recreated under
   * the same name restarts at seq 1, so derived ids and destination markers carry it, and gap tracking
   * starts over.
   */
  async read(jsm: JetStreamManager): Promise<void> {
    const info = await jsm.streams.info(this.deps.config.from.stream);
    const before = this.current ? createdMs(this.current) : undefined;
    this.current = info;
    const now = createdMs(info);
    this.deps.incarnation(now);
    if (before !== undefined && now !== before) {
      this.deps.logger.warn({ stream: info.config.name, created: info.created }, "the source stream was recreated: a new incarnation starts at seq 1");
      this.deps.recreated();
    }
  }

  ref(): SourceRef {
    return markerSource(this.deps.config, this.current);
  }

  /** What the source says of its message sizes: the average it holds, and the largest it allows. */
  sizes(): { avgMessageBytes?: number; maxMessageBytes?: number } {
    const state = this.current?.state;
    const maxMsgSize = this.current?.config.max_msg_size ?? -1;
    const largest = maxMsgSize > 0 ? maxMsgSize : this.deps.maxPayload();
    return {
      ...(state && state.messages > 0 ? { avgMessageBytes: state.bytes / state.messages } : {}),
      ...(largest !== undefined ? { maxMessageBytes: largest } : {}),
    };
  }
}

/** The link's source as its markers in the destination name it (`check --live` reads them by the same rule). */
export function markerSource(config: LinkConfig, info: StreamInfo | undefined): SourceRef {
  const created = info ? createdMs(info) : undefined;
  const filter = config.from.filterSubject;
  return {
    region: config.from.region,
    stream: config.from.stream,
    ...(created !== undefined ? { createdMs: created } : {}),
    // A filtered link (or a partition) counts only its own subjects' markers.
    ...(filter !== undefined ? { subjects: transformPattern(filter, config.to.transform) } : {}),
  };
}

/** A stream's creation time in ms since the epoch (its incarnation); undefined if the server did not say. */
function createdMs(info: StreamInfo): number | undefined {
  const ms = Date.parse(info.created);
  return Number.isNaN(ms) ? undefined : ms;
}
