import type { KV, KvEntry } from "@nats-io/kv";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import { deleteKeyWithNote } from "./bucket.js";
import { isCasConflict } from "./lease-value.js";
import { MemberSession, memberKeyOf } from "./member-session.js";

/** How a judge proved a session over without evicting it (`relay_group_sessions_over_total{proof}`). */
export type SessionProof = "new_session" | "ended_marker" | "key_deleted" | "key_written" | "key_absent";

/**
 * The body of a member key's delete marker that proves a session over: written by an eviction (a CAS
 * delete after the session's last write was unchanged for its lease) or by the member itself as it
 * stops (after its session ended in its own process). A plain delete has no body.
 */
export interface EndedNote {
  readonly ended: { readonly id: string; readonly session: number };
}

/**
 * A contender's judgement of another member's session (member-session.ts), for a lease whose key says
 * it is held in member mode under that session. The session is over, and the lease may be taken (by
 * CAS on the lease key, as always), only on proof that its member's deadline has passed or that the
 * member ended it itself:
 *
 * - the member key holds a later session of the same member: it begins one only after its own chain
 *   was refused and it stopped using the old one; or
 * - this member evicted it: a delete of the member key by CAS on a revision it has seen unchanged, by
 *   its own clock since it first received it, for the lease that member stored. The owner's last
 *   successful write was sent before that revision was received, so its deadline has passed; any later
 *   write of its chain would have failed the CAS. Its delete marker names the session it ended, so
 *   another member's eviction proves the same to every judge (as does the marker the member itself
 *   writes as it stops, after its session ended in its own process); or
 * - the chain was broken by another write (an operator's delete or purge, a write that is not the
 *   member's, the key gone altogether) and this member has seen that state unchanged, by its own clock
 *   since it first received it, for the lease the member stored. A delete proves no more than a CAS
 *   eviction would: the member writes until its next write is refused, and stops at its own deadline.
 *
 * A read that cannot prove it (an older revision from a replica behind, a fresh revision) says "not
 * over": a contender waits, it never guesses. Revisions are first seen through the group's membership
 * reads and watch (`saw`), so a member that stops renewing is evicted about its lease after its last
 * write, not its lease after a contender first asks. Everything judged by a revision is of one bucket
 * incarnation (`attach`): a bucket deleted and created again restarts its revisions at 1, and what was
 * seen or proven of the old one is forgotten.
 */
export class SessionJudge {
  /** member key → the newest revision seen, the local time it was first seen (own monotonic clock), and whether it is a write (not a delete). */
  private readonly observed = new Map<string, { readonly revision: number; readonly at: number; readonly put: boolean }>();
  /** member key → every session of that member up to this one is over. */
  private readonly over = new Map<string, number>();
  /** member key → when this member first read it absent (no message at all: purged), own clock. */
  private readonly absentSince = new Map<string, number>();
  /** member key → the longest `group.lease` that member stored (its key's writes, its lease values). */
  private readonly leases = new Map<string, number>();
  private readonly pending = new Map<string, Promise<boolean>>();
  private kv: KV | undefined;
  /** The incarnation (creation time) of the attached bucket: what the revisions above are of. */
  private incarnation: number | undefined;
  /** Counts the incarnations attached: a judgement begun under another one proves nothing. */
  private generation = 0;

  constructor(
    private readonly opts: {
      readonly leaseMs: number;
      readonly now: () => number;
      readonly logger: Logger;
      readonly onEvicted?: () => void;
      readonly onOver?: (proof: SessionProof) => void;
      /** How an eviction deletes the member key (default `deleteKeyWithNote`: a CAS delete whose marker names the session). */
      readonly deleteKey?: (kv: KV, key: string, previousSeq: number, note: EndedNote) => Promise<void>;
    },
  ) {}

  /**
   * The group bucket as membership read it, with its incarnation (its stream's creation time), or
   * undefined (not yet, or gone: nothing is proven meanwhile). Another incarnation than the last one
   * forgets every revision seen and every session proven over.
   */
  attach(kv: KV | undefined, incarnation?: number): void {
    this.kv = kv;
    if (kv === undefined || incarnation === undefined || incarnation === this.incarnation) return;
    if (this.incarnation !== undefined) {
      this.opts.logger.info({ incarnation, was: this.incarnation }, "the group bucket was re-created: what was judged by its revisions is forgotten");
    }
    this.incarnation = incarnation;
    this.generation++;
    this.observed.clear();
    this.over.clear();
    this.absentSince.clear();
    this.pending.clear();
  }

