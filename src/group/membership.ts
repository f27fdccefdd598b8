import { KvWatchInclude } from "@nats-io/kv";
import type { KV, KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { Backoff, sleep } from "../lifecycle/backoff.js";
import { withDeadline } from "../lifecycle/deadline.js";
import { stopOnAbort } from "../lifecycle/stop-on-abort.js";
import { bucketGoneAfter, deleteKeyWithNote, forgetKey, listKeysOfIncarnation, openGroupBucket } from "./bucket.js";
import { isCasConflict } from "./lease-value.js";
import { MEMBER_PREFIX, memberKeyOf } from "./member-session.js";
import type { MemberSession } from "./member-session.js";
import type { PlacementMember } from "./placement.js";
import type { SessionJudge } from "./session-judge.js";

export { MEMBER_PREFIX } from "./member-session.js";

export interface MembershipOptions {
  /** Connection to the region's own cluster (where the group bucket is). Not closed here. */
  readonly nc: NatsConnection;
  readonly domain?: string | undefined;
  readonly bucket: string;
  /** This process (unique, never reused) and its stable name (host or pod name). */
  readonly member: PlacementMember;
  /**
   * This member's `group.lease`: a member whose key has not changed for the lease it stored in its key
   * (this one when it stored none), by this member's own clock, is gone. Stored in this member's key.
   */
  readonly leaseMs: number;
  /** How often this member writes its key and reads the others'. Stored in its key. */
  readonly renewMs: number;
  readonly logger: Logger;
  /** Monotonic clock (ms); injectable for tests. */
  readonly now?: () => number;
  /** A member unchanged this long is deleted, and a delete marker this old removed (default 60 s). */
  readonly forgetAfterMs?: number;
  /**
   * This member's session (member-session.ts), renewed by its key's writes, and the judge of the other
   * members' sessions (session-judge.ts), fed by the reads and the watch. Without them the key is
   * written as before (no session: every lease renews its own key).
   */
  readonly sessions?: { readonly own: MemberSession; readonly judge: SessionJudge };
  /** A request to the group bucket failed: `transient` (an election, a timeout: retried) or `gone` (stream not found). */
  readonly onBucketFailure?: (kind: "transient" | "gone") => void;
}

/** A live member as this process sees it. */
export interface MemberView extends PlacementMember {
  /** When it joined (its own wall clock, informational). */
  readonly startedAt: string;
  /** Its `group.lease` and `group.renew` (ms); absent for members of relays before they were stored. */
  readonly leaseMs?: number;
  readonly renewMs?: number;
  /** Its lease or renew differs from this relay's (members must agree; see `settingsMismatch`). */
  readonly settingsDiffer?: true;
}

interface MemberValue {
  readonly id: string;
  readonly name: string;
  readonly startedAt: string;
  readonly leaseMs?: number;
  readonly renewMs?: number;
  /** The session this write renews (absent in its first write: the session is that write's revision). */
  readonly session?: number;
  /** The member is stopping: no longer placed on, while its session lasts until its links are released. */
  readonly leaving?: true;
}

/** Keys of members unchanged this long are deleted by whoever sees them (a member that crashed). */
const FORGET_AFTER_MS = 60_000;

/**
 * The live members of a region's group (DESIGN §9). Every member writes its own key every `renewMs`
 * and reads everyone's; a member is live while its key keeps changing, judged, like leases, by the
 * reader's own monotonic clock since it saw the revision change (never by a wall time in the value).
 * A member that stops deletes its key, so the others see it leave at their next read.
 *
 * Lifecycle: `start()`, idempotent `stop()`, `closed()`. `onChange` runs when the live set changes.
 */
export class GroupMembership {
  private readonly now: () => number;
  private readonly logger: Logger;
  private readonly key: string;
  private readonly startedAt = new Date().toISOString();
  private kv: KV | undefined;
  /** key → last revision seen, when it was first seen (own clock), and the member it names. */
  private readonly seen = new Map<string, { revision: number; at: number; value: MemberValue }>();
  private live: readonly MemberView[] = [];
  /** `id lease/renew` of the members whose settings differ from this one's, as last logged. */
  private mismatchLogged = "";
  private stopWatch: (() => void) | undefined;
  /** This member's session chain: its name (first revision) and the chain's last revision. */
  private chain: { readonly session: number; readonly revision: number } | undefined;
  private leaving = false;
  /** Own key written within the lease: this member can see and be seen. */
  private ownWrittenAt = -Infinity;
  private readonly listeners: ((members: readonly MemberView[], changed: boolean) => void)[] = [];
  private readonly abort = new AbortController();
  /** Ends the current pause between reads (a member joined or left: read now). */
  private wakeNap: (() => void) | undefined;
  private wakePending = false;
  private watching = false;
  private expiryTimer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(private readonly opts: MembershipOptions) {
    this.now = opts.now ?? (() => performance.now());
    this.key = memberKeyOf(opts.member.id);
    this.logger = opts.logger.child({ bucket: opts.bucket, member: opts.member.id });
  }

  /** This member's session (member-session.ts): the revision its chain began at; undefined when it has none. */
  get session(): number | undefined {
    return this.chain?.session;
  }

  /** The live members, sorted by id (this one included once its key is written). */
  get members(): readonly MemberView[] {
    return this.live;
  }

  /**
   * The live members whose `group.lease` or `group.renew` differ from this member's (a rolling restart
   * that changes them runs both at once). Each lease is judged by the duration its owner stored and each
   * member by the lease in its key, so the group stays safe; but a takeover then takes the owner's lease,
   * not this relay's. Members that stored no settings (relays before them) are not counted.
   */
  get settingsMismatch(): readonly MemberView[] {
    return this.live.filter((m) => m.settingsDiffer);
  }

  /** This member's key was written within the lease: the group can see it. */
  get joined(): boolean {
    return this.now() - this.ownWrittenAt < this.opts.leaseMs;
  }

  /** `cb` runs when the live set changes, and after every read (`changed` false): placement re-checks owners. */
  onChange(cb: (members: readonly MemberView[], changed: boolean) => void): void {
    this.listeners.push(cb);
  }

  start(): void {
    if (this.stopping) throw new RelayError(ErrorCodes.INTERNAL, "group membership: start() after stop()");
    this.running ??= this.loop().catch((err: unknown) => {
      this.logger.error({ err: toRelayError(err).message }, "group membership loop failed");
    });
  }

  /**
   * Leaving begins: the key says so at once (the others place nothing more on this member), and the
   * session goes on, so the links can drain and release what they hold; `stop()` ends it.
   */
  leave(): void {
    if (this.leaving) return;
    this.leaving = true;
    this.wake();
  }

  /** Leaves the group: stops writing and deletes its key, so the others see it leave at once. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.abort.abort();
      clearTimeout(this.expiryTimer);
      await this.running;
      this.opts.sessions?.own.ended();
      if (this.kv) {
        await withDeadline(this.deleteOwnKey(this.kv), this.opts.leaseMs, `group bucket ${this.opts.bucket}: deleting this member's key`).catch((err: unknown) => {
          this.logger.warn({ err: toRelayError(err).message }, "could not delete this member's key: the others see it leave when it expires");
        });
      }
      this.resolveClosed();
    })();
    return this.stopping;
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  /**
   * The key's last delete, once the session ended in this process: by CAS on the chain's last write,
   * its marker naming the session ended (a proof for the others' judges, session-judge.ts, so a lease
   * this member could not release is taken at once). The key written by another meanwhile, a plain
   * delete (it proves nothing).
   */
  private async deleteOwnKey(kv: KV): Promise<void> {
    const chain = this.chain;
    if (chain) {
      try {
        return await deleteKeyWithNote(kv, this.key, chain.revision, { ended: { id: this.opts.member.id, session: chain.session } });
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
    await kv.delete(this.key);
  }

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    const backoff = new Backoff(Math.min(100, this.opts.renewMs), this.opts.renewMs);
    let troubled = false;
    while (!signal.aborted) {
      try {
        // The judge gets the bucket with its incarnation, from the reads (read()).
        this.kv ??= await openGroupBucket({ nc: this.opts.nc, domain: this.opts.domain, bucket: this.opts.bucket, timeoutMs: Math.max(this.opts.renewMs, 500) });
        const sentAt = this.now();
        const value: MemberValue = {
          id: this.opts.member.id,
          name: this.opts.member.name,
          startedAt: this.startedAt,
          leaseMs: this.opts.leaseMs,
          renewMs: this.opts.renewMs,
          ...(this.leaving ? { leaving: true as const } : {}),
        };
        if (!(await this.writeOwnKey(this.kv, value, sentAt))) {
          await sleep(Math.min(100, this.opts.renewMs), signal);
          continue;
        }
        this.ownWrittenAt = sentAt;
        // A server that is down (or a stream without a leader) answers nothing: bounded here.
        await withDeadline(this.read(this.kv), this.opts.leaseMs, `group bucket ${this.opts.bucket}: reading the members`, signal);
        this.watch(this.kv);
        if (troubled) this.logger.info("group bucket reachable again");
        troubled = false;
        backoff.reset();
        await this.nap(this.opts.renewMs);
      } catch (err) {
        if (signal.aborted) break;
        if (!troubled) this.logger.warn({ err: toRelayError(err).message }, "group bucket unreachable: this member cannot see the group");
        troubled = true;
        // An election of the bucket's stream ("no responders", a timeout) is transient: the session
        // goes on until its own deadline (member-session.ts), and the next write renews it. Only a
        // bucket proven gone ends it.
        const gone = await bucketGoneAfter(this.kv, err);
        this.opts.onBucketFailure?.(gone ? "gone" : "transient");
        if (gone) {
          // Deleted (or an R1 bucket lost): open it again (created when missing), and watch the new one.
          this.kv = undefined;
          this.opts.sessions?.judge.attach(undefined);
          this.stopWatch?.();
          this.endSession("the group bucket is gone");
        }
        this.update();
        await sleep(backoff.next(), signal);
      }
    }
  }

  /**
   * Writes this member's key. With sessions, a CAS on the chain's last revision (a create starts a
   * chain): refused, the key is read; the chain goes on from a write of ours that landed after its
   * request timed out, and otherwise it is over (another member evicted this one, or the bucket was
   * re-created) and the next write starts a new one. Returns whether a write of this call succeeded.
   */
  private async writeOwnKey(kv: KV, value: MemberValue, sentAt: number): Promise<boolean> {
    const sessions = this.opts.sessions;
    if (!sessions) {
      await kv.put(this.key, JSON.stringify(value));
      return true;
    }
    const chain = this.chain;
    try {
      const revision = chain
        ? await kv.update(this.key, JSON.stringify({ ...value, session: chain.session }), chain.revision)
        : await kv.create(this.key, JSON.stringify(value));
      this.chain = { session: chain?.session ?? revision, revision };
    } catch (err) {
      if (!isCasConflict(err)) throw err;
      const entry = await kv.get(this.key);
      const own = entry?.operation === "PUT" ? parse(entry.string()) : undefined;
      const session = own?.id === this.opts.member.id && entry ? (own.session ?? entry.revision) : undefined;
      if (entry && session !== undefined && (chain === undefined || session === chain.session)) {
        this.chain = { session, revision: entry.revision }; // ours, landed late: renew from it at once
      } else {
        this.endSession(entry ? `another write of this member's key (revision ${entry.revision}): another member evicted it` : "this member's key is gone");
      }
      return false;
    }
    sessions.own.renewed(this.chain.session, sentAt);
    return true;
  }

  /** The session chain is over: leases held under it stop; the next write starts a new one. */
  private endSession(why: string): void {
    if (!this.chain) return;
    this.logger.warn({ session: this.chain.session }, `this member's session ended (${why}): the leases it held in member mode are lost`);
    this.chain = undefined;
    this.opts.sessions?.own.ended(true);
  }

  /** Sleeps until the next read is due, or a member joins or leaves (seen through a watch). */
  private async nap(ms: number): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false; // a join or leave seen while reading: read again at once
      return;
    }
    const ac = new AbortController();
    this.wakeNap = () => ac.abort();
    try {
      await sleep(ms, AbortSignal.any([this.abort.signal, ac.signal]));
    } finally {
      this.wakeNap = undefined;
    }
  }

  /** Ends the current nap, or the next one at once when none is under way (a wake is never lost). */
  private wake(): void {
    if (this.wakeNap) this.wakeNap();
    else this.wakePending = true;
  }

  /** Best effort: a member's key that is new or deleted wakes the loop; polling stays the fallback. */
  private watch(kv: KV): void {
    if (this.watching || this.abort.signal.aborted) return;
    this.watching = true;
    (async () => {
      const iter = await kv.watch({ key: `${MEMBER_PREFIX}.>`, include: KvWatchInclude.UpdatesOnly });
      const detach = stopOnAbort(iter, this.abort.signal);
      this.stopWatch = () => iter.stop();
      try {
        for await (const e of iter) {
          if (e.key === this.key) continue;
          this.opts.sessions?.judge.saw(e.key, e.revision, e.operation); // a write or a delete: received now
          const known = this.seen.get(e.key);
          if (e.operation !== "PUT" || !known || (!known.value.leaving && parse(e.string())?.leaving)) {
            this.wake(); // joined or left (or leaving): read everything now
          } else if (known.revision !== e.revision) {
            // A renewal, seen as it happens: the member's expiry clock starts now, not at the next read.
            this.seen.set(e.key, { ...known, revision: e.revision, at: this.now() });
            this.scheduleExpiry();
          }
        }
      } finally {
        detach();
      }
    })()
      .catch((err: unknown) => this.logger.debug({ err: toRelayError(err).message }, "group watch ended"))
      .finally(() => {
        this.watching = false;
        this.stopWatch = undefined;
      });
  }

  /** Reads every member key; tracks when each revision was first seen. */
  private async read(kv: KV): Promise<void> {
    const { keys, incarnation } = await listKeysOfIncarnation(kv, `${MEMBER_PREFIX}.>`);
    if (this.abort.signal.aborted) return;
    // The revisions read below are of this incarnation: a judge of another forgets what it judged by.
    this.opts.sessions?.judge.attach(kv, incarnation);
    const at = this.now();
    const read = (await Promise.all(keys.map((k) => kv.get(k)))).filter((e): e is KvEntry => e !== null);
    // Received now: a session judge's clock for these revisions starts here, never earlier.
    for (const e of read) if (e.key !== this.key) this.opts.sessions?.judge.saw(e.key, e.revision, e.operation);
    const entries = read.filter((e) => e.operation === "PUT");
    // How old a key is, from the stream's own store times: this member's key was stored just now, so
    // a key stored long before it is a member that stopped writing (a crash), even on first sight.
    // No relay's clock is involved, but with an R3 bucket the times need not come from one server: each
    // write is stamped by the stream leader of the moment (its replicas keep that stamp), so when the
    // leader changed between the two writes, the age compares two servers' clocks and is off by their
    // skew. With an R1 bucket (or one leader throughout) it is one server's clock.
    const ownStored = entries.find((e) => e.key === this.key)?.created.getTime();
    // Every process has a key of its own: the delete markers of members long gone are removed, or the
    // listing (and a read per key) would grow with every restart the group ever had.
    const forgetAfter = this.opts.forgetAfterMs ?? FORGET_AFTER_MS;
    for (const e of read) {
      if (e.operation === "PUT" || ownStored === undefined || ownStored - e.created.getTime() < forgetAfter) continue;
      await forgetKey(kv, e.key).catch((err: unknown) => this.logger.debug({ key: e.key, err: toRelayError(err).message }, "could not remove a departed member's delete marker"));
    }
    const present = new Set<string>();
    for (const entry of entries) {
      const k = entry.key;
      const value = parse(entry.string());
      if (!value) continue;
      present.add(k);
      const prev = this.seen.get(k);
      const age = ownStored === undefined ? 0 : Math.max(0, ownStored - entry.created.getTime());
      if (!prev || prev.revision !== entry.revision) this.seen.set(k, { revision: entry.revision, at: at - age, value });
      else if (k !== this.key && at - prev.at > Math.max(forgetAfter, this.leaseOf(prev.value))) {
        // A member that crashed long ago: its key goes, unless it wrote meanwhile (CAS on the revision);
        // never within the lease it stored (a member with a longer lease may still be within its deadline).
        await kv.delete(k, { previousSeq: entry.revision }).catch(() => undefined);
        this.logger.info({ gone: prev.value.id }, "forgot a member that left without a word");
      }
    }
    for (const k of [...this.seen.keys()]) if (!present.has(k)) this.seen.delete(k);
    this.update();
  }

  /** Re-judges the members when the first live one would expire (a crashed member leaves on time, not at the next read). */
  private scheduleExpiry(): void {
    clearTimeout(this.expiryTimer);
    if (this.abort.signal.aborted) return;
    let next = Infinity;
    const now = this.now();
    for (const [k, s] of this.seen) {
      if (k === this.key) continue;
      const expires = s.at + this.leaseOf(s.value);
      if (expires > now) next = Math.min(next, expires);
    }
    if (next === Infinity) return;
    this.expiryTimer = setTimeout(() => this.update(), Math.max(0, next - now) + 1);
    this.expiryTimer.unref();
  }

  /** How long a member's key stays live unchanged: the lease it stored, else this member's. */
  private leaseOf(value: MemberValue): number {
    return value.leaseMs ?? this.opts.leaseMs;
  }

  private view(value: MemberValue): MemberView {
    const differs =
      (value.leaseMs !== undefined && value.leaseMs !== this.opts.leaseMs) || (value.renewMs !== undefined && value.renewMs !== this.opts.renewMs);
    return {
      id: value.id,
      name: value.name,
      startedAt: value.startedAt,
      ...(value.leaseMs !== undefined ? { leaseMs: value.leaseMs } : {}),
      ...(value.renewMs !== undefined ? { renewMs: value.renewMs } : {}),
      ...(differs ? { settingsDiffer: true as const } : {}),
    };
  }

  /** A warning whenever the set of members whose lease/renew differ from this one's changes. */
  private logMismatch(live: readonly MemberView[]): void {
    const differing = live.filter((m) => m.settingsDiffer);
    const text = differing.map((m) => `${m.id} ${m.leaseMs ?? "?"}/${m.renewMs ?? "?"}`).join(", ");
    if (text === this.mismatchLogged) return;
    this.mismatchLogged = text;
    const own = { leaseMs: this.opts.leaseMs, renewMs: this.opts.renewMs };
    if (differing.length === 0) {
      this.logger.info(own, "the group's members agree on group.lease and group.renew again");
      return;
    }
    this.logger.warn(
      { ...own, differing: differing.map((m) => ({ id: m.id, name: m.name, leaseMs: m.leaseMs, renewMs: m.renewMs })) },
      `group members disagree on group.lease/group.renew (${text}; this relay ${own.leaseMs}/${own.renewMs} ms): each lease is judged by the duration its owner stored, each member by the lease in its key; finish the rolling restart so they agree`,
    );
  }

  private update(): void {
    this.scheduleExpiry();
    const at = this.now();
    const live: MemberView[] = [];
    for (const [k, s] of this.seen) {
      const fresh = k === this.key ? this.joined && !this.leaving : at - s.at < this.leaseOf(s.value) && !s.value.leaving;
      if (fresh) live.push(this.view(s.value));
    }
    live.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    const before = this.live.map((m) => m.id).join(",");
    const after = live.map((m) => m.id).join(",");
    this.live = live;
    const changed = before !== after;
    if (changed) {
      const was = new Set(before === "" ? [] : before.split(","));
      const joined = live.filter((m) => !was.has(m.id)).map((m) => m.id);
      const left = [...was].filter((id) => !live.some((m) => m.id === id));
      this.logger.info({ members: live.length, joined, left }, "group members changed");
    }
    this.logMismatch(live);
    for (const cb of this.listeners) {
      try {
        cb(live, changed);
      } catch (err) {
        this.logger.error({ err: toRelayError(err).message }, "group change listener threw");
      }
    }
  }
}

function parse(text: string): MemberValue | undefined {
  try {
    const v = JSON.parse(text) as Partial<MemberValue>;
    if (typeof v.id !== "string" || typeof v.name !== "string") return undefined;
    const ms = (x: unknown) => (typeof x === "number" && Number.isFinite(x) && x > 0 ? x : undefined);
    const leaseMs = ms(v.leaseMs);
    const renewMs = ms(v.renewMs);
    const session = ms(v.session);
    return {
      id: v.id,
      name: v.name,
      startedAt: String(v.startedAt ?? ""),
      ...(leaseMs !== undefined ? { leaseMs } : {}),
      ...(renewMs !== undefined ? { renewMs } : {}),
      ...(session !== undefined ? { session } : {}),
      ...(v.leaving === true ? { leaving: true as const } : {}),
    };
  } catch {
    return undefined;
  }
}
