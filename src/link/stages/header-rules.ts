/**
 * The header policy's decisions that depend on the destination or on the link's settings
 * (protocol/header-policy.ts; what is stripped always is left out when the entry is built, entry.ts):
 * `Nats-TTL` goes out only to a stream that allows per-message TTLs, and a subject delete marker is
 * relayed or dropped by `to.deleteMarkers`. Both decisions are counted.
 */
import type { LinkConfig } from "../../config/types.js";
import type { Delivery } from "../../nats/delivery.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import { MARKER_HEADER, TTL_HEADER } from "../../protocol/header-policy.js";
import type { Entry } from "../entry.js";
import type { DestinationFacts } from "./common.js";

export interface HeaderRulesNeeds {
  readonly link: LinkConfig;
  readonly metrics: Pick<RelayMetrics, "headersStripped" | "deleteMarkersDropped">;
}

export class HeaderRules {
  private readonly ttlStripped;
  private readonly markersDropped;
  /** The highest source seq counted as a dropped marker: a redelivery of one is acked again, not counted again. */
  private highestDropped = 0;

  constructor(private readonly needs: HeaderRulesNeeds) {
    this.ttlStripped = needs.metrics.headersStripped.labels({ link: needs.link.name, header: TTL_HEADER });
    this.markersDropped = needs.metrics.deleteMarkersDropped.labels({ link: needs.link.name });
  }

  /**
   * Just before `entry` is published to `dest`: its `Nats-TTL` is removed unless the stream allows
   * message TTLs (a stream without `allow_msg_ttl` refuses the message, err_code 10166; 2.9 and 2.10
   * have no such setting and would store the header for nothing). A dead-letter record never keeps it:
   * a parked message must not expire.
   */
  beforePublish(entry: Entry, dest: Pick<DestinationFacts, "allowMsgTtl">): void {
    if (!entry.ttl) return;
    if (entry.deadLetterReason === undefined && dest.allowMsgTtl) return;
    entry.headers.delete(TTL_HEADER);
    entry.ttl = false;
    this.ttlStripped.inc();
  }

  /**
   * Whether `msg` is a subject delete marker the link drops (`to.deleteMarkers: drop`): the caller acks
   * it at the source, publishes nothing and calls `dropped`.
   */
  dropsMarker(msg: Pick<Delivery, "headers">): boolean {
    if (this.needs.link.to.deleteMarkers !== "drop" || !msg.headers) return false;
    return msg.headers.get(MARKER_HEADER) !== "";
  }

  /** A marker was dropped (acked): counted once per source sequence, not again for a redelivery. */
  dropped(seq: number): void {
    if (seq <= this.highestDropped) return;
    this.highestDropped = seq;
    this.markersDropped.inc();
  }

  /** The source stream was recreated: its sequences start again. */
  reset(): void {
    this.highestDropped = 0;
  }
}
