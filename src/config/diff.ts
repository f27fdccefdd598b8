/**
 * What a config reload changes (README "Reloading the config"). Pure: compares the running config with
 * a new one (both loaded and validated) for the relay of one region.
 *
 * Links are compared as the relay runs them: by unit (a link, or each partition of a partitioned link)
 * and name. A unit is unchanged when everything it runs with is the same: its compiled config, its
 * source region's connection settings. Unchanged units are left alone; the others are stopped (after a
 * drain) and started with the new config. The direct routes into a unit's stream (what redundant-path
 * suppression reads) are not part of it: a running link reads them from the config running now, so
 * adding a region to a mesh starts only the new region's links.
 *
 * Settings that cannot change under a running relay are kept at their running value until a restart
 * (`needsRestart`): this relay's own region (its connection carries every link, the group and the
 * leases), `group` (a bucket or lease timing that differs between members would break ownership), and
 * `http.listen`. A source region's connection settings do change live: its connection is replaced and
 * its links restarted. `log.level`, `http.token`, `http.protectMetrics`, `shutdown.grace` and
 * `reload.watch` apply at once. A link's `maxRate` changes in place (`retuned`): the running link
 * takes the new cap without a drain.
 */
import { ErrorCodes, RelayError } from "../errors.js";
import { leaseKey } from "./lease-key.js";
import { canonicalJson } from "./compile.js";
import { linkUnits } from "./partitions.js";
import type { LinkConfig, RegionConfig, RelayConfig } from "./types.js";

export interface ReloadPlan {
  /** Units to start (new names). */
  readonly added: readonly LinkConfig[];
  /** Units to drain and stop. */
  readonly removed: readonly string[];
  /** Units to drain, stop and start again with the config given here. */
  readonly changed: readonly LinkConfig[];
  readonly unchanged: readonly string[];
  /** Regions other than the relay's own whose connection settings changed: their connection is replaced. */
  readonly reconnect: readonly string[];
  /** Config paths whose new value waits for a restart (the running value is kept), e.g. `group.lease`. */
  readonly needsRestart: readonly string[];
  /** What runs after the reload: the new config, with the settings of `needsRestart` as they were. */
  readonly effective: RelayConfig;
  /**
   * Units whose only change is one that applies in place (`maxRate`): the running link takes the new
   * config without a restart (not in `changed`). A unit not running yet is started with it instead.
   */
  readonly retuned: readonly LinkConfig[];
}

/** What a running link takes in place: a unit that differs only in these keeps running. */
const IN_PLACE = ["maxRate"] as const;

/** A unit without the settings that change in place (to compare the rest). */
function withoutInPlace(unit: LinkConfig): LinkConfig {
  const rest: Record<string, unknown> = { ...unit };
  for (const key of IN_PLACE) delete rest[key];
  return rest as unknown as LinkConfig;
}

/** The units the relay of `region` runs: links whose destination is its region, partitions as units. */
export function unitsOf(config: RelayConfig, region: string): LinkConfig[] {
  return config.links.filter((l) => l.to.region === region).flatMap(linkUnits);
}

/** Everything a running unit depends on, as comparable text (may hold secrets: never log it). */
export function unitFingerprint(unit: LinkConfig, config: RelayConfig): string {
  return canonicalJson({
    // startAt applies only to a link without a record, and a running link has one (its consumer): a
    // change alone does not restart it; the new value applies from the link's next start.
    unit: { ...unit, startAt: undefined },
    // Not the direct routes into its stream: a running link reads them from the running config (so a
    // region joining a mesh starts only its own links).
    source: config.regions.get(unit.from.region),
  });
}

/** The lease keys of the units `region` runs under `config` (what group placement places). */
export function unitKeys(config: RelayConfig, region: string): Set<string> {
  return new Set(unitsOf(config, region).map(leaseKey));
}

const REGION_FIELDS = ["servers", "auth", "tls", "domain"] as const;

function regionChanges(
  name: string,
  before: RegionConfig | undefined,
  after: RegionConfig | undefined,
): string[] {
  return REGION_FIELDS.filter((f) => canonicalJson(before?.[f]) !== canonicalJson(after?.[f])).map(
    (f) => `regions.${name}.${f}`,
  );
}

/**
 * Compares `current` (what runs) with `next` for the relay of `region`. Throws CONFIG_INVALID, changing
 * nothing, when `next` has no region `region` (`--region` is fixed for the life of the process).
 */
export function planReload(current: RelayConfig, next: RelayConfig, region: string): ReloadPlan {
  if (!next.regions.has(region)) {
    throw new RelayError(
      ErrorCodes.CONFIG_INVALID,
      `regions: this relay's region "${region}" (--region) is not in the new config (regions: ${[...next.regions.keys()].join(", ")}); --region cannot change while the relay runs`,
    );
  }
  const needsRestart: string[] = regionChanges(region, current.regions.get(region), next.regions.get(region));
  const group = [
    ["bucket", "group.bucket"],
    ["leaseMs", "group.lease"],
    ["renewMs", "group.renew"],
  ] as const;
  for (const [key, path] of group) if (current.group[key] !== next.group[key]) needsRestart.push(path);
  if (current.http.host !== next.http.host || current.http.port !== next.http.port)
    needsRestart.push("http.listen");

  const regions = new Map(next.regions);
  const own = current.regions.get(region);
  if (own) regions.set(region, own);
  const effective: RelayConfig = {
    ...next,
    regions,
    group: current.group,
    http: { ...next.http, host: current.http.host, port: current.http.port },
  };

  const reconnect = [...current.regions.keys()].filter(
    (name) =>
      name !== region &&
      next.regions.has(name) &&
      canonicalJson(current.regions.get(name)) !== canonicalJson(next.regions.get(name)),
  );

  const before = new Map(unitsOf(current, region).map((u) => [u.name, u]));
  const added: LinkConfig[] = [];
  const changed: LinkConfig[] = [];
  const unchanged: string[] = [];
  const retuned: LinkConfig[] = [];
  for (const unit of unitsOf(effective, region)) {
    const old = before.get(unit.name);
    if (!old) added.push(unit);
    else if (unitFingerprint(old, current) === unitFingerprint(unit, effective)) unchanged.push(unit.name);
    else if (unitFingerprint(withoutInPlace(old), current) === unitFingerprint(withoutInPlace(unit), effective)) retuned.push(unit);
    else changed.push(unit);
  }
  const names = new Set([...added, ...changed, ...retuned].map((u) => u.name).concat(unchanged));
  const removed = [...before.keys()].filter((name) => !names.has(name));
  return { added, removed, changed, unchanged, reconnect, needsRestart, effective, retuned };
}
