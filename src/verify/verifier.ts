import type { JsMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/nats-core";
import type { LinkConfig } from "../config/types.js";
import { RelayHeaders } from "../link/headers.js";
import { directRoutesFor, identify, route } from "../link/identity.js";
import { SourceIds } from "./derived-ids.js";
import { Column, HashedKeyTable } from "./hash-table.js";
import type { BackwardsExample, VerifyReport } from "./report.js";
import type { ReadResult } from "./stream-reader.js";
import { headersOf } from "../nats/wire-headers.js";
import type { VerifyOptions } from "./verify.js";

const FROM_LINK = 1; // some copy's Relay-Source names this link's source stream
const IN_SOURCE = 2; // the id is a forwardable source message's id
const EXAMPLE = 4; // already among the duplicate examples

/**
 * The state of one verification, fed the destination's messages (`onDest`, in stream order) and then
 * the source's (`onSource`). Ids and entities are kept as 64-bit hashes (see hash-table.ts) with a few
 * bytes of state each; only example ids are kept as strings, at most `examples` of each kind.
 */
export class Verifier {
  private readonly limit: number;
  private readonly sinceMs: number | undefined;
  private readonly directRoutes: ReadonlySet<string>;
  private readonly sourcePrefix: string;
  private readonly sourceIds: SourceIds;
  private readonly ids = new HashedKeyTable();
  private readonly counts = new Column((n) => new Uint32Array(n));
  private readonly flags = new Column((n) => new Uint8Array(n));
  private readonly entities = new HashedKeyTable();
  private readonly lastVersion = new Column((n) => new Float64Array(n));
  private readonly lastSeq = new Column((n) => new Float64Array(n));
  private readonly wentBack = new Column((n) => new Uint8Array(n));
  private readonly dupExamples: string[] = [];
  /** Ids seen twice before any copy named this link: duplicates only if the source has them. Bounded. */
  private readonly dupCandidates: string[] = [];
  private readonly backExamples: BackwardsExample[] = [];
  private readonly missingExamples: { id: string; sourceSeq: number }[] = [];
  private readonly pendingExamples: string[] = [];
  private horizon = 0;
  private destExamined = 0;
  private destFromLink = 0;
  private backEntities = 0;
  private backEvents = 0;
  private sourceExamined = 0;
  private forwardable = 0;
  private notForwarded = 0;
  private bad = 0;
  private missing = 0;
  private notYetRelayed = 0;
  private firstNotYetRelayed: number | undefined;

  /**
   * `incarnation`: the source stream's creation time in ms (the relay puts it into derived ids); source
   * messages are identified with it, and the destination's old-form derived ids are counted under it.
   */
  constructor(
    private readonly link: LinkConfig,
    links: readonly LinkConfig[],
    opts: VerifyOptions,
    incarnation?: number,
  ) {
    this.limit = opts.examples ?? 20;
    this.sinceMs = opts.since?.getTime();
    this.directRoutes = directRoutesFor(link, links);
    this.sourcePrefix = `${link.from.region} ${link.from.stream} `;
    this.sourceIds = new SourceIds(link.from.region, link.from.stream, incarnation);
  }

  onDest(m: JsMsg): void {
    const h = headersOf(m);
    const rawId = h?.get(RelayHeaders.MsgId) ?? "";
    const rs = h?.get(RelayHeaders.Source) ?? "";
    const fromLink = rs.startsWith(this.sourcePrefix);
    if (fromLink) {
      // A marker of an older incarnation of the source names a sequence the current one reuses.
      const seq = Number(rs.slice(this.sourcePrefix.length)) || 0;
      if (seq > this.horizon && !this.sourceIds.olderIncarnation(h?.get(RelayHeaders.SourceTime) ?? "")) this.horizon = seq;
    }
    const early = this.sinceMs !== undefined && m.info.timestampNanos / 1e6 < this.sinceMs;
    if (!early) this.destExamined++;
    if (rawId === "") return;
    const id = this.sourceIds.destinationKey(rawId, h);
    const e = this.ids.put(id);
    this.counts.ensure(e);
    this.flags.ensure(e);
    if (early) return; // present, but outside the window: not counted
    const count = ++this.counts.data[e]!;
    if (fromLink) {
      this.destFromLink++;
      this.flags.data[e]! |= FROM_LINK;
      this.checkVersion(m, h);
    }
    if (count < 2) return;
    const f = this.flags.data[e]!;
    if (f & EXAMPLE) return;
    if (f & FROM_LINK) {
      if (this.dupExamples.length < this.limit) {
        this.dupExamples.push(id);
        this.flags.data[e] = f | EXAMPLE;
      }
    } else if (count === 2 && this.dupCandidates.length < 50 * this.limit) {
      this.dupCandidates.push(id);
    }
  }

  /** Entity versions in destination order, over the messages this link relayed. */
  private checkVersion(m: JsMsg, headers: MsgHdrs | undefined): void {
    if (!this.link.guard?.versions) return;
    const r = identify({ subject: sourceSubject(m.subject, this.link), headers, streamSequence: m.seq }, this.link);
    if (!r.ok || r.identity.entity === undefined || r.identity.version === undefined) return;
    const { entity, version } = r.identity;
    const e = this.entities.put(entity);
    this.lastVersion.ensure(e);
    this.lastSeq.ensure(e);
    this.wentBack.ensure(e);
    if (!this.entities.created && version < this.lastVersion.data[e]!) {
      this.backEvents++;
      if (this.wentBack.data[e] === 0) {
        this.wentBack.data[e] = 1;
        this.backEntities++;
        if (this.backExamples.length < this.limit) {
          this.backExamples.push({ entity, before: this.lastVersion.data[e]!, after: version, beforeSeq: this.lastSeq.data[e]!, afterSeq: m.seq });
        }
      }
    }
    this.lastVersion.data[e] = version;
    this.lastSeq.data[e] = m.seq;
  }

  onSource(m: JsMsg): void {
    this.sourceExamined++;
    const r = identify({ subject: m.subject, headers: headersOf(m), streamSequence: m.seq }, this.link, this.sourceIds.incarnation);
    if (!r.ok) {
      this.bad++;
      return;
    }
    if (!route(r.identity, this.link, this.directRoutes).forward) {
      this.notForwarded++;
      return;
    }
    this.forwardable++;
    const id = r.identity.id;
    if (m.seq > this.horizon) {
      this.notYetRelayed++;
      this.firstNotYetRelayed ??= m.seq;
      if (this.pendingExamples.length < this.limit) this.pendingExamples.push(id);
      return;
    }
    const e = this.ids.get(id);
    if (e < 0) {
      this.missing++;
      if (this.missingExamples.length < this.limit) this.missingExamples.push({ id, sourceSeq: m.seq });
      return;
    }
    this.flags.data[e]! |= IN_SOURCE;
  }

  report(source: ReadResult, dest: ReadResult, elapsedMs: number): VerifyReport {
    let duplicated = 0;
    let extraCopies = 0;
    const counts = this.counts.data;
    const flags = this.flags.data;
    for (let e = 0; e < this.ids.size; e++) {
      const n = counts[e]!;
      if (n > 1 && (flags[e]! & (FROM_LINK | IN_SOURCE)) !== 0) {
        duplicated++;
        extraCopies += n - 1;
      }
    }
    const examples = [...this.dupExamples];
    for (const id of this.dupCandidates) {
      if (examples.length >= this.limit) break;
      const e = this.ids.get(id);
      if (e >= 0 && (flags[e]! & (FROM_LINK | IN_SOURCE)) !== 0 && (flags[e]! & EXAMPLE) === 0) examples.push(id);
    }
    const l = this.link;
    return {
      link: l.name,
      ...(this.sinceMs === undefined ? {} : { since: new Date(this.sinceMs).toISOString() }),
      source: {
        region: l.from.region,
        stream: l.from.stream,
        ...(l.from.filterSubject ? { filter: l.from.filterSubject } : {}),
        streamFirstSeq: source.state.first_seq,
        streamLastSeq: source.state.last_seq,
        ...(this.sourceIds.incarnation === undefined ? {} : { incarnation: this.sourceIds.incarnation }),
        examined: this.sourceExamined,
        forwardable: this.forwardable,
        notForwarded: this.notForwarded,
        bad: this.bad,
      },
      destination: {
        region: l.to.region,
        stream: l.to.stream,
        streamFirstSeq: dest.state.first_seq,
        streamLastSeq: dest.state.last_seq,
        examined: this.destExamined,
        fromLink: this.destFromLink,
        lastRelayedSourceSeq: this.horizon,
        distinctIds: this.ids.size,
        legacyIds: this.sourceIds.legacyIds,
      },
      notYetRelayed: {
        count: this.notYetRelayed,
        ...(this.firstNotYetRelayed === undefined ? {} : { firstSeq: this.firstNotYetRelayed }),
        examples: this.pendingExamples,
      },
      missing: { count: this.missing, examples: this.missingExamples },
      duplicated: { count: duplicated, extraCopies, examples: examples.map((id) => ({ id, copies: counts[this.ids.get(id)]! })) },
      ...(l.guard?.versions
        ? { backwards: { count: this.backEntities, events: this.backEvents, entitiesChecked: this.entities.size, examples: this.backExamples } }
        : {}),
      agree: this.missing === 0 && duplicated === 0 && this.backEntities === 0,
      elapsedMs,
    };
  }
}

/**
 * The source subject a destination subject was made from (the inverse of transformSubject), for
 * `subject-token` entity/version sources: drop `addPrefix`, put back `stripPrefix`. Assumes the source
 * subject carried `stripPrefix`, which a link with a strip prefix is normally filtered to ensure.
 */
export function sourceSubject(subject: string, link: LinkConfig): string {
  const { stripPrefix, addPrefix } = link.to.transform;
  const s = addPrefix && subject.startsWith(addPrefix) ? subject.slice(addPrefix.length) : subject;
  return stripPrefix ? `${stripPrefix}${s}` : s;
}
