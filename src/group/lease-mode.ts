import type { LeaseSessions, LeaseValue } from "./types.js";

/**
 * How a held lease is renewed: by writes of its own key every `group.renew` (key mode), or by this
 * member's session (member mode, member-session.ts): while the session is valid, a write stores it and
 * the key is rewritten only every half of the long lease such a write stores (lease-value.ts
 * `writeLeaseMs`). The owner is valid only while both its last write and its session are.
 */
export class LeaseMode {
  /** The session the last write of ours stored; undefined: key mode. */
  private session: number | undefined;

  constructor(private readonly sessions: LeaseSessions | undefined) {}

  /** The session a write sent now stores (member mode), or undefined (key mode). */
  next(): number | undefined {
    return this.sessions?.own.current();
  }

  /** A write of ours storing `session` succeeded (or was found to have landed). */
  wrote(session: number | undefined): void {
    this.session = session;
  }

  /** Whether the session bounding the lease still holds (always, in key mode). No I/O. */
  holds(): boolean {
    return this.session === undefined || this.sessions?.own.validFor(this.session) === true;
  }

  get member(): boolean {
    return this.session !== undefined;
  }

  /** `cb` runs when this member's session ends or lapses; returns an unsubscribe. */
  onChange(cb: () => void): () => void {
    return this.sessions?.own.onChange(cb) ?? (() => {});
  }

  /** A value held in member mode by `holder` whose session is over (session-judge.ts): it may be taken. */
  async holderGone(holder: string, value: LeaseValue | undefined): Promise<boolean> {
    const session = value?.session;
    return typeof session === "number" && this.sessions !== undefined && (await this.sessions.judge.ended(holder, session, value?.memberLeaseMs));
  }
}
