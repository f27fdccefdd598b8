/**
 * What the stages of a link's message path share, below all of them: the facts and events the link
 * hands in, the conditions every stage reads before it works (the destination's facts, a hold, a
 * halt), the pump's scheduler, and the guard item of a claimed entry.
 */
import type { RelayError } from "../../errors.js";
import type { Entry } from "../entry.js";

/** What the pipeline tells its link, so the link can change state; never throws back. */
export interface PipelineEvents {
  /** A destination publish failed and the pipeline rolled back; it retries by itself. */
  publishTrouble(err: RelayError): void;
  /** The guard could not be reached; nothing is published or acked until it can. */
  guardTrouble(err: RelayError): void;
  /** A publish and, with a guard, a commit went through again after trouble. */
  healthy(): void;
  /** A message cannot be handled under the link's policy (`onBadMessage: halt`), or the destination is not the link's. */
  halt(err: RelayError): void;
  /**
   * A PubAck's sequence went backwards: the destination stream was recreated under its name. Publishing
   * is held (and what it stores is not acked) until the link has read the destination again.
   */
  destinationRestarted(detail: string): void;
}

/** What the link read about its destination at start (stream info and the connection's limits). */
export interface DestinationFacts {
  readonly stream: string;
  /** The largest message (headers + payload) the destination takes: min(server max_payload, stream max_msg_size). */
  readonly maxMessageBytes: number;
  /** The stream's duplicate window (ms): broker dedup forgets an id this long after storing it. */
  readonly duplicateWindowMs: number;
  /** The stream allows per-message TTLs (`allow_msg_ttl`, nats-server 2.11+): a copied `Nats-TTL` is kept. */
  readonly allowMsgTtl?: boolean;
}

/** Reads the link's `Relay-Source` markers in the destination (see destination-markers.ts). */
export interface DestinationMarkers {
  /** Source seq → destination seq for the `wanted` source sequences found at or after `fromDestSeq`. */
  findStored(fromDestSeq: number, wanted: ReadonlySet<number>): Promise<ReadonlyMap<number, number>>;
  /** The `Relay-Source` header and payload of the message at `destSeq`, for telling an id collision from a duplicate. */
  storedAt(destSeq: number): Promise<{ readonly source: string; readonly data: Uint8Array } | undefined>;
  /** The destination stream's last sequence now (`to.order: strict` resumes its chain from it). */
  lastSeq(): Promise<number>;
  /** The latest message on `subject` (undefined: none): a KV link's key as the bucket holds it (kv-apply.ts). */
  lastOnSubject?(subject: string): Promise<LastOnSubject | undefined>;
}

/** The latest message on a subject in the destination: its sequence, headers and store time (ns). */
export interface LastOnSubject {
  readonly seq: number;
  readonly headers: { get(name: string): string } | undefined;
  readonly timeNs: bigint;
}

/** Asks for the pump to run: on the next turn (`schedule`), or at a deadline (`scheduleAt`). */
export interface Scheduler {
  schedule(): void;
  /** Arms one timer for the earliest deadline asked for; a later deadline never pushes it back. */
  scheduleAt(until: number): void;
}

/**
 * The fencing token claims and commits carry: the lease revision and its bucket's incarnation; empty
 * without a lease.
 */
export interface FencingTokenOption {
  leaseRevision?: number;
  incarnation?: number;
}

/** The conditions every stage reads before it works; the pipeline, the publish and the PubAck stages set them. */
export class PathState {
  /** What the link read about the destination: claims and publishes wait until it is known. */
  destination: DestinationFacts | undefined;
  /**
   * The destination changed (an advisory, a reconnect, a sequence going backwards) and is being read
   * again: nothing is published, and what gets a PubAck meanwhile waits for the verdict.
   */
  held = false;
  /** The link halted: nothing more is claimed or published (what was published still commits and acks). */
  halted = false;

  constructor(private readonly onHalt: (err: RelayError) => void) {}

  /** Halts the link once: later halts (a stray after a bad message) only record their error. */
  halt(err: RelayError): void {
    if (this.halted) return;
    this.halted = true;
    this.onHalt(err);
  }
}

/** The guard item of a claimed entry; without `withVersion` its entity's version does not move. */
export function claimedItem(e: Entry, withVersion = true) {
  const { id, entity, version } = e.identity;
  const token = e.token ?? "";
  return withVersion ? { id, entity, version, token, key: e.guardKey } : { id, token, key: e.guardKey };
}
