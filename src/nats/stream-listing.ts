/**
 * The state of every stream of a source, from one paged stream listing (`$JS.API.STREAM.LIST`) shared by
 * the idle links that read that source in the same poll (backlog-poll.ts): a link at rest whose stream
 * shows what its last reading found needs no consumer-info and stream-info requests of its own. A
 * thousand idle links on one source then cost a listing of a few pages a second, not four hundred
 * requests.
 *
 * One listing per source connection and JetStream domain (`streamListingOf`), kept with the connection
 * (a connection closed and dropped takes it along). Lifecycle: none; a listing that fails is not kept.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";

/** A stream's state as the listing shows it: what changes when anything is stored, removed or consumed from anew. */
export interface ListedStream {
  readonly firstSeq: number;
  readonly lastSeq: number;
  readonly messages: number;
  /** Its consumers (a link's durable deleted or created again changes it). */
  readonly consumers: number;
}

export type ListedStreams = ReadonlyMap<string, ListedStream>;

export class StreamListing {
  private last: { readonly at: number; readonly states: Promise<ListedStreams> } | undefined;

  constructor(
    private readonly jsm: () => Promise<Pick<JetStreamManager, "streams">>,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Every stream's state, from a listing started at most `maxAgeMs` ago (one under way counts), else from
   * a new one. Rejects when the listing fails (the caller reads on its own then).
   */
  states(maxAgeMs: number): Promise<ListedStreams> {
    const now = this.now();
    if (this.last !== undefined && now - this.last.at <= maxAgeMs) return this.last.states;
    const states = this.list();
    const entry = { at: now, states };
    this.last = entry;
    states.catch(() => {
      if (this.last === entry) this.last = undefined;
    });
    return states;
  }

  private async list(): Promise<ListedStreams> {
    const jsm = await this.jsm();
    const out = new Map<string, ListedStream>();
    for await (const si of jsm.streams.list()) {
      const s = si.state;
      out.set(si.config.name, { firstSeq: s.first_seq, lastSeq: s.last_seq, messages: s.messages, consumers: s.consumer_count });
    }
    return out;
  }
}

/** Whether a stream shows what a reading of it found (a stream absent from the listing does not). */
export function unchanged(listed: ListedStream | undefined, seen: ListedStream): boolean {
  return (
    listed !== undefined &&
    listed.firstSeq === seen.firstSeq &&
    listed.lastSeq === seen.lastSeq &&
    listed.messages === seen.messages &&
    listed.consumers === seen.consumers
  );
}

const listings = new WeakMap<NatsConnection, Map<string, StreamListing>>();

/** The listing of `nc`'s streams (in `domain`), shared by every link that reads them. */
export function streamListingOf(nc: NatsConnection, domain: string | undefined): StreamListing {
  let byDomain = listings.get(nc);
  if (byDomain === undefined) {
    byDomain = new Map();
    listings.set(nc, byDomain);
  }
  const key = domain ?? "";
  let listing = byDomain.get(key);
  if (listing === undefined) {
    let jsm: Promise<JetStreamManager> | undefined;
    listing = new StreamListing(() => {
      jsm ??= jetstreamManager(nc, domain ? { domain, checkAPI: false } : { checkAPI: false });
      return jsm;
    });
    byDomain.set(key, listing);
  }
  return listing;
}
