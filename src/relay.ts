import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { Registry } from "prom-client";
import type { RelayConfig } from "./config/types.js";
import { ErrorCodes, RelayError } from "./errors.js";
import { createGuard } from "./guard/create-guard.js";
import { Link } from "./link/link.js";
import type { LinkStatus } from "./link/link.js";
import { connectRegion } from "./nats/connect.js";
import { createMetrics } from "./observability/metrics.js";
import type { RelayMetrics } from "./observability/metrics.js";

export interface RelayDeps {
  readonly logger: Logger;
  /** One registry per relay (several relays may share a process in tests). */
  readonly registry?: Registry;
  /** Links' backlog/state refresh interval (ms). */
  readonly pollIntervalMs?: number;
}

export interface RelayStatus {
  readonly region: string;
  readonly startedAt: string;
  readonly links: readonly LinkStatus[];
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
  private readonly startedAt = new Date();
  private readonly logger: Logger;
  private current: RelayState = "created";
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
    this.logger = deps.logger.child({ component: "relay", region });
  }

  get state(): RelayState {
    return this.current;
  }

  /** The links this relay runs: those whose destination is its region. */
  get linkConfigs() {
    return this.config.links.filter((l) => l.to.region === this.region);
  }

  /** Connects the regions (waiting for them if they are down) and starts every link. */
  async start(signal?: AbortSignal): Promise<void> {
    if (this.current !== "created") return;
    this.setState("starting");
    const mine = this.linkConfigs;
    if (mine.length === 0) this.logger.warn("no link has this region as its destination: nothing to do");
    const regionNames = new Set([this.region, ...mine.map((l) => l.from.region)]);
    for (const name of regionNames) {
      const region = this.config.regions.get(name);
      if (!region) continue;
      const role = name === this.region ? "local" : "remote";
      const nc = await connectRegion(region, {
        name: `jetstream-relay/${this.region}/${role}:${name}`,
        logger: this.logger,
        ...(signal ? { signal } : {}),
      });
      this.connections.set(name, nc);
    }
    for (const config of mine) {
      const sourceRegion = this.config.regions.get(config.from.region);
      const source = this.connections.get(config.from.region);
      const dest = this.connections.get(this.region);
      if (!sourceRegion || !source || !dest) continue;
      const logger = this.deps.logger.child({ component: "link", region: this.region });
      const guard = createGuard(config.guard, {
        logger: logger.child({ link: config.name, component: "guard" }),
        scope: `${config.to.region}:${config.to.stream}`,
        linkName: config.name,
      });
      const link = new Link({
        config,
        links: this.config.links,
        sourceRegion,
        source,
        dest,
        guard,
        metrics: this.metrics,
        logger,
        ...(this.deps.pollIntervalMs ? { pollIntervalMs: this.deps.pollIntervalMs } : {}),
      });
      this.links.push(link);
      await link.start();
    }
    this.setState("running");
  }

  /** Drains every link within `signal`'s deadline, then closes the connections. Idempotent. */
  stop(signal?: AbortSignal): Promise<void> {
    this.stopping ??= (async () => {
      this.setState("stopping");
      await Promise.all(this.links.map((l) => l.stop(signal)));
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
    return { region: this.region, startedAt: this.startedAt.toISOString(), links: this.links.map((l) => l.status()) };
  }

  readiness(): { ready: boolean; reasons: string[] } {
    const reasons: string[] = [];
    if (this.current !== "running") reasons.push(`relay is ${this.current}`);
    for (const l of this.links) {
      if (l.currentState !== "live" && l.currentState !== "catching-up") reasons.push(`link ${l.name} is ${l.currentState}`);
    }
    return { ready: reasons.length === 0, reasons };
  }

  private setState(next: RelayState): void {
    this.current = next;
    this.logger.info({ state: next }, `relay ${next}`);
  }
}
