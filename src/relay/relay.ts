import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { Registry } from "prom-client";
import { configHash } from "../config/compile.js";
import { planReload, unitKeys, unitsOf, type ReloadPlan } from "../config/diff.js";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { sleep } from "../lifecycle/backoff.js";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { createGuard } from "../guard/create-guard.js";
import { GroupCoordinator } from "../group/coordinator.js";
import { LinkLease } from "../group/lease.js";
import { GroupMembership } from "../group/membership.js";
import { groupSessions } from "../group/session-judge.js";
import { LinkControls } from "../group/link-control.js";
import { LinkPositions } from "../group/link-position.js";
import { leaseKey } from "../config/lease-key.js";
import { Link } from "../link/link.js";
import { createMetrics, type RelayMetrics } from "../observability/metrics.js";
import { WriteGates } from "../nats/write-gate.js";
import { StreamListings } from "../nats/stream-listing.js";
import { RoundTrips } from "../nats/round-trips.js";
import { RTT_WAIT_MS } from "../link/link-window.js";
import { RegionConnections, close } from "./connections.js";
import { PlacementSlots } from "./placement.js";
import { forgetLinkSeries, type ReloadReport } from "./reload.js";
import { TickGrid } from "../lifecycle/tick-grid.js";
import { LeaseKeyWatches } from "../group/lease-wakeup.js";
import { readinessOf, relayStatus, type RelayStatus, type WaitingLink } from "./status.js";

export type { ConfigStatus, ReloadReport } from "./reload.js";
export type { GroupStatus, RelayStatus } from "./status.js";

export interface RelayDeps {
  readonly logger: Logger;
  /** One registry per relay (several relays may share a process in tests). */
  readonly registry?: Registry;
  /** Links' backlog/state refresh interval (ms). */
  readonly pollIntervalMs?: number;
  /** The relay's clock (ms since the epoch; default Date.now): tests run a relay with a skewed one. */
  readonly clock?: () => number;
  /** How long `start()` waits for links whose regions are not reachable yet (default 5 s). */
  readonly startWaitMs?: number;
  /**
   * This relay's stable name in its group (the host or pod name; default: the hostname): what places
   * links on it, so a restarted relay gets its links back.
   */
  readonly memberName?: string;
}

export type RelayState = "created" | "starting" | "running" | "stopping" | "stopped";

/**
 * A relay runs the links whose destination is its region: consume remotely, publish locally (DESIGN §1).
 * It owns one connection per region it talks to, shared by its links, and one more to its own region for
 * the group (leases and membership): lease renewals never wait behind publishes. Lifecycle: `start()`,
 * idempotent `stop(signal)`, `closed()`.
 */
