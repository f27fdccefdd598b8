import type { Registry } from "prom-client";
import type { ReloadResult } from "../observability/metrics.js";

/** What `/status` says about the config: which one runs, since when, and how the last reload went. */
export interface ConfigStatus {
  /** Hash of the config last loaded (config/compile.ts `configHash`; secrets are left out). */
  readonly hash: string;
  /** When it was loaded: at start, or by the last successful reload. */
  readonly loadedAt: string;
  /** Settings of the loaded file that wait for a restart (the running value is kept). */
  readonly needsRestart?: readonly string[];
  readonly lastReload?: ReloadReport;
}

export interface ReloadReport {
  readonly at: string;
  /** What asked for it: `SIGHUP`, `watch`, or `api` (a direct call). */
  readonly trigger: string;
  readonly result: ReloadResult;
  /** Why it failed (the config error, free of secrets); nothing changed. */
  readonly error?: string;
  /** Link units (a partitioned link's partitions by name) by what the reload did to them. */
  readonly added?: readonly string[];
  readonly removed?: readonly string[];
  readonly changed?: readonly string[];
  readonly unchanged?: readonly string[];
  readonly needsRestart?: readonly string[];
  /**
   * Added or changed links that were not running when the reload ended (it waits a few seconds for
   * them), with why: a start that failed (its error, as `/status` shows it for the link: a consumer
   * whose filter differs, a guard that refuses) or one still under way (a region not reachable yet).
   * Any of them makes the result `partial`.
   */
  readonly notStarted?: readonly { readonly link: string; readonly reason: string }[];
  /** Running link units that took a change in place (`maxRate`), without a drain or a restart. */
  readonly retuned?: readonly string[];
}

interface LabelledMetric {
  readonly labelNames?: readonly string[];
  get(): Promise<{ values: { labels: Record<string, string | number | undefined> }[] }>;
  remove(labels: Record<string, string | number>): void;
}

/**
 * Removes every series of a link that is gone (its states, owner, backlog and counters): a removed
 * link must not look stopped, ownerless or stale to the alerts until the next restart.
 */
export async function forgetLinkSeries(registry: Registry, link: string): Promise<void> {
  for (const metric of registry.getMetricsAsArray() as unknown as LabelledMetric[]) {
    const names = metric.labelNames ?? [];
    if (!names.includes("link")) continue;
    const seen = new Set<string>();
    for (const { labels } of (await metric.get()).values) {
      if (labels["link"] !== link) continue;
      const own: Record<string, string | number> = {};
      for (const name of names) {
        const value = labels[name];
        if (value !== undefined) own[name] = value;
      }
      const key = JSON.stringify(own);
      if (seen.has(key)) continue;
      seen.add(key);
      metric.remove(own);
    }
  }
}
