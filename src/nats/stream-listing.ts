/**
 * The state of every stream of a source, from one paged stream listing (`$JS.API.STREAM.LIST`) shared by
 * the idle links that read that source in the same poll (backlog-poll.ts): a link at rest whose stream
 * shows what its last reading found needs no consumer-info and stream-info requests of its own. A
 * thousand idle links on one source then cost a listing of a few pages a second, not four hundred
 * requests.
 *
 * A listing pages through every stream of the account, the link's or not: it is worth it only while
 * the links sharing it are not far fewer than the streams. A listing that finds more than
 * STREAMS_PER_LINK streams for each link that joined it answers nothing (the links read on their own)
 * for LARGE_RECHECK_MS, then is tried again.
 *
 * One listing per source connection and JetStream domain (`StreamListings`, the relay's), kept with the
 * connection (a connection closed and dropped takes it along). Lifecycle: `join()` per link, its returned leave;
 * a listing that fails is not kept.
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

/** Streams a listing may hold per link that uses it (more, and the links read on their own). */
export const STREAMS_PER_LINK = 2;
/** How long a listing found too large for its links is not taken (ms). */
export const LARGE_RECHECK_MS = 60_000;

export class StreamListing {
  private last: { readonly at: number; readonly states: Promise<ListedStreams | undefined> } | undefined;
  /** Links using the listing (see `join`). */
  private users = 0;
  /** Until when (this clock) the listing is too large for its links: nothing is listed. */
  private largeUntil: number | undefined;

  constructor(
    private readonly jsm: () => Promise<Pick<JetStreamManager, "streams">>,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** A link uses the listing until the returned function is called. */
  join(): () => void {
    this.users++;
    let left = false;
    return () => {
      if (!left) this.users--;
      left = true;
    };
  }

  /**
   * Every stream's state, from a listing started at most `maxAgeMs` ago (one under way counts), else from
   * a new one; undefined while the listing is too large for the links that use it. Rejects when the
   * listing fails (the caller reads on its own then).
   */
  states(maxAgeMs: number): Promise<ListedStreams | undefined> {
    const now = this.now();
    if (this.largeUntil !== undefined && now < this.largeUntil) return NOTHING;
    if (this.last !== undefined && now - this.last.at <= maxAgeMs) return this.last.states;
    const states = this.list();
    const entry = { at: now, states };
    this.last = entry;
    states.catch(() => {
      if (this.last === entry) this.last = undefined;
    });
    return states;
  }

  private async list(): Promise<ListedStreams | undefined> {
    const jsm = await this.jsm();
    const out = new Map<string, ListedStream>();
    const most = Math.max(1, this.users) * STREAMS_PER_LINK;
    for await (const si of jsm.streams.list()) {
      const s = si.state;
      out.set(si.config.name, {
        firstSeq: s.first_seq,
        lastSeq: s.last_seq,
        messages: s.messages,
        consumers: s.consumer_count,
      });
      if (out.size > most) {
        // Pages of other streams for a few links: each reads on its own for a while.
        this.largeUntil = this.now() + LARGE_RECHECK_MS;
        return undefined;
      }
    }
    this.largeUntil = undefined;
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

const NOTHING: Promise<undefined> = Promise.resolve(undefined);

/**
 * The listings of one relay's source connections, one per connection and JetStream domain, shared by
 * every link that reads them (the relay owns it and passes it to its links; a connection closed and
 * dropped takes its listings along).
 */
export class StreamListings {
  private readonly listings = new WeakMap<NatsConnection, Map<string, StreamListing>>();

  /** The listing of `nc`'s streams (in `domain`). */
  of(nc: NatsConnection, domain: string | undefined): StreamListing {
    let byDomain = this.listings.get(nc);
    if (byDomain === undefined) {
      byDomain = new Map();
      this.listings.set(nc, byDomain);
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
}
