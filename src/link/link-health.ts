/**
 * The link's troubles and the state that follows from them (DESIGN §5): each side's trouble raised and
 * cleared, the link's own last error, and the one derivation of `LinkState` from the troubles, who owns
 * the link, a running resync and the backlog.
 */
import type { Logger } from "pino";
import { ErrorCodes, RelayError } from "../errors.js";
import type { RelayMetrics } from "../observability/metrics.js";
import type { BacklogReading } from "./backlog.js";
import type { LinkStateMachine } from "./link-state.js";
import type { LinkError, Trouble } from "./link-status.js";

export interface LinkHealthDeps {
  readonly link: string;
  /** The link's configured in-flight limit: a backlog above it is `catching-up`. */
  readonly inFlight: number;
  readonly state: Pick<LinkStateMachine, "state" | "set">;
  readonly metrics: Pick<RelayMetrics, "errors">;
  readonly logger: Logger;
  /** The link stopping: its state is final. */
  readonly signal: AbortSignal;
  /** Who holds the lease, and whether placement wants this relay to. */
  readonly lease: { readonly holder: string | undefined; readonly isEligible: boolean };
  readonly ownership: {
    readonly standby: boolean;
    readonly tookOver: boolean;
    atWork(): void;
  };
  readonly resync: {
    readonly running: boolean;
    readonly pending: string | undefined;
  };
  /** Why the guard's loss pauses the link (the operator's instructions). */
  guardLossReason(): string | undefined;
  /** The last backlog reading. */
  backlog(): BacklogReading | undefined;
}

export class LinkHealth {
  private readonly troubles = new Set<Trouble>();
  /** Who paused the link, when and why (an operator: `jetstream-relay link pause`). */
  private operatorReason: string | undefined;
  /** The reason the link is `stalled` now. */
  private stallReason: string | undefined;
  private error: LinkError | undefined;

  constructor(private readonly deps: LinkHealthDeps) {}

  /** The link's own last error (shown in /status beside the pipeline's). */
  get lastError(): LinkError | undefined {
    return this.error;
  }

  has(kind: Trouble): boolean {
    return this.troubles.has(kind);
  }

  /** No trouble holds the link back, but perhaps a stall. */
  nothingButStalled(): boolean {
    for (const t of this.troubles) if (t !== "stalled") return false;
    return true;
  }

  /** The link's own last error (shown in /status beside the pipeline's). */
  noteError(err: RelayError): void {
    this.error = { code: err.code, message: err.message, at: new Date().toISOString() };
  }

  trouble(kind: Trouble, err: RelayError): void {
    this.noteError(err);
    // The pipeline counts its own publish and guard errors; the link counts the source side's.
    if (kind === "source") this.deps.metrics.errors.inc({ link: this.deps.link, code: err.code });
    if (!this.troubles.has(kind)) this.deps.logger.warn({ side: kind, code: err.code, err: err.message }, "link trouble");
    this.troubles.add(kind);
    this.refresh();
  }

  clear(...kinds: Trouble[]): void {
    for (const k of kinds) this.troubles.delete(k);
    this.refresh();
  }

  /** The source is stalled (why): no progress (stall-watch.ts), or no heartbeat on the pull (link-watch.ts). */
  stalled(reason: string): void {
    this.stallReason = reason;
    this.trouble("stalled", new RelayError(ErrorCodes.SOURCE_STALLED, reason));
  }

  /** An operator paused the link: `paused` (never `stalled`: nothing is pulled on purpose) until resumed. */
  operatorPaused(reason: string): void {
    this.operatorReason = reason;
    this.troubles.add("operator");
    this.refresh();
  }

  operatorResumed(): void {
    this.operatorReason = undefined;
    this.clear("operator");
  }

  /** The stall watch sees progress again. */
  stallEnded(): void {
    if (this.stallReason !== undefined && this.troubles.has("stalled")) this.clear("stalled");
    this.stallReason = undefined;
  }

  /** The state follows from the troubles and the backlog; `failed`/`stopped` are final. */
  refresh(): void {
    const { state, lease, ownership, resync } = this.deps;
    if (this.deps.signal.aborted) return;
    const reason = this.error?.message;
    if (ownership.standby) {
      const holder = lease.holder;
      if (holder !== undefined) return state.set("standby", `relay ${holder} owns the link (group lease)`);
      if (!lease.isEligible) return state.set("standby", "placed on another relay of the group: waiting for it to take the lease");
      // Nobody else owns it: this relay is on its way to take it. A link that was at work here is
      // recovering (e.g. the region was unreachable); one starting or on standby is taking the link over,
      // which is no recovery episode of its own (relay_recoveries_total counts this relay's outages).
      if (state.state === "starting" || state.state === "standby") return state.set(state.state, "no relay holds the link lease: this relay is taking it");
      return state.set("recovering", "waiting for the link lease");
    }
    if (resync.running) return state.set("resyncing", `resync after ${resync.pending ?? "request"}`);
    if (this.troubles.has("guard-state")) return state.set("paused", this.deps.guardLossReason() ?? reason);
    if (this.troubles.has("guard") || this.troubles.has("refused") || this.troubles.has("guard-unsafe")) return state.set("paused", reason);
    if (this.troubles.has("operator")) return state.set("paused", this.operatorReason);
    if (this.troubles.has("stalled")) return state.set("stalled", this.stallReason ?? reason);
    if (this.troubles.size > 0) return state.set("recovering", reason);
    // Just took the link over: at work at once, whatever the last backlog reading (from before) said.
    if (ownership.tookOver || state.state === "standby") {
      ownership.atWork();
      return state.set("catching-up", "this relay owns the link now");
    }
    const backlog = this.deps.backlog();
    if (!backlog) return;
    state.set(backlog.pending > this.deps.inFlight ? "catching-up" : "live");
  }
}
