import type { LinkConfig } from "../config/types.js";
import type { RelayError } from "../errors.js";
import type { GroupMembership, MemberView } from "../group/membership.js";
import type { Link, LinkStatus } from "../link/link.js";
import type { LinkState } from "../observability/metrics.js";
import type { ConnectionStatus } from "./connections.js";
import type { ConfigStatus } from "./reload.js";

/**
 * What a relay reports of itself: `/status` (and `jetstream-relay status`) and `/readyz`. Built from
 * the relay's parts; decides nothing.
 */

export interface RelayStatus {
  readonly region: string;
  readonly startedAt: string;
  readonly links: readonly LinkStatus[];
  /** The region's group as this relay sees it. */
  readonly group?: GroupStatus;
  /** The config's hash, when it was loaded, and the last reload. */
  readonly config?: ConfigStatus;
  /** The relay's NATS connections: one per region, and the ownership one (leases, membership). */
  readonly connections?: readonly ConnectionStatus[];
}

export interface GroupStatus {
  readonly bucket: string;
  /** This relay's member id and stable name. */
  readonly member: string;
  readonly name: string;
  /** This relay's session (the revision its member key's chain began at), which renews its leases in member mode. */
  readonly session?: number;
  /** Live members (this one included once it has joined), with the links placed on each. */
  readonly members: readonly (MemberView & { readonly placed: readonly string[] })[];
}

/** A link that is not running yet (its regions not reachable, or it failed to start). */
export interface WaitingLink {
  readonly config: LinkConfig;
  readonly reason: string;
  readonly failed?: RelayError;
}

export function relayStatus(parts: {
  readonly region: string;
  readonly startedAt: Date;
  readonly links: readonly Link[];
  readonly waiting: ReadonlyMap<string, WaitingLink>;
  readonly group?: {
    readonly membership: GroupMembership;
    readonly bucket: string;
    readonly member: string;
    readonly name: string;
    /** Unit (lease key) → member id. */
    readonly placement: ReadonlyMap<string, string>;
  };
  readonly config: ConfigStatus;
  readonly connections: readonly ConnectionStatus[];
}): RelayStatus {
  const placeholders = [...parts.waiting.values()].map((w) => waitingStatus(w.config, w.reason, w.failed));
  return {
    region: parts.region,
    startedAt: parts.startedAt.toISOString(),
    links: [...parts.links.map((l) => l.status()), ...placeholders],
    ...(parts.group ? { group: groupStatus(parts.group, parts.links) } : {}),
    config: parts.config,
    connections: parts.connections,
  };
}

function groupStatus(group: NonNullable<Parameters<typeof relayStatus>[0]["group"]>, links: readonly Link[]): GroupStatus {
  const names = new Map(links.map((l) => [l.placed.unit, l.name]));
  return {
    bucket: group.bucket,
    member: group.member,
    name: group.name,
    ...(group.membership.session !== undefined ? { session: group.membership.session } : {}),
    members: group.membership.members.map((m) => ({
      ...m,
      placed: [...group.placement]
        .filter(([, id]) => id === m.id)
        .map(([unit]) => names.get(unit) ?? unit)
        .sort(),
    })),
  };
}

const READY_STATES: ReadonlySet<LinkState> = new Set(["live", "catching-up", "standby"]);

/** Ready when running and every link is live, catching up or standing by (another member owns it). */
export function readinessOf(state: string, links: readonly Link[], waiting: ReadonlyMap<string, WaitingLink>): { ready: boolean; reasons: string[] } {
  const reasons: string[] = [];
  if (state !== "running") reasons.push(`relay is ${state}`);
  for (const l of links) {
    // A standby link is healthy: another relay of the group owns it, this one is ready to take over.
    // So is one an operator paused on purpose (`jetstream-relay link pause`): a rollout must not wait for it.
    if (!READY_STATES.has(l.currentState) && !(l.currentState === "paused" && l.status().operatorPause)) {
      const why = l.status().stateReason;
      reasons.push(`link ${l.name} is ${l.currentState}${why ? `: ${why}` : ""}`);
    }
  }
  for (const [name, w] of waiting) reasons.push(`link ${name}: ${w.reason}`);
  return { ready: reasons.length === 0, reasons };
}

function waitingStatus(config: LinkConfig, reason: string, failed?: RelayError): LinkStatus {
  const now = new Date().toISOString();
  return {
    name: config.name,
    from: `${config.from.region}/${config.from.stream}`,
    to: `${config.to.region}/${config.to.stream}`,
    state: failed ? "failed" : "starting",
    stateSince: now,
    stateReason: reason,
    guard: config.guard ? config.guard.store.kind : "none",
    inFlight: 0,
    corrections: {},
    stateHistory: [],
    gaps: [],
    ...(failed ? { lastError: { code: failed.code, message: failed.message, at: now } } : {}),
  };
}
