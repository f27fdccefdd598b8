import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";
import { RelayHeaders } from "../protocol/headers.js";
import { directRoutesFor } from "../config/routes.js";
import { identify, route } from "../link/identity.js";
import type { MessageIdentity } from "../link/identity.js";
import { SourceIds } from "./derived-ids.js";
import { Column, HashedKeyTable } from "./hash-table.js";
import type {
  BackwardsExample,
  OutOfOrderExample,
  SourceExample,
  SupersededExample,
  VerifyReport,
} from "./report.js";
import type { ReadResult } from "./stream-reader.js";
import { headersOf } from "../nats/wire-headers.js";
import type { VerifyOptions } from "./verify.js";

const FROM_LINK = 1; // some copy's Relay-Source names this link's source stream
const IN_SOURCE = 2; // the id is a forwardable source message's id
const EXAMPLE = 4; // already among the duplicate examples

const CHECKED = 1; // entity flag: a copy of this link carried it (the backwards check has a last version)

/** Headers as verify reads them (WireHeaders or MsgHdrs). */
type Headers = { get(key: string): string } | undefined;

/** Where the dead-letter records of the link are read from, as verifySides found out. */
export interface DeadLetterSource {
  readonly status: VerifyReport["deadLetter"]["status"];
  readonly subject?: string;
  readonly stream?: string;
  readonly detail?: string;
}

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

/** Per order scope: the highest source seq stored so far and where. */
interface OrderState {
  sourceSeq: number;
  destSeq: number;
}

/**
 * The state of one verification, fed the dead-letter records (`onDeadLetter`), the destination's
 * messages (`onDest`, in stream order) and then the source's (`onSource`, in stream order). Ids and
 * entities are kept as 64-bit hashes (see hash-table.ts) with a few bytes of state each; only example
 * ids are kept as strings, at most `examples` of each kind.
 *
 * Each examined source message is classified by what happened to it: held by the destination, else on
 * the dead-letter stream, else (bad under the current config) unconfirmed, else superseded by a newer
 * version of its entity, else not yet relayed (above the horizon), else missing.
 */
