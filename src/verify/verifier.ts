import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";
import { RelayHeaders } from "../protocol/headers.js";
import { directRoutesFor } from "../config/routes.js";
import { identify, route } from "../link/identity.js";
import type { MessageIdentity } from "../link/identity.js";
import { SourceIds } from "../link/derived-ids.js";
import { Column, HashedKeyTable } from "./hash-table.js";
import { OrderCheck } from "./order-check.js";
import type { SourceExample, VerifyReport } from "./report.js";
import { sourceSubject } from "../link/source-subject.js";
import type { ReadResult } from "../nats/stream-reader.js";
import type { DeadLetterSource, Headers, VerifyOptions } from "./types.js";
import { VersionCheck } from "./version-check.js";
import { headersOf } from "../nats/wire-headers.js";

const FROM_LINK = 1; // some copy's Relay-Source names this link's source stream
const IN_SOURCE = 2; // the id is a forwardable source message's id
const EXAMPLE = 4; // already among the duplicate examples

export interface VerifierSetup {
  /**
   * The source stream's creation time in ms (the relay puts it into derived ids); source messages are
   * identified with it, and the destination's old-form derived ids are counted under it.
   */
  readonly incarnation?: number;
  /**
   * The first source sequence the verify examines: copies of this link from before it carry versions
   * the guard knew before the examined range (default 1).
   */
  readonly sourceStartSeq?: number;
  /** Destination messages stored before this (ms) only carry entity versions: not examined, not present. */
  readonly presenceFromMs?: number;
  readonly deadLetter?: DeadLetterSource;
}

/**
 * The state of one verification, fed the dead-letter records (`onDeadLetter`), the destination's
 * messages (`onDest`, in stream order) and then the source's (`onSource`, in stream order). Ids and
 * entities are kept as 64-bit hashes (see hash-table.ts) with a few bytes of state each; only example
 * ids are kept as strings, at most `examples` of each kind.
 *
 * Each examined source message is classified by what happened to it: held by the destination, else on
 * the dead-letter stream, else (bad under the current config) unconfirmed, else superseded by a newer
 * version of its entity, else not yet relayed (above the horizon), else missing. The horizon is the
 * highest source sequence the destination holds a copy of this link for; on a partitioned link, each
 * partition has its own (its own relay, durable and cursor deliver it): a partition that is behind is
 * not yet relayed there, not missing.
 *
 * The order of the destination's copies is checked by OrderCheck (order-check.ts), entity versions
 * (backwards, superseded) by VersionCheck (version-check.ts).
 */
export class Verifier {
  private readonly limit: number;
  private readonly sinceMs: number | undefined;
  private readonly presenceFromMs: number;
  private readonly sourceStartSeq: number;
  private readonly onMissing: VerifyOptions["onMissing"];
  private readonly directRoutes: ReadonlySet<string>;
  private readonly sourcePrefix: string;
  private readonly sourceIds: SourceIds;
  private readonly deadLetterIds: SourceIds;
  private deadLetter: DeadLetterSource;
  private readonly order: OrderCheck;
  private readonly versions: VersionCheck;
  private readonly ids = new HashedKeyTable();
  private readonly counts = new Column((n) => new Uint32Array(n));
  private readonly flags = new Column((n) => new Uint8Array(n));
  /** Ids of this link's dead-letter records. */
  private readonly deadLettered = new HashedKeyTable();
  private readonly dupExamples: string[] = [];
  /** Ids seen twice before any copy named this link: duplicates only if the source has them. Bounded. */
  private readonly dupCandidates: string[] = [];
  private readonly missingExamples: SourceExample[] = [];
  private readonly pendingExamples: string[] = [];
  private readonly deadLetteredExamples: SourceExample[] = [];
  private readonly notForwardedExamples: SourceExample[] = [];
  private readonly unconfirmedExamples: SourceExample[] = [];
  private horizon = 0;
  /** Partitioned links: per partition (its token in the source subject), the highest source seq held. */
  private readonly partitionHorizons = new Map<string, number>();
  private destExamined = 0;
  private destFromLink = 0;
  private destRepaired = 0;
  private deadLetterRecords = 0;
  private sourceExamined = 0;
  private forwardable = 0;
  private notForwarded = 0;
  private loop = 0;
  private maxHops = 0;
  private directRoute = 0;
  private bad = 0;
  private badButPresent = 0;
  private delivered = 0;
  private deadLetteredCount = 0;
  private unconfirmed = 0;
  private missing = 0;
  private notYetRelayed = 0;
  private firstNotYetRelayed: number | undefined;

