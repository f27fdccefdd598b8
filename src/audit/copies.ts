/**
 * A destination message as the audit reads it: whether it is a copy the link (or this partition of it)
 * made of the current incarnation of its source stream, and of which source sequence. The record is the
 * relay's own `Relay-Source: <region> <stream> <seq>` marker with `Relay-Link` (whose marker) and
 * `Relay-Source-Time` (a copy of an older incarnation, whose sequences the current one reuses, is not
 * the link's).
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";
import { SourceIds } from "../link/derived-ids.js";
import { identify } from "../link/identity.js";
import { sourceSubject } from "../link/source-subject.js";
import { headersOf } from "../nats/wire-headers.js";
import { RelayHeaders } from "../protocol/headers.js";

export interface Copy {
  readonly sourceSeq: number;
  readonly destSeq: number;
  readonly id: string;
  /** Put back by a repair (appended after later messages by design: not an order break). */
  readonly late: boolean;
  readonly entity?: string;
  readonly version?: number;
}

export class CopyReader {
  private readonly prefix: string;
  private readonly ids: SourceIds;

  constructor(
    private readonly link: LinkConfig,
    incarnation: number | undefined,
  ) {
    this.prefix = `${link.from.region} ${link.from.stream} `;
    this.ids = new SourceIds(link.from.region, link.from.stream, incarnation);
  }

  /** The copy `m` is, when it is one of this link's (unit's) of the current source incarnation. */
  read(m: JsMsg, destSeq: number): Copy | undefined {
    const h = headersOf(m);
    if (!h) return undefined;
    const rs = h.get(RelayHeaders.Source);
    if (!rs.startsWith(this.prefix)) return undefined;
    const by = h.get(RelayHeaders.Link);
    if (by !== "" && by !== this.link.name) return undefined;
    if (this.ids.olderIncarnation(h.get(RelayHeaders.SourceTime))) return undefined;
    const sourceSeq = Number(rs.slice(this.prefix.length));
    if (!Number.isSafeInteger(sourceSeq) || sourceSeq < 1) return undefined;
    const id = this.ids.destinationKey(h.get(RelayHeaders.MsgId), h);
    const late = h.get(RelayHeaders.Repair) !== "" || h.get(RelayHeaders.Snapshot) !== "";
    if (!this.link.guard?.versions) return { sourceSeq, destSeq, id, late };
    const r = identify({ subject: sourceSubject(m.subject, this.link), headers: h, streamSequence: 0 }, this.link);
    const entity = r.ok ? r.identity.entity : undefined;
    const version = r.ok ? r.identity.version : undefined;
    return {
      sourceSeq,
      destSeq,
      id,
      late,
      ...(entity !== undefined && version !== undefined ? { entity, version } : {}),
    };
  }
}
