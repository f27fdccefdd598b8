import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { Registry } from "prom-client";
import { linkUnits } from "./config/partitions.js";
import type { LinkConfig, RelayConfig } from "./config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "./errors.js";
import { sleep } from "./lifecycle/backoff.js";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { createGuard } from "./guard/create-guard.js";
import { GroupCoordinator } from "./group/coordinator.js";
import { LinkLease } from "./group/lease.js";
import { GroupMembership } from "./group/membership.js";
import type { MemberView } from "./group/membership.js";
import { leaseKey } from "./group/lease-key.js";
import { Link } from "./link/link.js";
import type { LinkStatus } from "./link/link.js";
import { connectRegion } from "./nats/connect.js";
import { createMetrics } from "./observability/metrics.js";
import type { LinkState, RelayMetrics } from "./observability/metrics.js";

const READY_STATES: ReadonlySet<LinkState> = new Set(["live", "catching-up", "standby"]);

export interface RelayDeps {
  readonly logger: Logger;
  /** One registry per relay (several relays may share a process in tests). */
  readonly registry?: Registry;
  /** Links' backlog/state refresh interval (ms). */
  readonly pollIntervalMs?: number;
  /** How long `start()` waits for links whose regions are not reachable yet (default 5 s). */
  readonly startWaitMs?: number;
  /**
   * This relay's stable name in its group (the host or pod name; default: the hostname): what places
   * links on it, so a restarted relay gets its links back.
   */
  readonly memberName?: string;
}

export interface RelayStatus {
  readonly region: string;
  readonly startedAt: string;
  readonly links: readonly LinkStatus[];
  /** The region's group as this relay sees it. */
  readonly group?: GroupStatus;
}

export interface GroupStatus {
  readonly bucket: string;
  /** This relay's member id and stable name. */
  readonly member: string;
  readonly name: string;
  /** Live members (this one included once it has joined), with the links placed on each. */
  readonly members: readonly (MemberView & { readonly placed: readonly string[] })[];
}

export type RelayState = "created" | "starting" | "running" | "stopping" | "stopped";

/**
 * A relay runs the links whose destination is its region: consume remotely, publish locally (DESIGN §1).
 * It owns one connection per region it talks to, shared by its links. Lifecycle: `start()`, idempotent
 * `stop(signal)`, `closed()`.
 */