  /** A revision of a member key received just now (a read's reply or the watch): a write, or (`operation`) a delete or purge. */
  saw(key: string, revision: number, operation: "PUT" | "DEL" | "PURGE" = "PUT"): void {
    const known = this.observed.get(key);
    if (!known || known.revision < revision) this.observed.set(key, { revision, at: this.opts.now(), put: operation === "PUT" });
  }

  /**
   * Whether `member`'s session `session` is over (see above); I/O only when the last sight is old.
   * `memberLeaseMs`: the `group.lease` the lease value says that member runs with.
   */
  ended(member: string, session: number, memberLeaseMs?: number): Promise<boolean> {
    // No bucket of a known incarnation: nothing can be proven (and nothing proven before counts).
    if (!this.kv || this.incarnation === undefined) return Promise.resolve(false);
    const key = memberKeyOf(member);
    if (memberLeaseMs !== undefined) this.noteLease(key, memberLeaseMs);
    if ((this.over.get(key) ?? 0) >= session) return Promise.resolve(true);
    const known = this.observed.get(key);
    // A write of the session received within our own lease: nothing to prove yet, no read (a delete is read).
    if (known?.put && known.revision >= session && this.opts.now() - known.at < this.opts.leaseMs) return Promise.resolve(false);
    // The leases of one member held under one session share a judgement (not those of another session).
    const asked = `${key}@${session}`;
    let run = this.pending.get(asked);
    if (!run) {
      const generation = this.generation;
      run = this.judge(key, member, session, generation)
        .catch((err: unknown) => {
          this.opts.logger.debug({ member, session, err: toRelayError(err).message }, "could not judge a member's session");
          return false;
        })
        .finally(() => {
          if (this.pending.get(asked) === run) this.pending.delete(asked);
        });
      this.pending.set(asked, run);
    }
    return run;
  }

  private async judge(key: string, member: string, session: number, generation: number): Promise<boolean> {
    const kv = this.kv;
    if (!kv) return false;
    const entry = await kv.get(key);
    if (generation !== this.generation) return false; // read across a re-created bucket: proves nothing
    if (!entry) return this.absent(key, member, session, generation);
    this.absentSince.delete(key);
    if (entry.revision < session) return false; // a replica behind: prove nothing
    this.saw(key, entry.revision, entry.operation);
    const value = entry.operation === "PUT" ? parseMember(entry) : undefined;
    if (value?.id === member) {
      if (value.leaseMs !== undefined) this.noteLease(key, value.leaseMs);
      const its = value.session ?? entry.revision;
      // Its own later session: it starts one only once its chain was refused and the old one ended.
      if (its > session) return this.proven(key, session, member, generation, `it began a new session (revision ${entry.revision})`, "new_session");
      if (its === session) return this.evict(kv, key, member, session, generation, entry.revision);
      return false;
    }
    // A delete marker naming the session as ended: another member's eviction (a CAS delete on the
    // session's last write, unchanged for its lease by that member's clock), the same proof as this
    // member's own; or the member's own stop, written after its session ended in its process.
    const note = entry.operation === "DEL" ? parseEndedNote(entry) : undefined;
    if (note?.id === member && note.session >= session) {
      return this.proven(key, session, member, generation, `its member key's delete marker names the session ended (revision ${entry.revision})`, "ended_marker");
    }
    // Broken by another write (a delete, a purge, someone else's value): its member may still be
    // within its deadline, and stops at its next refused write. Over once unchanged for its lease.
    const seen = this.observed.get(key);
    const leaseMs = this.leaseOf(key);
    const unchangedMs = this.opts.now() - (seen?.at ?? Infinity);
    if (seen?.revision !== entry.revision || unchangedMs < leaseMs) return false;
    const what = entry.operation === "PUT" ? "written by another" : entry.operation === "DEL" ? "deleted" : "purged";
    const proof = entry.operation === "PUT" ? "key_written" : "key_deleted";
    return this.proven(key, session, member, generation, `its member key was ${what} (revision ${entry.revision}) and stayed so ${Math.round(unchangedMs)} ms (its lease: ${leaseMs} ms)`, proof);
  }

