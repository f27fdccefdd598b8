import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { AllLinks } from "../config/routes.js";
import type { LinkConfig, RegionConfig } from "../config/types.js";
import type { Guard } from "../guard/types.js";
import type { LinkLease } from "../group/lease.js";
import type { PositionStore } from "../group/link-position.js";
import type { TickGrid } from "../lifecycle/tick-grid.js";
import type { RoundTrips } from "../nats/round-trips.js";
import type { StreamListings } from "../nats/stream-listing.js";
import type { WriteGates } from "../nats/write-gate.js";
import type { RelayMetrics } from "../observability/metrics.js";

/** What a Link is given: its config, its connections, its lease and guard, and the relay's shared parts. */
export interface LinkDeps {
  readonly config: LinkConfig;
  /** Every link of the mesh (as it is now, after reloads): needed to suppress redundant paths. */
  readonly links: AllLinks;
  readonly sourceRegion: RegionConfig;
  readonly source: NatsConnection;
  readonly dest: NatsConnection;
  /** JetStream domain of the destination region, when it has one. */
  readonly destDomain?: string;
  /** The link's ownership in the region's group: only the owner consumes, publishes, commits and acks. */
  readonly lease: LinkLease;
  readonly guard: Guard;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** How often backlog and state are refreshed (ms). */
  readonly pollIntervalMs?: number;
  /** The relay's shared tick grid: the links' polls (and their leases' renewals) leave together. */
  readonly ticks: TickGrid;
  /** The relay's clock (ms since the epoch; default Date.now). Backlog ages are measured on the source's. */
  readonly clock?: () => number;
  /** The round trip of each connection, measured once for all the links on it (default: one meter per link). */
  readonly roundTrips?: RoundTrips;
  /** Ownership checked again when bytes leave (write-gate.ts); absent: only when they are issued. */
  readonly writeGates?: WriteGates;
  /** A catching-up or resyncing link logs its progress this often (ms; 0: never; default 10 s). */
  readonly progressIntervalMs?: number;
  /** Pull nothing until the group's control key for the link is read (`setControl`): the relay's links. */
  readonly awaitControl?: boolean;
  /** The link's checkpoint and an operator's explicit start in the group bucket (absent: no checkpoint). */
  readonly positions?: PositionStore;
  /** The relay's listings of its source streams: a link at rest reads its stream there (absent: it reads its own). */
  readonly streamListings?: StreamListings;
}
