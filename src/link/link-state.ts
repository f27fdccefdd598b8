import type { Logger } from "pino";
import { LINK_STATES } from "../observability/metrics.js";
import type { LinkState, RelayMetrics } from "../observability/metrics.js";

const UP_STATES: ReadonlySet<LinkState> = new Set(["live", "catching-up"]);
const TROUBLE_STATES: ReadonlySet<LinkState> = new Set(["recovering", "paused", "stalled"]);

/**
 * The one place a link's state changes (DESIGN §5). Every change is logged once, exported as
 * `relay_link_state{state}` / `relay_link_up`, and recovery episodes (from the first trouble state
 * until `live` again) are counted and timed.
 */
export class LinkStateMachine {
  private current: LinkState = "starting";
  private since = Date.now();
  private troubleSince: number | undefined;
  private lastReason: string | undefined;
  private readonly transitions: { state: LinkState; at: string; reason?: string }[] = [];

  constructor(
    private readonly link: string,
    private readonly metrics: RelayMetrics,
    private readonly logger: Logger,
  ) {
    this.transitions.push({ state: "starting", at: new Date(this.since).toISOString() });
    this.export();
  }

  get state(): LinkState {
    return this.current;
  }

  get sinceMs(): number {
    return this.since;
  }

  get reason(): string | undefined {
    return this.lastReason;
  }

  /** The last 20 states entered, oldest first (what an operator reads after an incident). */
  get history(): readonly { state: LinkState; at: string; reason?: string }[] {
    return this.transitions;
  }

  /**
   * Changes state. Unchanged, only a new reason is kept (no log line, no history entry): e.g. a standby
   * link learning which relay owns it. `stopped` and `failed` are final until `reset()`.
   */
  set(next: LinkState, reason?: string): void {
    if (next === this.current) {
      if (reason !== undefined) this.lastReason = reason;
      return;
    }
    if ((this.current === "failed" || this.current === "stopped") && next !== "stopped") return;
    const prev = this.current;
    this.current = next;
    this.since = Date.now();
    this.lastReason = reason;
    this.transitions.push({ state: next, at: new Date(this.since).toISOString(), ...(reason ? { reason } : {}) });
    if (this.transitions.length > 20) this.transitions.shift();
    const level = next === "failed" ? "error" : TROUBLE_STATES.has(next) ? "warn" : "info";
    this.logger[level]({ from: prev, to: next, reason }, `link ${next}`);
    if (TROUBLE_STATES.has(next) && this.troubleSince === undefined) this.troubleSince = Date.now();
    if (next === "live" && this.troubleSince !== undefined) {
      this.metrics.recoveries.inc({ link: this.link });
      this.metrics.recoveryDuration.observe({ link: this.link }, (Date.now() - this.troubleSince) / 1000);
      this.troubleSince = undefined;
    }
    this.export();
  }

  private export(): void {
    for (const s of LINK_STATES) this.metrics.linkState.set({ link: this.link, state: s }, s === this.current ? 1 : 0);
    this.metrics.linkUp.set({ link: this.link }, UP_STATES.has(this.current) ? 1 : 0);
  }
}