export class Verifier {
  private readonly limit: number;
  private readonly sinceMs: number | undefined;
  private readonly presenceFromMs: number;
  private readonly sourceStartSeq: number;
  private readonly directRoutes: ReadonlySet<string>;
  private readonly sourcePrefix: string;
  private readonly sourceIds: SourceIds;
  private readonly deadLetterIds: SourceIds;
  private deadLetter: DeadLetterSource;
  /** Other links into the same destination stream, by the `<region> <stream> ` prefix of their Relay-Source. */
  private readonly otherSources = new Map<string, LinkConfig>();
  private readonly headerFieldsOnly: boolean;
  private readonly ids = new HashedKeyTable();
  private readonly counts = new Column((n) => new Uint32Array(n));
  private readonly flags = new Column((n) => new Uint8Array(n));
  /** Ids of this link's dead-letter records. */
  private readonly deadLettered = new HashedKeyTable();
  private readonly entities = new HashedKeyTable();
  private readonly entityFlags = new Column((n) => new Uint8Array(n));
  private readonly lastVersion = new Column((n) => new Float64Array(n));
  private readonly lastSeq = new Column((n) => new Float64Array(n));
  private readonly wentBack = new Column((n) => new Uint8Array(n));
  /**
   * The highest version of the entity the guard had applied (+1; 0 = none): from the destination's copies
   * of earlier source ranges and of other links, then, in source order, from each delivered message.
   */
  private readonly held = new Column((n) => new Float64Array(n));
  private readonly dupExamples: string[] = [];
  /** Ids seen twice before any copy named this link: duplicates only if the source has them. Bounded. */
  private readonly dupCandidates: string[] = [];
  private readonly backExamples: BackwardsExample[] = [];
  private readonly missingExamples: SourceExample[] = [];
  private readonly pendingExamples: string[] = [];
  private readonly deadLetteredExamples: SourceExample[] = [];
  private readonly supersededExamples: SupersededExample[] = [];
  private readonly notForwardedExamples: SourceExample[] = [];
  private readonly unconfirmedExamples: SourceExample[] = [];
  private readonly orderExamples: OutOfOrderExample[] = [];
  private readonly linkOrder: OrderState = { sourceSeq: 0, destSeq: 0 };
  private readonly partitionOrder = new Map<string, OrderState>();
  private horizon = 0;
  private destExamined = 0;
  private destFromLink = 0;
  private deadLetterRecords = 0;
  private entitiesChecked = 0;
  private backEntities = 0;
  private backEvents = 0;
  private outOfOrder = 0;
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
  private superseded = 0;
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
    this.directRoutes = directRoutesFor(link, links);
    this.sourcePrefix = `${link.from.region} ${link.from.stream} `;
    this.sourceIds = new SourceIds(link.from.region, link.from.stream, setup.incarnation);
    this.deadLetterIds = new SourceIds(link.from.region, link.from.stream, setup.incarnation);
    this.deadLetter =
      setup.deadLetter ??
      (link.badMessage.action === "halt"
        ? { status: "halt" }
        : { status: "unreadable", subject: link.badMessage.subject, detail: "not read" });
    for (const l of links) {
      if (l.name === link.name || l.to.region !== link.to.region || l.to.stream !== link.to.stream) continue;
      this.otherSources.set(`${l.from.region} ${l.from.stream} `, l);
    }
    const v = link.guard?.versions;
    this.headerFieldsOnly = v !== undefined && v.entity.kind === "header" && v.version.kind === "header";
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
      if (rs !== "") this.notePriorVersion(m, h, rs, fromLink);
      return;
    }
    if (fromLink && seq > this.horizon && !older) this.horizon = seq;
    const early = this.sinceMs !== undefined && stampMs < this.sinceMs;
    if (!early) this.destExamined++;
    if (rs !== "" && (!fromLink || older || seq < this.sourceStartSeq))
      this.notePriorVersion(m, h, rs, fromLink);
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
      this.checkVersion(m, h);
      if (first && !older && seq > 0 && (h?.get(RelayHeaders.Snapshot) ?? "") === "")
        this.checkOrder(m, id, seq);
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

  /**
   * The first copy of a source message, against the copies of this link stored before it: the relay
   * keeps source order over an unpartitioned link, and within each partition of a partitioned one (every
   * subject is in one partition, so this covers per-subject order too). Snapshot copies of a resync and
   * copies of an older incarnation are left out (they restart the order by design).
   */
  private checkOrder(m: JsMsg, id: string, seq: number): void {
    let state = this.linkOrder;
    let partition: string | undefined;
    const p = this.link.partitions;
    if (p) {
      partition = sourceSubject(m.subject, this.link).split(".")[p.token - 1] ?? "";
      state = this.partitionOrder.get(partition) ?? { sourceSeq: 0, destSeq: 0 };
      this.partitionOrder.set(partition, state);
    }
    if (seq >= state.sourceSeq) {
      state.sourceSeq = seq;
      state.destSeq = m.seq;
      return;
    }
    this.outOfOrder++;
    if (this.orderExamples.length < this.limit) {
      this.orderExamples.push({
        id,
        sourceSeq: seq,
        destSeq: m.seq,
        afterSourceSeq: state.sourceSeq,
        afterDestSeq: state.destSeq,
        ...(partition === undefined ? {} : { partition }),
      });
    }
  }

  /** The entity and version of a destination copy, read as the relay read them from its source message. */
  private versionOf(subject: string, h: Headers, from: LinkConfig): MessageIdentity | undefined {
    const r = identify({ subject: sourceSubject(subject, from), headers: h, streamSequence: 0 }, this.link);
    if (!r.ok || r.identity.entity === undefined || r.identity.version === undefined) return undefined;
    return r.identity;
  }

  /**
   * A copy the guard applied before the examined source range, or over another link into the same
   * stream (the guard's versions are per destination stream): its version makes older ones stale.
   */
  private notePriorVersion(m: JsMsg, h: Headers, rs: string, fromLink: boolean): void {
    if (!this.link.guard?.versions) return;
    let from: LinkConfig | undefined = this.link;
    if (!fromLink) {
      from = this.otherSources.get(rs.slice(0, rs.lastIndexOf(" ") + 1));
      // A link this config does not know: its subject transform is unknown, header fields do not need it.
      if (!from && this.headerFieldsOnly) from = this.link;
    }
    const identity = from ? this.versionOf(m.subject, h, from) : undefined;
    if (identity) this.noteHeld(identity.entity!, identity.version!);
  }

  private noteHeld(entity: string, version: number): void {
    const e = this.entities.put(entity);
    this.ensureEntity(e);
    if (version + 1 > this.held.data[e]!) this.held.data[e] = version + 1;
  }

  private ensureEntity(e: number): void {
    this.entityFlags.ensure(e);
    this.lastVersion.ensure(e);
    this.lastSeq.ensure(e);
    this.wentBack.ensure(e);
    this.held.ensure(e);
  }

  /** Entity versions in destination order, over the messages this link relayed. */
  private checkVersion(m: JsMsg, headers: Headers): void {
    if (!this.link.guard?.versions) return;
    const identity = this.versionOf(m.subject, headers, this.link);
    if (!identity) return;
    const entity = identity.entity!;
    const version = identity.version!;
    const e = this.entities.put(entity);
    this.ensureEntity(e);
    if ((this.entityFlags.data[e]! & CHECKED) === 0) {
      this.entityFlags.data[e]! |= CHECKED;
      this.entitiesChecked++;
    } else if (version < this.lastVersion.data[e]!) {
      this.backEvents++;
      if (this.wentBack.data[e] === 0) {
        this.wentBack.data[e] = 1;
        this.backEntities++;
        if (this.backExamples.length < this.limit) {
          this.backExamples.push({
            entity,
            before: this.lastVersion.data[e]!,
            after: version,
            beforeSeq: this.lastSeq.data[e]!,
            afterSeq: m.seq,
          });
        }
      }
    }
    this.lastVersion.data[e] = version;
    this.lastSeq.data[e] = m.seq;
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
      if (entity !== undefined && version !== undefined) this.noteHeld(entity, version);
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
    if (r.ok && this.isSuperseded(r.identity, m.seq)) return;
    if (m.seq > this.horizon) {
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
  }

  /** Absent, and the guard held its entity at this version or newer when the relay came to it: stale. */
  private isSuperseded(identity: MessageIdentity, seq: number): boolean {
    const { entity, version } = identity;
    if (entity === undefined || version === undefined) return false;
    const e = this.entities.get(entity);
    if (e < 0) return false;
    const held = this.held.data[e]! - 1;
    if (held < version) return false;
    this.superseded++;
    if (this.supersededExamples.length < this.limit) {
      this.supersededExamples.push({ id: identity.id, sourceSeq: seq, entity, version, heldVersion: held });
    }
    return true;
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
    const agree = this.missing === 0 && duplicated === 0 && this.outOfOrder === 0 && this.backEntities === 0;
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
        lastRelayedSourceSeq: this.horizon,
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
        count: this.outOfOrder,
        examples: this.orderExamples,
      },
      ...(versions
        ? {
            backwards: {
              count: this.backEntities,
              events: this.backEvents,
              entitiesChecked: this.entitiesChecked,
              examples: this.backExamples,
            },
          }
        : {}),
      deadLettered: { count: this.deadLetteredCount, examples: this.deadLetteredExamples },
      ...(versions ? { superseded: { count: this.superseded, examples: this.supersededExamples } } : {}),
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
          outOfOrder: this.outOfOrder,
          versionsBackwards: this.backEntities,
        },
        expected: {
          notYetRelayed: this.notYetRelayed,
          deadLettered: this.deadLetteredCount,
          superseded: this.superseded,
          notForwarded: this.notForwarded,
          badNotConfirmed: this.unconfirmed,
        },
      },
      agree,
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