export class Relay {
  readonly registry: Registry;
  readonly metrics: RelayMetrics;
  private readonly connections: RegionConnections;
  /** Ownership checked again when a link's bytes leave its connections (one gate per connection). */
  private readonly writeGates: WriteGates;
  /** One round-trip measurement per connection for all the links on it. */
  private readonly roundTrips = new RoundTrips(RTT_WAIT_MS);
  /** One listing of each source connection's streams, shared by its links at rest (stream-listing.ts). */
  private readonly streamListings = new StreamListings();
  private links: Link[] = [];
  /** Links not running yet (a region is still connecting) or that could not start. */
  private readonly waiting = new Map<string, WaitingLink>();
  private readonly abort = new AbortController();
  private readonly startedAt = new Date();
  /** One grid for the links' periodic work: their renewals and polls leave in a few writes, not one each. */
  private readonly ticks = new TickGrid();
  /** One watch over the group bucket for all the links' leases (created with the logger). */
  private readonly leaseWatches: LeaseKeyWatches;
  private readonly logger: Logger;
  private readonly regionLogger: Logger;
  private current: RelayState = "created";
  /** This process in its region's group: names it in every lease it holds. Never reused. */
  readonly memberId = `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
  private membership: GroupMembership | undefined;
  private readonly sessions: ReturnType<typeof groupSessions>; // its key's writes renew its leases (member-session.ts)
  /** Operators' pauses (the group bucket's control keys), followed by every link; set when the group starts. */
  private controls: LinkControls | undefined;
  /** Each link's unfollow of its control key. */
  private readonly unfollow = new Map<Link, () => void>();
  private joining = false;
  private readonly placement = new PlacementSlots();
  private config: RelayConfig;
  private loaded: { hash: string; at: Date };
  private lastReload: ReloadReport | undefined;
  private needsRestart: readonly string[] = [];
  /** Reloads run one at a time. */
  private reloading: Promise<unknown> = Promise.resolve();
  private stopping: Promise<void> | undefined;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(
    config: RelayConfig,
    private readonly region: string,
    private readonly deps: RelayDeps,
  ) {
    this.config = config;
    if (!config.regions.has(region)) {
      throw new RelayError(
        ErrorCodes.USAGE,
        `--region ${region}: not in the config (regions: ${[...config.regions.keys()].join(", ")})`,
      );
    }
    this.registry = deps.registry ?? new Registry();
    this.metrics = createMetrics(this.registry);
    // One key per name on every line (strict JSON parsers reject duplicates): `region` is this relay's
    // own region, bound once here; components and links are bound once, on loggers made from it.
    this.regionLogger = deps.logger.child({ region });
    this.leaseWatches = new LeaseKeyWatches(this.regionLogger.child({ component: "lease" }));
    this.logger = this.regionLogger.child({ component: "relay" });
    this.sessions = groupSessions(config.group, this.regionLogger.child({ component: "group" }), { evicted: () => this.metrics.groupEvictions.inc(), ended: () => this.metrics.groupSessionEnds.inc(), over: (proof) => this.metrics.groupSessionsOver.inc({ proof }) });
    this.writeGates = new WriteGates({
      logger: this.logger,
      discarded: (_connection, writers) => {
        for (const link of writers) this.metrics.writesDiscarded.inc({ link });
      },
    });
    this.connections = new RegionConnections({
      region,
      regions: () => this.config.regions,
      logger: this.logger,
      signal: this.abort.signal,
      onChange: () => {
        this.metrics.connectionUp.reset();
        for (const c of this.connections.status())
          if (c.state !== "closed") this.metrics.connectionUp.set({ region: c.region, role: c.role }, c.state === "connected" ? 1 : 0);
      },
    });
    this.loaded = { hash: configHash(config), at: new Date() };
    this.metrics.configInfo.set({ hash: this.loaded.hash }, 1);
    this.metrics.configLoaded.set(this.loaded.at.getTime() / 1000);
  }

  get state(): RelayState {
    return this.current;
  }

  /** The links this relay runs: those whose destination is its region, a partitioned link as its partitions. */
  get linkConfigs(): LinkConfig[] {
    return unitsOf(this.config, this.region);
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
    void this.connections.get(this.region); // the local region first: the group and every link need it
    if (mine.length > 0) void this.connections.ownership();
    if (mine.length > 0) this.joinGroup();
    let fatal: unknown;
    const started = Promise.all(
      mine.map((config) =>
        this.startLink(config).catch((err: unknown) => {
          fatal ??= err;
        }),
      ),
    );
    await Promise.race([started, sleep(this.deps.startWaitMs ?? 5_000, this.abort.signal)]);
    if (fatal !== undefined) throw fatal;
    if (!this.abort.signal.aborted) this.setState("running");
  }

  /** Joins the region's group once its ownership connection is up: members are seen, links placed over them. */
  private joinGroup(): void {
    if (this.joining) return;
    this.joining = true;
    this.connections.ownership()?.then(
      (nc) => this.startGroup(nc),
      () => undefined,
    );
  }

  private startGroup(nc: NatsConnection): void {
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
      sessions: this.sessions, onBucketFailure: (kind) => this.metrics.groupBucketFailures.inc({ kind }),
    });
    const membership = this.membership;
    const logger = this.regionLogger.child({ component: "group" });
    this.placement.start(
      new GroupCoordinator(membership, self, logger, (members) => {
        this.metrics.groupMembers.set(members.length);
        this.metrics.groupSettingsMismatch.set(membership.settingsMismatch.length);
      }),
    );
    this.membership.start();
    this.controls ??= new LinkControls({ bucket: group.bucket, refreshMs: group.renewMs, logger: this.regionLogger.child({ component: "control" }) });
    this.controls.start(nc, domain);
    for (const link of this.links) this.followControl(link);
  }

  /** The link honours its control key (an operator's pause); it pulls nothing until the key is read. */
  private followControl(link: Link): void {
    if (!this.controls || this.unfollow.has(link)) return;
    this.unfollow.set(link, this.controls.follow(link.placed.unit, (value) => link.setControl(value)));
  }

  private async startLink(config: LinkConfig): Promise<void> {
    const sourceRegion = this.config.regions.get(config.from.region);
    const sourceConn = this.connections.get(config.from.region);
    const destConn = this.connections.get(this.region);
    // Leases have their own connection: a window of large publishes queued on `dest` cannot hold a
    // renewal past its deadline (the owner would fence itself).
    const ownershipConn = this.connections.ownership();
    if (!sourceRegion || !sourceConn || !destConn || !ownershipConn) return;
    const entry = { config, reason: `connecting to regions ${config.from.region} and ${this.region}` };
    this.waiting.set(config.name, entry);
    // A reload that removes or changes the link meanwhile takes its entry away: this start is called off.
    const cancelled = () => this.abort.signal.aborted || this.waiting.get(config.name) !== entry;
    let link: Link | undefined;
    try {
      const [source, dest, ownership] = await Promise.all([sourceConn, destConn, ownershipConn]);
      if (cancelled()) return;
      const logger = this.regionLogger.child({ component: "link", link: config.name });
      const guard = await createGuard(config.guard, {
        logger: this.regionLogger.child({ component: "guard", link: config.name }),
        scope: `${config.to.region}:${config.to.stream}`,
        linkName: config.name,
        fence: leaseKey(config),
      });
      if (cancelled()) return;
      const destDomain = this.config.regions.get(this.region)?.domain;
      const lease = new LinkLease({
        nc: ownership,
        ...(destDomain ? { domain: destDomain } : {}),
        bucket: this.config.group.bucket,
        key: leaseKey(config),
        owner: this.memberId,
        leaseMs: this.config.group.leaseMs,
        renewMs: this.config.group.renewMs,
        ticks: this.ticks,
        keyWatches: this.leaseWatches,
        sessions: this.sessions,
        logger: this.regionLogger.child({ component: "lease", link: config.name }),
        onTransition: (reason) => {
          this.metrics.leaseTransitions.inc({ link: config.name, reason });
          if (reason !== "renewed-late") this.metrics.linkOwner.set({ link: config.name }, reason === "acquired" ? 1 : 0);
        },
        onHoldOff: (reason) => this.metrics.leaseHoldOffs.inc({ link: config.name, reason }),
      });
      // Placement decides who takes it: not this relay until it has seen its group.
      lease.setEligible(false);
      this.metrics.linkOwner.set({ link: config.name }, 0);
      link = new Link({
        config,
        links: () => this.config.links, // the running config's: a new direct route applies without a restart
        sourceRegion,
        source,
        dest,
        ...(destDomain ? { destDomain } : {}),
        lease,
        guard,
        metrics: this.metrics,
        logger,
        ...(this.deps.pollIntervalMs ? { pollIntervalMs: this.deps.pollIntervalMs } : {}),
        ticks: this.ticks,
        ...(this.deps.clock ? { clock: this.deps.clock } : {}),
        writeGates: this.writeGates,
        roundTrips: this.roundTrips,
        streamListings: this.streamListings,
        progressIntervalMs: this.config.log.progressIntervalMs,
        awaitControl: true,
        positions: new LinkPositions({ nc: ownership, domain: destDomain, bucket: this.config.group.bucket, timeoutMs: 5_000 }).of(leaseKey(config)),
      });
      this.links.push(link);
      this.followControl(link);
      this.waiting.delete(config.name);
      this.placement.attach(link, link.placed);
      await link.start();
    } catch (err) {
      if (this.abort.signal.aborted || (!link && this.waiting.get(config.name) !== entry)) return;
      if (link) await this.dropLink(link, AbortSignal.abort(), false);
      const relayErr = toRelayError(err);
      this.waiting.set(config.name, { config, reason: relayErr.message, failed: relayErr });
      this.logger.error(
        { link: config.name, code: relayErr.code, err: relayErr.message },
        "link cannot start",
      );
      throw relayErr;
    }
  }

  /** Drains every link within `signal`'s deadline, then closes the connections. Idempotent. */
  stop(signal?: AbortSignal): Promise<void> {
    this.stopping ??= (async () => {
      this.setState("stopping");
      this.abort.abort();
      // Leave the group first (its key says `leaving`; its session lasts until the links released their
      // leases, then the key goes): the others place its links on themselves and take each lease at once.
      this.placement.stop();
      this.membership?.leave();
      await Promise.all(this.links.map((l) => l.stop(signal)));
      await this.reloading; // a reload's drains end with the relay's (it starts nothing once stopping)
      await Promise.all(this.links.map((l) => l.stop(signal)));
      await this.membership?.stop();
      await this.controls?.stop();
      await this.connections.closeAll();
      this.setState("stopped");
      this.resolveClosed();
    })();
    return this.stopping;
  }

  /**
   * Applies a new config, loaded and validated, without a restart (config/diff.ts says what applies
   * live): removed and changed links drain and stop, releasing their leases; new links start, changed
   * ones again with the new config; the others are not touched. One reload at a time. Rejects, changing
   * nothing, when `next` lacks this relay's region or the relay is not running.
   */
  reload(next: RelayConfig, trigger = "api"): Promise<ReloadReport> {
    const run = this.reloading.then(() => this.applyReload(next, trigger));
    this.reloading = run.catch(() => undefined);
    return run;
  }

  /** Records a reload that failed before it got here (unreadable or invalid file): nothing changed. */
  reloadFailed(err: unknown, trigger: string): ReloadReport {
    const e = toRelayError(err);
    this.lastReload = { at: new Date().toISOString(), trigger, result: "failure", error: e.message };
    this.metrics.configReloads.inc({ result: "failure" });
    this.logger.error(
      { trigger, code: e.code, err: e.message },
      "config reload failed: nothing changed, the running config stays",
    );
    return this.lastReload;
  }

  private async applyReload(next: RelayConfig, trigger: string): Promise<ReloadReport> {
    if (this.current !== "running")
      throw new RelayError(ErrorCodes.USAGE, `cannot reload the config: the relay is ${this.current}`);
    let plan: ReloadPlan;
    try {
      plan = planReload(this.config, next, this.region);
    } catch (err) {
      this.reloadFailed(err, trigger);
      throw err;
    }
    // What changes in place (maxRate) applies to a running link; one not running yet is started with it.
    const idle = plan.retuned.filter((u) => !this.links.some((l) => l.name === u.name));
    if (idle.length > 0) plan = { ...plan, changed: [...plan.changed, ...idle], retuned: plan.retuned.filter((u) => !idle.includes(u)) };
    const at = new Date();
    this.deps.logger.level = next.log.level;
    this.config = plan.effective;
    for (const path of plan.needsRestart)
      this.logger.warn({ path }, `needs a restart: ${path} (the running value is kept until then)`);
    for (const unit of plan.retuned) for (const link of this.links.filter((l) => l.name === unit.name)) link.setMaxRate(unit.maxRate);
    // What goes or changes stops: a start still waiting is called off, a running link drains (within shutdown.grace).
    const drain = AbortSignal.timeout(next.shutdownGraceMs);
    const stopping = new Set([...plan.removed, ...plan.changed.map((u) => u.name)]);
    const keys = new Set<string>();
    const stops: Promise<void>[] = [];
    for (const name of stopping) {
      const waiting = this.waiting.get(name);
      if (waiting) keys.add(leaseKey(waiting.config));
      this.waiting.delete(name);
      for (const link of this.links.filter((l) => l.name === name)) {
        keys.add(link.placed.unit);
        stops.push(this.dropLink(link, drain, plan.removed.includes(name)));
      }
    }
    this.placement.prune(unitKeys(this.config, this.region));
    // A source region with new connection settings: its links (all changed) get a new connection.
    const replaced = plan.reconnect.map((r) => this.connections.forget(r));
    // A unit taking over a name or lease key that is stopping starts after the stop; the others at once.
    const starts: Promise<void>[] = [];
    const later: LinkConfig[] = [];
    for (const unit of [...plan.added, ...plan.changed]) {
      if (stopping.has(unit.name) || keys.has(leaseKey(unit))) later.push(unit);
      else starts.push(this.startLink(unit).catch(() => undefined));
    }
    if (this.linkConfigs.length > 0) this.joinGroup();
    await Promise.all(stops);
    const used = new Set([this.region, ...this.linkConfigs.map((u) => u.from.region)]);
    const unused = this.connections
      .names()
      .filter((r) => !used.has(r))
      .map((r) => this.connections.forget(r));
    await Promise.all([...replaced, ...unused].map(close));
    starts.push(...later.map((u) => this.startLink(u).catch(() => undefined)));
    const waitUntil = Date.now() + (this.deps.startWaitMs ?? 5_000);
    await Promise.race([Promise.all(starts), sleep(waitUntil - Date.now(), this.abort.signal)]);
    // A started link still takes its lease and reads its cursor: within the same wait, see it run or fail.
    const reloaded = [...plan.added, ...plan.changed].map((u) => u.name);
    const starting = () => this.links.some((l) => reloaded.includes(l.name) && l.currentState === "starting");
    while (starting() && Date.now() < waitUntil && !this.abort.signal.aborted) await sleep(50, this.abort.signal);

    const hash = configHash(next);
    const names = (units: readonly LinkConfig[]) => units.map((u) => u.name);
    const notStarted = reloaded.flatMap((name) => {
      const waiting = this.waiting.get(name);
      if (waiting) return [{ link: name, reason: waiting.failed ? waiting.reason : `still starting: ${waiting.reason}` }];
      const link = this.links.find((l) => l.name === name);
      if (!link) return [{ link: name, reason: "still starting" }];
      const { state, stateReason } = link.status();
      if (state === "failed") return [{ link: name, reason: stateReason ?? "failed" }];
      return state === "starting" ? [{ link: name, reason: `still starting: ${stateReason ?? ""}` }] : [];
    });
    const result = plan.needsRestart.length > 0 || notStarted.length > 0 ? "partial" : "success";
    const report: ReloadReport = {
      at: at.toISOString(),
      trigger,
      result,
      added: names(plan.added),
      removed: [...plan.removed],
      changed: names(plan.changed),
      unchanged: [...plan.unchanged],
      needsRestart: [...plan.needsRestart],
      ...(notStarted.length > 0 ? { notStarted } : {}),
      ...(plan.retuned.length > 0 ? { retuned: names(plan.retuned) } : {}),
    };
    this.loaded = { hash, at };
    this.lastReload = report;
    this.needsRestart = plan.needsRestart;
    this.metrics.configReloads.inc({ result });
    this.metrics.configInfo.reset();
    this.metrics.configInfo.set({ hash }, 1);
    this.metrics.configLoaded.set(at.getTime() / 1000);
    const counts = `${plan.added.length} added, ${plan.removed.length} removed, ${plan.changed.length} changed, ${plan.unchanged.length} unchanged`;
    this.logger[notStarted.length > 0 ? "warn" : "info"](
      { ...report, hash, tookMs: Date.now() - at.getTime() },
      `config reloaded (${result}): ${counts}${notStarted.length > 0 ? `; not started: ${notStarted.map((n) => n.link).join(", ")}` : ""}`,
    );
    return report;
  }

  /** Stops a link (after a drain until `signal`) and takes it out; `forget`: its metric series too. */
  private async dropLink(link: Link, signal: AbortSignal, forget: boolean): Promise<void> {
    this.placement.detach(link);
    this.unfollow.get(link)?.();
    this.unfollow.delete(link);
    await link
      .stop(signal)
      .catch((err: unknown) =>
        this.logger.warn({ link: link.name, err: toRelayError(err).message }, "link did not stop cleanly"),
      );
    this.links = this.links.filter((l) => l !== link);
    if (!forget) return;
    // A stopped link writes no series any more (a backlog reading that returns late is dropped).
    await forgetLinkSeries(this.registry, link.name).catch((err: unknown) =>
      this.logger.warn({ link: link.name, err: toRelayError(err).message }, "could not remove the link's metrics"),
    );
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  status(): RelayStatus {
    return relayStatus({
      region: this.region,
      startedAt: this.startedAt,
      links: this.links,
      waiting: this.waiting,
      ...(this.membership ? { group: { membership: this.membership, bucket: this.config.group.bucket, member: this.memberId, name: this.deps.memberName ?? hostname(), placement: this.placement.placement() } } : {}),
      config: {
        hash: this.loaded.hash,
        loadedAt: this.loaded.at.toISOString(),
        ...(this.needsRestart.length > 0 ? { needsRestart: this.needsRestart } : {}),
        ...(this.lastReload ? { lastReload: this.lastReload } : {}),
      },
      connections: this.connections.status(),
    });
  }

  readiness(): { ready: boolean; reasons: string[] } {
    return readinessOf(this.current, this.links, this.waiting);
  }

  private setState(next: RelayState): void {
    this.current = next;
    this.logger.info({ state: next }, `relay ${next}`);
  }
}
