/**
 * Where a link's audit has got to, kept in the region's group bucket beside the link's lease and
 * checkpoint (`_audit.<lease key>`, group/link-position.ts), so that a new owner (after a restart or a
 * handover) goes on from there: the source range judged so far, where the destination is read from
 * next, the order state, when the next sweep is due, the totals and the last finding.
 */

export interface Finding {
  readonly at: string;
  readonly kind: "missing" | "extra" | "reordered" | "backwards";
  readonly count: number;
  /** Up to 20 source sequences (and ids, for missing and extra), never payloads. */
  readonly sourceSeqs: readonly number[];
  readonly ids?: readonly string[];
  /** `range` or `sweep`: which pass found it. */
  readonly pass: "range" | "sweep";
}

export interface AuditTotals {
  checked: number;
  missing: number;
  extra: number;
  reordered: number;
  backwards: number;
  repaired: number;
}

export interface AuditState {
  /** The source and destination streams' incarnations (creation times, ms): another incarnation starts over. */
  readonly sourceCreatedMs: number;
  readonly destCreatedMs: number;
  /**
   * Where the link's responsibility begins, as the audit first found it: its consumer's start (all
   * messages, or a start sequence), else the ack floor when the audit began. Nothing below is judged.
   */
  readonly originSeq: number;
  /** Every source seq at or below this one was judged. */
  judgedSeq: number;
  /** When the range up to judgedSeq had settled (its sample's time, ISO 8601). */
  judgedAt: string;
  /** The destination's last seq when judgedSeq was the ack floor: every copy of a seq at or below judgedSeq lies at or below it. */
  judgedDestSeq: number;
  /** The next pass reads the destination from here (a copy of a later seq may lie here already). */
  readFrom: number;
  /** Copies at or below this destination seq were checked for order already. */
  orderedTo: number;
  /** The highest source seq stored so far (order). */
  highest: number;
  /** When the next sweep of the retained window is due (ms since the epoch). */
  nextSweepMs: number;
  totals: AuditTotals;
  lastFinding?: Finding;
}

export function newTotals(): AuditTotals {
  return { checked: 0, missing: 0, extra: 0, reordered: 0, backwards: 0, repaired: 0 };
}

const nonNegative = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;

/** A stored state, or undefined when the text is not one (the audit then starts over, and says so). */
export function parseAuditState(text: string): AuditState | undefined {
  let o: Record<string, unknown>;
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v !== "object" || v === null) return undefined;
    o = v as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const ints = ["sourceCreatedMs", "destCreatedMs", "judgedSeq", "judgedDestSeq", "readFrom", "orderedTo", "highest", "nextSweepMs"] as const;
  if (!ints.every((k) => nonNegative(o[k])) || typeof o["judgedAt"] !== "string") return undefined;
  const t = (o["totals"] ?? {}) as Record<string, unknown>;
  const totals = newTotals();
  for (const k of Object.keys(totals) as (keyof AuditTotals)[]) if (nonNegative(t[k])) totals[k] = t[k];
  const f = o["lastFinding"] as Finding | undefined;
  return {
    sourceCreatedMs: o["sourceCreatedMs"] as number,
    destCreatedMs: o["destCreatedMs"] as number,
    originSeq: nonNegative(o["originSeq"]) ? o["originSeq"] : 0,
    judgedSeq: o["judgedSeq"] as number,
    judgedAt: o["judgedAt"],
    judgedDestSeq: o["judgedDestSeq"] as number,
    readFrom: o["readFrom"] as number,
    orderedTo: o["orderedTo"] as number,
    highest: o["highest"] as number,
    nextSweepMs: o["nextSweepMs"] as number,
    totals,
    ...(f && typeof f === "object" && typeof f.kind === "string" ? { lastFinding: f } : {}),
  };
}