export class Relay {
  readonly registry: Registry;
  readonly metrics: RelayMetrics;
  private readonly connections = new Map<string, NatsConnection>();
  private readonly links: Link[] = [];
  /** Links not running yet (a region is still connecting) or that could not start. */
  private readonly waiting = new Map<string, { config: LinkConfig; reason: string; failed?: RelayError }>();
  private readonly abort = new AbortController();
  private readonly startedAt = new Date();
  private readonly logger: Logger;
  private readonly regionLogger: Logger;
  private current: RelayState = "created";
  /** This process in its region's group: names it in every lease it holds. Never reused. */
  readonly memberId = `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
  private membership: GroupMembership | undefined;
  private coordinator: GroupCoordinator | undefined;
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(
    private readonly config: RelayConfig,
    private readonly region: string,
    private readonly deps: RelayDeps,
  ) {
    if (!config.regions.has(region)) {
      throw new RelayError(ErrorCodes.USAGE, `--region ${region}: not in the config (regions: ${[...config.regions.keys()].join(", ")})`);
    }
    this.registry = deps.registry ?? new Registry();
    this.metrics = createMetrics(this.registry);
    // One key per name on every line (strict JSON parsers reject duplicates): `region` is this relay's
    // own region, bound once here; components and links are bound once, on loggers made from it.
    this.regionLogger = deps.logger.child({ region });
    this.logger = this.regionLogger.child({ component: "relay" });
  }

  get state(): RelayState {
    return this.current;
  }

  /** The links this relay runs: those whose destination is its region, a partitioned link as its partitions. */
  get linkConfigs(): LinkConfig[] {
    return this.config.links.filter((l) => l.to.region === this.region).flatMap(linkUnits);
  }

  /**
   * Connects the regions and starts every link as soon as both of its regions are reachable; a region
   * that is down only holds back its own links (they show `starting` with the reason). Resolves when
   * every link runs, or after `startWaitMs` with the rest still coming up in the background. Rejects
   * on a fatal problem found meanwhile (credentials refused, a guard that refuses under `strict`).
   */
  async start(): Promise<void> {
    if (this.current !== "created") return;
    this.setState("starting");
    const mine = this.linkConfigs;
    if (mine.length === 0) this.logger.warn("no link has this region as its destination: nothing to do");
    const regionNames = new Set([this.region, ...mine.map((l) => l.from.region)]);
    const connecting = new Map<string, Promise<NatsConnection>>();
    for (const name of regionNames) {
      const region = this.config.regions.get(name);
      if (!region) continue;
      const role = name === this.region ? "local" : "remote";
      const nc = connectRegion(region, {
        name: `jetstream-relay/${this.region}/${role}:${name}`,
        logger: this.logger,
        signal: this.abort.signal,
      }).then((c) => {
        this.connections.set(name, c);
        return c;
      });
      nc.catch(() => undefined); // observed by the links that wait for it
      connecting.set(name, nc);
    }
    const local = connecting.get(this.region);
    if (local && mine.length > 0) {
      local.then((nc) => this.joinGroup(nc), () => undefined);
    }
    let fatal: unknown;
    const started = Promise.all(
      mine.map((config) =>
        this.startLink(config, connecting).catch((err: unknown) => {
          fatal ??= err;
        }),
      ),
    );
    await Promise.race([started, sleep(this.deps.startWaitMs ?? 5_000, this.abort.signal)]);
    if (fatal !== undefined) throw fatal;
    if (!this.abort.signal.aborted) this.setState("running");
  }

  /** Joins the region's group: members are seen, and links are placed over them (DESIGN §9). */
  private joinGroup(nc: NatsConnection): void {
    if (this.abort.signal.aborted || this.membership) return;
    const { group } = this.config;
    const domain = this.config.regions.get(this.region)?.domain;
    const self = { id: this.memberId, name: this.deps.memberName ?? hostname() };
    this.membership = new GroupMembership({
      nc,
      domain,
      bucket: group.bucket,
      member: self,
      leaseMs: group.leaseMs,
      renewMs: group.renewMs,
      logger: this.regionLogger.child({ component: "group" }),
    });
    this.coordinator = new GroupCoordinator(this.membership, self, this.regionLogger.child({ component: "group" }), (members) => this.metrics.groupMembers.set(members.length));
    for (const link of this.links) this.coordinator.add(link.placed);
    this.membership.start();
  }

  private async startLink(config: LinkConfig, connecting: ReadonlyMap<string, Promise<NatsConnection>>): Promise<void> {
    const sourceRegion = this.config.regions.get(config.from.region);
    const sourceConn = connecting.get(config.from.region);
    const destConn = connecting.get(this.region);
    if (!sourceRegion || !sourceConn || !destConn) return;
    this.waiting.set(config.name, { config, reason: `connecting to regions ${config.from.region} and ${this.region}` });
    try {
      const [source, dest] = await Promise.all([sourceConn, destConn]);
      if (this.abort.signal.aborted) return;
      const logger = this.regionLogger.child({ component: "link", link: config.name });
      const guard = await createGuard(config.guard, {
        logger: this.regionLogger.child({ component: "guard", link: config.name }),
        scope: `${config.to.region}:${config.to.stream}`,
        linkName: config.name,
        fence: leaseKey(config),
      });
      const destDomain = this.config.regions.get(this.region)?.domain;
      const lease = new LinkLease({
        nc: dest,
        ...(destDomain ? { domain: destDomain } : {}),
        bucket: this.config.group.bucket,
        key: leaseKey(config),
        owner: this.memberId,
        leaseMs: this.config.group.leaseMs,
        renewMs: this.config.group.renewMs,
        logger: this.regionLogger.child({ component: "lease", link: config.name }),
        onTransition: (reason) => {
          this.metrics.leaseTransitions.inc({ link: config.name, reason });
          if (reason !== "renewed-late") this.metrics.linkOwner.set({ link: config.name }, reason === "acquired" ? 1 : 0);
        },
      });
      // Placement decides who takes it: not this relay until it has seen its group.
      lease.setEligible(false);
      this.metrics.linkOwner.set({ link: config.name }, 0);
      const link = new Link({
        config,
        links: this.config.links,
        sourceRegion,
        source,
        dest,
        ...(destDomain ? { destDomain } : {}),
        lease,
        guard,
        metrics: this.metrics,
        logger,
        ...(this.deps.pollIntervalMs ? { pollIntervalMs: this.deps.pollIntervalMs } : {}),
        progressIntervalMs: this.config.log.progressIntervalMs,
      });
      this.links.push(link);
      this.waiting.delete(config.name);
      this.coordinator?.add(link.placed);
      await link.start();
    } catch (err) {
      if (this.abort.signal.aborted) return;
      const relayErr = toRelayError(err);
      this.waiting.set(config.name, { config, reason: relayErr.message, failed: relayErr });
      this.logger.error({ link: config.name, code: relayErr.code, err: relayErr.message }, "link cannot start");
      throw relayErr;
    }
  }

  /** Drains every link within `signal`'s deadline, then closes the connections. Idempotent. */
  stop(signal?: AbortSignal): Promise<void> {
    this.stopping ??= (async () => {
      this.setState("stopping");
      this.abort.abort();
      // Leave the group first: the others place this relay's links on themselves while it drains, and
      // take each lease the moment it is released.
      // (Its key's delete goes out at once; an unreachable bucket does not hold up the drain.)
      this.coordinator?.stop();
      const leaving = this.membership?.stop();
      await Promise.all(this.links.map((l) => l.stop(signal)));
      await leaving;
      await Promise.all([...this.connections.values()].map((nc) => nc.drain().catch(() => nc.close())));
      this.setState("stopped");
      this.resolveClosed();
    })();
    return this.stopping;
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  status(): RelayStatus {
    const placeholders = [...this.waiting.values()].map((w) => waitingStatus(w.config, w.reason, w.failed));
    return {
      region: this.region,
      startedAt: this.startedAt.toISOString(),
      links: [...this.links.map((l) => l.status()), ...placeholders],
      ...(this.membership ? { group: this.groupStatus(this.membership) } : {}),
    };
  }

  private groupStatus(membership: GroupMembership): GroupStatus {
    const placement = this.coordinator?.placement() ?? new Map<string, string>();
    const names = new Map(this.links.map((l) => [l.placed.unit, l.name]));
    return {
      bucket: this.config.group.bucket,
      member: this.memberId,
      name: this.deps.memberName ?? hostname(),
      members: membership.members.map((m) => ({
        ...m,
        placed: [...placement].filter(([, id]) => id === m.id).map(([unit]) => names.get(unit) ?? unit).sort(),
      })),
    };
  }

  readiness(): { ready: boolean; reasons: string[] } {
    const reasons: string[] = [];
    if (this.current !== "running") reasons.push(`relay is ${this.current}`);
    for (const l of this.links) {
      // A standby link is healthy: another relay of the group owns it, this one is ready to take over.
      if (!READY_STATES.has(l.currentState)) reasons.push(`link ${l.name} is ${l.currentState}`);
    }
    for (const [name, w] of this.waiting) reasons.push(`link ${name}: ${w.reason}`);
    return { ready: reasons.length === 0, reasons };
  }

  private setState(next: RelayState): void {
    this.current = next;
    this.logger.info({ state: next }, `relay ${next}`);
  }
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
