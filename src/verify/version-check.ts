import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig } from "../config/types.js";
import { identify } from "../link/identity.js";
import type { MessageIdentity } from "../link/identity.js";
import { Column, HashedKeyTable } from "./hash-table.js";
import type { BackwardsExample, SupersededExample } from "./report.js";
import { sourceSubject } from "../link/source-subject.js";
import type { Headers } from "./types.js";

/**
 * The verifier's entity-version checks (links with guard.versions): whether versions went backwards
 * in destination order over this link's copies, and the version the guard held for each entity (from
 * copies of earlier source ranges, of other links into the same stream, and of delivered source
 * messages), which tells a superseded source message from a missing one. Entities are kept as 64-bit
 * hashes (see hash-table.ts) with a few numbers each.
 */

const CHECKED = 1; // entity flag: a copy of this link carried it (the backwards check has a last version)

export class VersionCheck {
  /** Entities checked for going backwards: those a copy of this link carried. */
  entitiesChecked = 0;
  /** Entities whose version went backwards at least once. */
  backEntities = 0;
  /** Decreases seen in all. */
  backEvents = 0;
  readonly backExamples: BackwardsExample[] = [];
  /** Absent source messages whose entity the guard held at their version or newer. */
  superseded = 0;
  readonly supersededExamples: SupersededExample[] = [];
  /** Other links into the same destination stream, by the `<region> <stream> ` prefix of their Relay-Source. */
  private readonly otherSources = new Map<string, LinkConfig>();
  private readonly headerFieldsOnly: boolean;
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

  constructor(
    private readonly link: LinkConfig,
    links: readonly LinkConfig[],
    private readonly limit: number,
  ) {
    for (const l of links) {
      if (l.name === link.name || l.to.region !== link.to.region || l.to.stream !== link.to.stream) continue;
      this.otherSources.set(`${l.from.region} ${l.from.stream} `, l);
    }
    const v = link.guard?.versions;
    this.headerFieldsOnly = v !== undefined && v.entity.kind === "header" && v.version.kind === "header";
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
  notePriorVersion(m: JsMsg, h: Headers, rs: string, fromLink: boolean): void {
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

  noteHeld(entity: string, version: number): void {
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
  checkVersion(m: JsMsg, headers: Headers): void {
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

  /** Absent, and the guard held its entity at this version or newer when the relay came to it: stale. */
  isSuperseded(identity: MessageIdentity, seq: number): boolean {
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
}
