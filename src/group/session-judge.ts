import type { KV, KvEntry } from "@nats-io/kv";
import type { Logger } from "pino";
import { toRelayError } from "../errors.js";
import { isCasConflict } from "./lease-value.js";
import { MemberSession, memberKeyOf } from "./member-session.js";

/**
 * A contender's judgement of another member's session (member-session.ts), for a lease whose key says
 * it is held in member mode under that session. The session is over, and the lease may be taken (by
 * CAS on the lease key, as always), only on proof:
 *
 * - the member key holds a write after the session's first that is not of the session (a delete, or a
 *   new session): the chain was broken, for good; or
 * - this member broke it: a delete of the member key by CAS on a revision it has seen unchanged, by its
 *   own clock since it first received it, for the lease that member stored (eviction). The owner's last
 *   successful write was sent before that revision was received, so its deadline has passed; any later
 *   write of its chain would have failed the CAS.
 *
 * A read that cannot prove it (an older revision from a replica behind, a fresh revision) says "not
 * over": a contender waits, it never guesses. Revisions are first seen through the group's membership
 * reads and watch (`saw`), so a member that stops renewing is evicted about its lease after its last
 * write, not its lease after a contender first asks.
 */
export class SessionJudge {
  /** member key → the newest revision seen and the local time it was first seen (own monotonic clock). */
  private readonly observed = new Map<string, { readonly revision: number; readonly at: number }>();
  /** member key → every session of that member up to this one is over. */
  private readonly over = new Map<string, number>();
  private readonly pending = new Map<string, Promise<boolean>>();
  private kv: KV | undefined;

  constructor(
    private readonly opts: { readonly leaseMs: number; readonly now: () => number; readonly logger: Logger; readonly onEvicted?: () => void },
  ) {}

  /** The group bucket as membership opened it (undefined: not yet, or gone). */
  attach(kv: KV | undefined): void {
    this.kv = kv;
  }

  /** A revision of a member key received just now (a read's reply or the watch). */
  saw(key: string, revision: number): void {
    const known = this.observed.get(key);
    if (!known || known.revision < revision) this.observed.set(key, { revision, at: this.opts.now() });
  }

  /** Whether `member`'s session `session` is over (see above); I/O only when the last sight is old. */
  ended(member: string, session: number): Promise<boolean> {
    const key = memberKeyOf(member);
    if ((this.over.get(key) ?? 0) >= session) return Promise.resolve(true);
    const known = this.observed.get(key);
    // A revision of the session received within our own lease: nothing to prove yet, no read.
    if (known && known.revision >= session && this.opts.now() - known.at < this.opts.leaseMs) return Promise.resolve(false);
    // The leases of one member held under one session share a judgement (not those of another session).
    const asked = `${key}@${session}`;
    let run = this.pending.get(asked);
    if (!run) {
      run = this.judge(key, member, session)
        .catch((err: unknown) => {
          this.opts.logger.debug({ member, session, err: toRelayError(err).message }, "could not judge a member's session");
          return false;
        })
        .finally(() => this.pending.delete(asked));
      this.pending.set(asked, run);
    }
    return run;
  }

  private async judge(key: string, member: string, session: number): Promise<boolean> {
    const kv = this.kv;
    if (!kv) return false;
    const entry = await kv.get(key);
    if (!entry) return this.evictAbsent(kv, key, member, session);
    if (entry.revision < session) return false; // a replica behind: prove nothing
    const value = parseMember(entry);
    if (entry.operation !== "PUT" || value?.id !== member || (value.session ?? entry.revision) !== session) {
      return this.proven(key, session, member, `its member key was written outside the session (revision ${entry.revision})`);
    }
    this.saw(key, entry.revision);
    const seen = this.observed.get(key);
    const leaseMs = value.leaseMs ?? this.opts.leaseMs;
    const unchangedMs = this.opts.now() - (seen?.at ?? Infinity);
    if (seen?.revision !== entry.revision || unchangedMs < leaseMs) return false;
    try {
      await kv.delete(key, { previousSeq: entry.revision });
    } catch (err) {
      if (isCasConflict(err)) return false; // it wrote meanwhile: alive
      throw err;
    }
    this.opts.onEvicted?.();
    return this.proven(key, session, member, `its member key unchanged for ${Math.round(unchangedMs)} ms (its lease: ${leaseMs} ms): evicted`);
  }

  /** No member key at all (purged long after its member left): create and delete one by CAS, proving none is live. */
  private async evictAbsent(kv: KV, key: string, member: string, session: number): Promise<boolean> {
    let revision: number;
    try {
      revision = await kv.create(key, "{}");
    } catch (err) {
      if (isCasConflict(err) || /exists/i.test(toRelayError(err).message)) return false; // it exists: read again later
      throw err;
    }
    await kv.delete(key, { previousSeq: revision }).catch(() => undefined);
    return this.proven(key, session, member, "its member key is gone");
  }

  private proven(key: string, session: number, member: string, why: string): true {
    if ((this.over.get(key) ?? 0) < session) {
      this.over.set(key, session);
      this.opts.logger.info({ member, session }, `the session of member ${member} is over: ${why}`);
    }
    return true;
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
  counted: { evicted(): void; ended(): void } = { evicted: () => {}, ended: () => {} },
): { own: MemberSession; judge: SessionJudge } {
  const now = () => performance.now();
  return {
    own: new MemberSession({ leaseMs: group.leaseMs, marginMs: group.renewMs / 2, now, onEnded: () => counted.ended() }),
    judge: new SessionJudge({ leaseMs: group.leaseMs, now, logger, onEvicted: () => counted.evicted() }),
  };
}
