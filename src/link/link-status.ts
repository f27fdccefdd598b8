/**
 * What a link reports about itself (`/status`): the `LinkStatus` and `LinkOwnership` shapes, the kinds
 * of trouble its state follows from, and building the status and ownership objects from the link's parts.
 */
import type { AuditStatus } from "../audit/link-audit.js";
import type { LinkConfig } from "../config/types.js";
import type { Guard } from "../guard/types.js";
import type { LinkControlValue } from "../group/link-control.js";
import type { LinkState } from "../observability/metrics.js";
import type { BacklogReading } from "./backlog.js";
import type { Gap } from "./gap.js";
import type { WindowStatus } from "./link-window.js";
import type { ResyncReason, ResyncResult } from "./resync.js";

export interface LinkStatus {
  readonly name: string;
  readonly from: string;
  readonly to: string;
  readonly state: LinkState;
  readonly stateSince: string;
  readonly stateReason?: string;
  readonly guard: Guard["kind"];
  readonly inFlight: number;
  /** Corrections since the relay started, by kind. */
  readonly corrections: Readonly<Record<string, number>>;
  /** Messages finished since the relay started, by outcome: relayed, duplicate, stale, loop, dead_lettered. */
  readonly messages?: Readonly<Record<string, number>>;
  readonly backlog?: BacklogReading;
  readonly lastError?: LinkError;
  readonly stateHistory: readonly { readonly state: LinkState; readonly at: string; readonly reason?: string }[];
  /** Lost source ranges reported so far (the last 10). */
  readonly gaps: readonly Gap[];
  readonly lastResync?: LastResync;
  /** Who owns the link in the region's group (absent on a link that never started). */
  readonly ownership?: LinkOwnership;
  /** The pull window: its size, what limits it, the round trip and the rate (link-window.ts). */
  readonly window?: WindowStatus;
  /** An operator's pause in force (`jetstream-relay link pause`): why, by whom, when. */
  readonly operatorPause?: LinkControlValue;
  /** The owner's audit of what the link delivered: where it has got to and its last finding. */
  readonly audit?: AuditStatus;
}

export interface LinkOwnership {
  /** The member holding the lease, as this relay last saw it (undefined: nobody, or not known yet). */
  readonly owner?: string;
  /** This relay is the owner. */
  readonly self: boolean;
  /**
   * The lease revision: the KV revision of the write by which this relay acquired the lease (when it
   * is the owner). With the lease bucket's incarnation, the fencing token its claims and commits carry.
   */
  readonly leaseRevision?: number;
  /**
   * @deprecated Use `leaseRevision`: the same value, under the name older versions gave it. Kept in
   * `/status` (and `status --json`) so that scripts reading it keep working; to be removed in a later
   * release (docs/operations.md).
   */
  readonly epoch?: number;
  /** Since when this relay owns it (when it is the owner). */
  readonly since?: string;
  /** How this relay renews the lease (when it is the owner): `member` (its member key's writes renew it) or `key`. */
  readonly renewal?: "member" | "key";
  /** Group placement wants this relay to own the link. */
  readonly preferred: boolean;
  /** The lease key in the group bucket. */
  readonly key: string;
}

/** An error as the status shows it. */
export interface LinkError {
  readonly code: string;
  readonly message: string;
  readonly at: string;
}

/** A resync after a guard state loss is the operator's choice (`guard resume --resync`). */
export type LinkResyncReason = ResyncReason | "guard_state_lost";

/** The last resync the link ran, as the status shows it. */
export type LastResync = ResyncResult & { readonly reason: LinkResyncReason; readonly at: string };

/**
 * `refused`: the destination answers but will not store (full, or a refusal for the whole link): paused.
 * `guard-state`: the guard lost its memory (GUARD_STATE_LOST): paused until an operator resumes.
 * `guard-unsafe`: under `guard.strict`, a settings check found the guard's Redis unsafe: paused until it is not.
 * `operator`: an operator paused the link (`jetstream-relay link pause`): paused until resumed.
 */
export type Trouble = "source" | "dest" | "guard" | "refused" | "guard-state" | "guard-unsafe" | "stalled" | "operator";

/** What the link's lease tells about who owns it (group/lease.ts). */
export interface LeaseView {
  valid(): boolean;
  readonly member: string;
  readonly holder: string | undefined;
  readonly leaseRevision: number | undefined;
  readonly since: string | undefined;
  readonly isEligible: boolean;
  readonly key: string;
  readonly renewal: "member" | "key";
}

export function ownershipOf(lease: LeaseView): LinkOwnership {
  const self = lease.valid();
  const owner = self ? lease.member : lease.holder;
  const leaseRevision = self ? lease.leaseRevision : undefined;
  const since = self ? lease.since : undefined;
  return {
    ...(owner !== undefined ? { owner } : {}),
    self,
    // `epoch`: the deprecated alias of leaseRevision (LinkOwnership), same value.
    ...(leaseRevision !== undefined ? { leaseRevision, epoch: leaseRevision } : {}),
    ...(since !== undefined ? { since } : {}),
    ...(self ? { renewal: lease.renewal } : {}),
    preferred: lease.isEligible,
    key: lease.key,
  };
}

/** Everything a status is built from. */
export interface StatusParts {
  readonly config: LinkConfig;
  readonly state: {
    readonly state: LinkState;
    readonly sinceMs: number;
    readonly reason: string | undefined;
    readonly history: readonly { readonly state: LinkState; readonly at: string; readonly reason?: string }[];
  };
  readonly guard: Guard["kind"];
  readonly pipeline: {
    readonly size: number;
    readonly corrections: Readonly<Record<string, number>>;
    readonly outcomes: Readonly<Record<string, number>>;
    readonly lastError: LinkError | undefined;
  };
  /** The link's own last error (source, lease). */
  readonly lastError: LinkError | undefined;
  readonly backlog: BacklogReading | undefined;
  readonly gaps: readonly Gap[];
  readonly lastResync: LastResync | undefined;
  readonly ownership: LinkOwnership;
  readonly window: WindowStatus;
  readonly operatorPause?: LinkControlValue | undefined;
  readonly audit?: AuditStatus | undefined;
}

export function linkStatus(p: StatusParts): LinkStatus {
  const c = p.config;
  // The latest of the link's own errors (source, lease) and the pipeline's (publish, guard, bad messages).
  const own = p.lastError;
  const piped = p.pipeline.lastError;
  const lastError = own && piped ? (piped.at > own.at ? piped : own) : (own ?? piped);
  return {
    name: c.name,
    from: `${c.from.region}/${c.from.stream}`,
    to: `${c.to.region}/${c.to.stream}`,
    state: p.state.state,
    stateSince: new Date(p.state.sinceMs).toISOString(),
    ...(p.state.reason ? { stateReason: p.state.reason } : {}),
    guard: p.guard,
    inFlight: p.pipeline.size,
    corrections: { ...p.pipeline.corrections },
    messages: { ...p.pipeline.outcomes },
    ...(p.backlog ? { backlog: p.backlog } : {}),
    ...(lastError ? { lastError } : {}),
    stateHistory: [...p.state.history],
    gaps: [...p.gaps],
    ...(p.lastResync ? { lastResync: p.lastResync } : {}),
    ownership: p.ownership,
    window: p.window,
    ...(p.operatorPause ? { operatorPause: p.operatorPause } : {}),
    ...(p.audit ? { audit: p.audit } : {}),
  };
}
