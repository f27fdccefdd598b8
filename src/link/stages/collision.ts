/**
 * Id-collision forensics. A duplicate answer names the stored message's sequence. When that message
 * came from another source position and holds another payload, two different messages share an id:
 * the second is not stored, and that must not be silent (`relay_id_collisions_total`, an error log).
 */
import type { Logger } from "pino";
import { toRelayError } from "../../errors.js";
import type { RelayMetrics } from "../../observability/metrics.js";
import { RelayHeaders } from "../../protocol/headers.js";
import type { Entry } from "../entry.js";
import type { DestinationMarkers } from "./common.js";

export interface CollisionNeeds {
  readonly link: string;
  readonly markers: Pick<DestinationMarkers, "storedAt">;
  readonly metrics: Pick<RelayMetrics, "idCollisions">;
  readonly logger: Logger;
}

export class CollisionCheck {
  private readonly label: { link: string };

  constructor(private readonly needs: CollisionNeeds) {
    this.label = { link: needs.link };
  }

  /** `entry` got a duplicate answer naming `destSeq`: reads the stored copy and compares (in the background). */
  check(entry: Entry, destSeq: number): void {
    if (entry.deadLetterReason !== undefined) return;
    const ours = entry.headers.get(RelayHeaders.Source) ?? "";
    const data = entry.data;
    this.needs.markers
      .storedAt(destSeq)
      .then((stored) => {
        if (!stored || stored.source === ours || Buffer.compare(Buffer.from(stored.data), Buffer.from(data)) === 0) return;
        this.needs.metrics.idCollisions.inc(this.label);
        this.needs.logger.error(
          { id: entry.identity.id, source: ours, storedSource: stored.source, destSeq },
          "id collision: the destination holds a different message under this Nats-Msg-Id; this one was not stored",
        );
      })
      .catch((err: unknown) => this.needs.logger.debug({ err: toRelayError(err).message, destSeq }, "could not read a duplicate's stored copy"));
  }
}