  /** The session's last write, unchanged for its lease by this member's clock: deleted by CAS on it (eviction). */
  private async evict(kv: KV, key: string, member: string, session: number, generation: number, revision: number): Promise<boolean> {
    const seen = this.observed.get(key);
    const leaseMs = this.leaseOf(key);
    const unchangedMs = this.opts.now() - (seen?.at ?? Infinity);
    if (seen?.revision !== revision || unchangedMs < leaseMs) return false;
    try {
      await (this.opts.deleteKey ?? deleteKeyWithNote)(kv, key, revision, { ended: { id: member, session } });
    } catch (err) {
      if (isCasConflict(err)) return false; // it wrote meanwhile: alive
      throw err;
    }
    this.opts.onEvicted?.();
    return this.proven(key, session, member, generation, `its member key unchanged for ${Math.round(unchangedMs)} ms (its lease: ${leaseMs} ms): evicted`);
  }

  /** No member key at all (purged): over once read absent for its member's lease (its chain's writes all fail meanwhile). */
  private absent(key: string, member: string, session: number, generation: number): boolean {
    const now = this.opts.now();
    const since = this.absentSince.get(key);
    if (since === undefined) {
      this.absentSince.set(key, now);
      return false;
    }
    const leaseMs = this.leaseOf(key);
    if (now - since < leaseMs) return false;
    return this.proven(key, session, member, generation, `its member key is gone (absent for ${Math.round(now - since)} ms; its lease: ${leaseMs} ms)`, "key_absent");
  }

  /** The member's stored lease (the longest seen), else this member's own. */
  private leaseOf(key: string): number {
    return this.leases.get(key) ?? this.opts.leaseMs;
  }

  private noteLease(key: string, leaseMs: number): void {
    if (Number.isFinite(leaseMs) && leaseMs > 0 && leaseMs > (this.leases.get(key) ?? 0)) this.leases.set(key, leaseMs);
  }

  /** `proof`: how, when not by this member's eviction (counted by `onEvicted`). */
  private proven(key: string, session: number, member: string, generation: number, why: string, proof?: SessionProof): boolean {
    if (generation !== this.generation) return false;
    if ((this.over.get(key) ?? 0) < session) {
      this.over.set(key, session);
      if (proof) this.opts.onOver?.(proof);
      this.opts.logger.info({ member, session }, `the session of member ${member} is over: ${why}`);
    }
    return true;
  }
}

/** The session a delete marker names as ended, if it does (a plain delete has no body). */
function parseEndedNote(entry: KvEntry): EndedNote["ended"] | undefined {
  try {
    const v = entry.json<{ ended?: { id?: unknown; session?: unknown } }>();
    const e = v?.ended;
    return typeof e?.id === "string" && typeof e.session === "number" && Number.isFinite(e.session) ? { id: e.id, session: e.session } : undefined;
  } catch {
    return undefined;
  }
}

/** What a judge reads of a member key's value. */
function parseMember(entry: KvEntry): { id: string; session?: number; leaseMs?: number } | undefined {
  try {
    const v = entry.json<{ id?: unknown; session?: unknown; leaseMs?: unknown }>();
    if (typeof v?.id !== "string") return undefined;
    const num = (x: unknown) => (typeof x === "number" && Number.isFinite(x) && x > 0 ? x : undefined);
    const session = num(v.session);
    const leaseMs = num(v.leaseMs);
    return { id: v.id, ...(session !== undefined ? { session } : {}), ...(leaseMs !== undefined ? { leaseMs } : {}) };
  } catch {
    return undefined;
  }
}

/** A relay's member session and its judge of the others' (its membership drives both; its leases use them). */
export function groupSessions(
  group: { readonly leaseMs: number; readonly renewMs: number },
  logger: Logger,
  counted: { evicted(): void; ended(): void; over?(proof: SessionProof): void } = { evicted: () => {}, ended: () => {} },
): { own: MemberSession; judge: SessionJudge } {
  const now = () => performance.now();
  return {
    own: new MemberSession({ leaseMs: group.leaseMs, marginMs: group.renewMs / 2, now, onEnded: () => counted.ended() }),
    judge: new SessionJudge({ leaseMs: group.leaseMs, now, logger, onEvicted: () => counted.evicted(), onOver: (proof) => counted.over?.(proof) }),
  };
}