  constructor(
    private readonly link: LinkConfig,
    links: readonly LinkConfig[],
    opts: VerifyOptions,
    setup: VerifierSetup = {},
  ) {
    this.limit = opts.examples ?? 20;
    this.sinceMs = opts.since?.getTime();
    this.presenceFromMs = setup.presenceFromMs ?? -Infinity;
    this.sourceStartSeq = setup.sourceStartSeq ?? 1;
    this.onMissing = opts.onMissing;
    this.directRoutes = directRoutesFor(link, links);
    this.sourcePrefix = `${link.from.region} ${link.from.stream} `;
    this.sourceIds = new SourceIds(link.from.region, link.from.stream, setup.incarnation);
    this.deadLetterIds = new SourceIds(link.from.region, link.from.stream, setup.incarnation);
    this.deadLetter =
      setup.deadLetter ??
      (link.badMessage.action === "halt"
        ? { status: "halt" }
        : { status: "unreadable", subject: link.badMessage.subject, detail: "not read" });
    this.order = new OrderCheck(link, this.limit);
    this.versions = new VersionCheck(link, links, this.limit);
  }

  /** The dead-letter stream could not be read (to its end): dead-lettering is not confirmed beyond what was read. */
  deadLetterUnreadable(detail: string): void {
    this.deadLetter = { ...this.deadLetter, status: "unreadable", detail };
  }

  /** A message of the stream capturing the dead-letter subject (only that subject is read). */
  onDeadLetter(m: JsMsg): void {
    this.noteDeadLetter(headersOf(m));
  }

  private noteDeadLetter(h: Headers): void {
    const by = h?.get(RelayHeaders.DeadLetterLink) ?? "";
    if (by !== this.link.name && !by.startsWith(`${this.link.name}/p`)) return;
    if (!(h?.get(RelayHeaders.Source) ?? "").startsWith(this.sourcePrefix)) return;
    if (this.sourceIds.olderIncarnation(h?.get(RelayHeaders.SourceTime) ?? "")) return;
    const rawId = h?.get(RelayHeaders.MsgId) ?? "";
    if (rawId === "") return;
    this.deadLetterRecords++;
    this.deadLettered.put(this.deadLetterIds.destinationKey(rawId, h));
  }

