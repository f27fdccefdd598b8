import type { StreamInfo } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/nats-core";
import { parseNanos, RelayHeaders } from "../protocol/headers.js";
import { derivedId } from "./identity.js";

/** The creation time of a stream in ms since the epoch, its incarnation; undefined if the server did not say. */
export function incarnationOf(info: StreamInfo): number | undefined {
  const ms = Date.parse(info.created);
  return Number.isNaN(ms) ? undefined : ms;
}

/** A stream sequence as the relay writes it into an id: no sign, no leading zero, a safe integer. */
const SEQ_RE = /^[1-9]\d{0,15}$/;

/**
 * The link's source stream as `verify` compares ids across the upgrade that put the incarnation into
 * derived ids (`<region>:<stream>:<seq>` became `<region>:<stream>:<incarnation>:<seq>`, see
 * identify()). Copies a relay wrote before the upgrade keep the old form in the destination; turning
 * them into the new form as they are read costs a short-lived string each, where keeping both forms of
 * every id in the hashed table would double its memory and count a message held once in each form as
 * held once in neither.
 */
export class SourceIds {
  private readonly legacyPrefix: string;
  /** The incarnation as the relay writes Relay-Source-Time (fixed width, nanoseconds): compares as text. */
  private readonly cutoff: string;
  /** Destination ids read in the old form and counted under the new one. */
  legacyIds = 0;

  /** `incarnation`: the source stream's creation time (ms); undefined leaves ids and markers as they are. */
  constructor(
    private readonly region: string,
    private readonly stream: string,
    readonly incarnation: number | undefined,
  ) {
    this.legacyPrefix = `${region}:${stream}:`;
    this.cutoff = incarnation === undefined ? "" : `${new Date(incarnation).toISOString().slice(0, 23)}000000Z`;
  }

  /**
   * Whether `sourceTime` (a Relay-Source-Time) is readable and earlier than the incarnation: the copy was
   * made from an older incarnation of the source stream, deleted and recreated since, whose sequences
   * the current one reuses. An absent or unreadable time is not earlier (verify then reads the copy as
   * it did before incarnations).
   */
  olderIncarnation(sourceTime: string): boolean {
    if (this.incarnation === undefined || sourceTime === "") return false;
    // Most copies are later; the relay's fixed-width format says so without parsing (~1 µs a message).
    if (sourceTime.length === this.cutoff.length && sourceTime >= this.cutoff) return false;
    const nanos = parseNanos(sourceTime);
    return nanos !== undefined && Number(nanos / 1_000n) / 1_000 < this.incarnation;
  }

  /**
   * The id a destination copy is counted under: an old-form derived id of this source, on a copy not
   * made from an older incarnation, becomes the id the source message has now; any other id is itself.
   */
  destinationKey(id: string, headers: Pick<MsgHdrs, "get"> | undefined): string {
    if (this.incarnation === undefined || !id.startsWith(this.legacyPrefix)) return id;
    const seq = id.slice(this.legacyPrefix.length);
    if (!SEQ_RE.test(seq) || !Number.isSafeInteger(Number(seq))) return id;
    if (this.olderIncarnation(headers?.get(RelayHeaders.SourceTime) ?? "")) return id;
    this.legacyIds++;
    return derivedId(this.region, this.stream, Number(seq), this.incarnation);
  }
}
