/**
 * The link's side of an operator's pause (group/link-control.ts): whether the consume loop may pull.
 * Paused, the link stops pulling, finishes and acks what it holds, and pulls nothing more: what it did
 * not pull stays in the source consumer. Resumed, it pulls again at once. Until the group bucket's
 * control keys have been read once (`awaitControl`), it pulls nothing either: a relay restarted while
 * the link is paused must not take a batch before it knows.
 */
import type { Logger } from "pino";
import { describePause } from "../group/link-control.js";
import type { LinkControlValue } from "../group/link-control.js";
import type { RelayMetrics } from "../observability/metrics.js";

export interface OperatorPauseDeps {
  readonly link: string;
  readonly metrics: Pick<RelayMetrics, "linkPaused">;
  readonly logger: Logger;
  /** Pull nothing until the control value is known (set once); false: known not paused from the start. */
  readonly awaitControl: boolean;
  readonly events: {
    /** Paused (or paused again with a new reason): the state follows, the pull stops. */
    paused(reason: string): void;
    resumed(): void;
  };
}

export class OperatorPause {
  private value: LinkControlValue | undefined;
  private known: boolean;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly deps: OperatorPauseDeps) {
    this.known = !deps.awaitControl;
    deps.metrics.linkPaused.set({ link: deps.link }, 0);
  }

  /** An operator has paused the link. */
  get paused(): boolean {
    return this.value?.paused === true;
  }

  /** The consume loop pulls nothing: paused, or not known yet. */
  get holding(): boolean {
    return !this.known || this.paused;
  }

  /** The pause in force, as `/status` shows it (undefined: not paused). */
  get pause(): LinkControlValue | undefined {
    return this.paused ? this.value : undefined;
  }

  /** The unit's control value, as read from the group bucket (undefined: nobody paused it). */
  set(value: LinkControlValue | undefined): void {
    const was = this.paused ? this.value : undefined;
    this.known = true;
    this.value = value;
    const now = this.pause;
    this.deps.metrics.linkPaused.set({ link: this.deps.link }, now ? 1 : 0);
    if (now && (!was || was.at !== now.at || was.by !== now.by || was.reason !== now.reason)) {
      this.deps.logger.warn({ by: now.by, at: now.at, reason: now.reason }, `link ${describePause(now)}: it finishes what it holds and pulls nothing more`);
      this.deps.events.paused(`${describePause(now)} (jetstream-relay link resume to go on)`);
    } else if (!now && was) {
      const who = value ? { by: value.by, at: value.at, reason: value.reason } : { by: "?", at: new Date().toISOString(), reason: "control key deleted" };
      this.deps.logger.info(who, `link resumed by ${who.by} at ${who.at}${who.reason ? `: ${who.reason}` : ""}`);
      this.deps.events.resumed();
    }
    for (const wake of this.waiters) wake();
  }

  /** Resolves on the next change of the value, or when `signal` aborts. */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.waiters.delete(done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      if (signal.aborted) return resolve();
      this.waiters.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
