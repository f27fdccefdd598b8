import type { ClaimedItem, ClaimResult, Guard, GuardItem } from "./types.js";

/**
 * The guard of a link without `guard:` in its config: every message is relayed and the
 * destination's duplicate window (Nats-Msg-Id) is the only deduplication. Keeps the link's code
 * free of "is there a guard" branches.
 */
export class NoneGuard implements Guard {
  readonly kind = "none" as const;

  async start(): Promise<void> {}

  async claim(items: readonly GuardItem[]): Promise<ClaimResult[]> {
    return items.map(() => ({ decision: "relay", token: "none" }));
  }

  async commit(_items: readonly ClaimedItem[]): Promise<void> {}

  async release(_items: readonly ClaimedItem[]): Promise<void> {}

  async stop(): Promise<void> {}
}