  onDest(m: JsMsg): void {
    const h = headersOf(m);
    const stampMs = m.info.timestampNanos / 1e6;
    const dl = this.deadLetter;
    if (dl.status === "read" && dl.stream === this.link.to.stream && m.subject === dl.subject) {
      this.noteDeadLetter(h); // the destination stream captures the dead-letter subject itself
      return;
    }
    const rs = h?.get(RelayHeaders.Source) ?? "";
    const fromLink = rs.startsWith(this.sourcePrefix);
    let seq = 0;
    let older = false;
    if (fromLink) {
      seq = Number(rs.slice(this.sourcePrefix.length)) || 0;
      // A marker of an older incarnation of the source names a sequence the current one reuses.
      older = this.sourceIds.olderIncarnation(h?.get(RelayHeaders.SourceTime) ?? "");
    }
    if (stampMs < this.presenceFromMs) {
      // Read only for the versions the guard knew before the window (with --since and guard.versions).
      if (rs !== "") this.versions.notePriorVersion(m, h, rs, fromLink);
      return;
    }
    if (fromLink && !older) {
      if (seq > this.horizon) this.horizon = seq;
      if (this.link.partitions) {
        const p = this.partitionOfCopy(m.subject, h);
        if (seq > (this.partitionHorizons.get(p) ?? 0)) this.partitionHorizons.set(p, seq);
      }
    }
    const early = this.sinceMs !== undefined && stampMs < this.sinceMs;
    if (!early) this.destExamined++;
    if (rs !== "" && (!fromLink || older || seq < this.sourceStartSeq))
      this.versions.notePriorVersion(m, h, rs, fromLink);
    const rawId = h?.get(RelayHeaders.MsgId) ?? "";
    if (rawId === "") return;
    const id = this.sourceIds.destinationKey(rawId, h);
    const e = this.ids.put(id);
    const first = this.ids.created;
    this.counts.ensure(e);
    this.flags.ensure(e);
    if (early) return; // present, but outside the window: not counted
    const count = ++this.counts.data[e]!;
    if (fromLink) {
      this.destFromLink++;
      this.flags.data[e]! |= FROM_LINK;
      this.versions.checkVersion(m, h);
      // Copies `repair` put back were appended after later messages by design: not an order break.
      const repaired = (h?.get(RelayHeaders.Repair) ?? "") !== "";
      if (repaired) this.destRepaired++;
      if (first && !older && seq > 0 && !repaired && (h?.get(RelayHeaders.Snapshot) ?? "") === "")
        this.order.check(m, id, seq);
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

  onSource(m: JsMsg): void {
    this.sourceExamined++;
    const r = identify(
      { subject: m.subject, headers: headersOf(m), streamSequence: m.seq },
      this.link,
      this.sourceIds.incarnation,
    );
    if (r.ok) {
      const decision = route(r.identity, this.link, this.directRoutes);
      if (!decision.forward) {
        this.countNotForwarded(r.identity, m.seq);
        return;
      }
    }
    const id = r.ok ? r.identity.id : r.id;
    const e = this.ids.get(id);
    if (e >= 0) {
      // What the destination holds was delivered, whatever the current config would call it.
      this.flags.data[e]! |= IN_SOURCE;
      this.delivered++;
      if (!r.ok) {
        this.badButPresent++;
        return;
      }
      this.forwardable++;
      const { entity, version } = r.identity;
      if (entity !== undefined && version !== undefined) this.versions.noteHeld(entity, version);
      return;
    }
    if (r.ok) this.forwardable++;
    else this.bad++;
    if (this.deadLettered.get(id) >= 0) {
      this.deadLetteredCount++;
      if (this.deadLetteredExamples.length < this.limit)
        this.deadLetteredExamples.push({ id, sourceSeq: m.seq });
      return;
    }
    if (r.ok && this.versions.isSuperseded(r.identity, m.seq)) return;
    if (m.seq > this.horizonOf(m.subject)) {
      this.notYetRelayed++;
      this.firstNotYetRelayed ??= m.seq;
      if (this.pendingExamples.length < this.limit) this.pendingExamples.push(id);
      return;
    }
    if (!r.ok) {
      this.unconfirmed++;
      if (this.unconfirmedExamples.length < this.limit)
        this.unconfirmedExamples.push({ id, sourceSeq: m.seq });
      return;
    }
    this.missing++;
    if (this.missingExamples.length < this.limit) this.missingExamples.push({ id, sourceSeq: m.seq });
    this.onMissing?.({ id, sourceSeq: m.seq });
  }

  /** The partition of a copy of this link: its Relay-Link (`<link>/p<i>`), else its subject's token. */
  private partitionOfCopy(subject: string, h: Headers): string {
    const by = h?.get(RelayHeaders.Link) ?? "";
    const prefix = `${this.link.name}/p`;
    if (by.startsWith(prefix)) return by.slice(prefix.length);
    return this.partitionOf(sourceSubject(subject, this.link));
  }

  /** The partition of a source subject (its partition token), as the partitions' filters split them. */
  private partitionOf(subject: string): string {
    const token = this.link.partitions?.token ?? 0;
    return subject.split(".")[token - 1] ?? "";
  }

  /** The horizon a source message on `subject` is judged by: its partition's on a partitioned link. */
  private horizonOf(subject: string): number {
    if (!this.link.partitions) return this.horizon;
    return this.partitionHorizons.get(this.partitionOf(subject)) ?? 0;
  }

  /** route() said no; the reason is recomputed here in route()'s order, as a count per kind. */
  private countNotForwarded(identity: MessageIdentity, seq: number): void {
    this.notForwarded++;
    const dest = this.link.to.region;
    if (identity.origin === dest || identity.path.includes(dest)) this.loop++;
    else if (identity.path.length > this.link.maxHops) this.maxHops++;
    else this.directRoute++;
    if (this.notForwardedExamples.length < this.limit)
      this.notForwardedExamples.push({ id: identity.id, sourceSeq: seq });
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
      if (e >= 0 && (flags[e]! & (FROM_LINK | IN_SOURCE)) !== 0 && (flags[e]! & EXAMPLE) === 0)
        examples.push(id);
    }
    const l = this.link;
    const versions = l.guard?.versions !== undefined;
    const dl = this.deadLetter;
    const o = this.order;
    const vc = this.versions;
    const agree = this.missing === 0 && duplicated === 0 && o.count === 0 && vc.backEntities === 0;
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
        badButPresent: this.badButPresent,
      },
      destination: {
        region: l.to.region,
        stream: l.to.stream,
        streamFirstSeq: dest.state.first_seq,
        streamLastSeq: dest.state.last_seq,
        examined: this.destExamined,
        fromLink: this.destFromLink,
        ...(this.destRepaired > 0 ? { repaired: this.destRepaired } : {}),
        lastRelayedSourceSeq: this.horizon,
        ...(l.partitions
          ? {
              lastRelayedSourceSeqByPartition: Object.fromEntries(
                [...this.partitionHorizons].sort(([a], [b]) => Number(a) - Number(b) || a.localeCompare(b)),
              ),
            }
          : {}),
        distinctIds: this.ids.size,
        legacyIds: this.sourceIds.legacyIds,
      },
      deadLetter: {
        status: dl.status,
        ...(dl.subject === undefined ? {} : { subject: dl.subject }),
        ...(dl.stream === undefined ? {} : { stream: dl.stream }),
        records: this.deadLetterRecords,
        ...(dl.detail === undefined ? {} : { detail: dl.detail }),
      },
      delivered: { count: this.delivered },
      notYetRelayed: {
        count: this.notYetRelayed,
        ...(this.firstNotYetRelayed === undefined ? {} : { firstSeq: this.firstNotYetRelayed }),
        examples: this.pendingExamples,
      },
      missing: { count: this.missing, examples: this.missingExamples },
      duplicated: {
        count: duplicated,
        extraCopies,
        examples: examples.map((id) => ({ id, copies: counts[this.ids.get(id)]! })),
      },
      outOfOrder: {
        scope: l.partitions ? "partition" : "link",
        count: o.count,
        examples: o.examples,
      },
      ...(versions
        ? {
            backwards: {
              count: vc.backEntities,
              events: vc.backEvents,
              entitiesChecked: vc.entitiesChecked,
              examples: vc.backExamples,
            },
          }
        : {}),
      deadLettered: { count: this.deadLetteredCount, examples: this.deadLetteredExamples },
      ...(versions ? { superseded: { count: vc.superseded, examples: vc.supersededExamples } } : {}),
      notForwarded: {
        count: this.notForwarded,
        loop: this.loop,
        maxHops: this.maxHops,
        directRoute: this.directRoute,
        examples: this.notForwardedExamples,
      },
      badNotConfirmed: { count: this.unconfirmed, examples: this.unconfirmedExamples },
      differences: {
        unexpected: {
          missing: this.missing,
          duplicated,
          outOfOrder: o.count,
          versionsBackwards: vc.backEntities,
        },
        expected: {
          notYetRelayed: this.notYetRelayed,
          deadLettered: this.deadLetteredCount,
          superseded: vc.superseded,
          notForwarded: this.notForwarded,
          badNotConfirmed: this.unconfirmed,
        },
      },
      agree,
      elapsedMs,
    };
  }
}
