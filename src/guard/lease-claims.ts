/**
 * Claims by lease (lua.ts WRITERS): while a link is the only live writer of its guard scope, its
 * lease is the claim of every id it relays, and no claim key per id is written or deleted. What the
 * other writers of the scope must know is whether this one may still publish ids claimed that way:
 * its writer word. This keeps the count the word is made from, for one layout client (all its slot
 * groups together: a word may say "L" for longer than needed, never for shorter).
 */

/** A claim token handed out for an id claimed by the lease (no claim key holds it). */
const LEASE_PREFIX = "lease:";

export const leaseClaimToken = (token: string): string => `${LEASE_PREFIX}${token}`;
export const isLeaseClaim = (token: string): boolean => token.startsWith(LEASE_PREFIX);

export type WriterWord = "L" | "l" | "K";

export class LeaseClaims {
  /** Lease-mode claim calls sent and not yet answered: their ids may be relayed. */
  private calls = 0;
  /** Ids claimed by the lease and not yet committed or released. */
  private held = 0;
  /** Whether this client ever claimed by its lease (until then its commits leave its entry alone). */
  private used = false;

  /** A lease-mode claim call is sent; `settled(relayed)` when it is answered (or failed: 0). */
  sent(): (relayed: number) => void {
    this.calls++;
    this.used = true;
    let done = false;
    return (relayed) => {
      if (done) return;
      done = true;
      this.calls--;
      this.held += relayed;
    };
  }

  /** Ids claimed by the lease that are now committed or released. */
  ended(count: number): void {
    this.held = Math.max(0, this.held - count);
  }

  /** The word of a keyed claim sent now: "L" while ids claimed by the lease may still be published. */
  keyedClaimWord(): "L" | "K" {
    return this.calls > 0 || this.held > 0 ? "L" : "K";
  }

  /**
   * The word of a commit sent now that ends `ending` lease-claimed ids: "L" while others may still be
   * published, else "l" in lease mode or "K" keyed; "" for a client that never claimed by its lease
   * (its entry, written by its keyed claims, stays as it is).
   */
  commitWord(leaseMode: boolean, ending: number): WriterWord | "" {
    if (this.calls > 0 || this.held - ending > 0) return "L";
    if (!this.used) return "";
    return leaseMode ? "l" : "K";
  }
}
