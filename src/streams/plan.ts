/**
 * `streams plan`: connects to the selected regions (and the regions of their links' sources), reads
 * what is there, and plans each region (diff.ts). The sessions stay open for `apply`; the caller
 * closes them (closeSessions).
 */
import { pino } from "pino";
import type { Logger } from "pino";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { planRegionItems } from "./diff.js";
import { readRegion, readSource, sourceNotes } from "./inspect.js";
import { regionNeeds } from "./needs.js";
import { openRegion } from "../nats/region-session.js";
import type { RegionSession } from "../nats/region-session.js";
import type { RegionPlan, StreamsPlan } from "./types.js";

export interface PlanOptions {
  /** Only this region (a USAGE error when the config has no such region). */
  readonly region?: string;
  readonly force?: boolean;
  /** Give up on a region's first connect after this long (ms). Default 5 s. */
  readonly connectTimeoutMs?: number;
  readonly logger?: Logger;
}

/** The regions to plan: `region`, or every region that is some link's destination (config order). */
export function selectRegions(config: RelayConfig, region: string | undefined): string[] {
  if (region !== undefined) {
    if (!config.regions.has(region)) {
      throw new RelayError(
        ErrorCodes.USAGE,
        `streams: --region ${region} is not a region of the config (known: ${[...config.regions.keys()].join(", ")})`,
      );
    }
    return [region];
  }
  return [...config.regions.keys()].filter((r) => config.links.some((l) => l.to.region === r));
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export async function planStreams(
  config: RelayConfig,
  opts: PlanOptions = {},
): Promise<{ plan: StreamsPlan; sessions: Map<string, RegionSession> }> {
  const regions = selectRegions(config, opts.region);
  const logger = opts.logger ?? pino({ level: "silent" });
  const timeoutMs = opts.connectTimeoutMs ?? 5_000;
  const links = config.links.filter((l) => regions.includes(l.to.region));
  const needed = new Set([...regions, ...links.map((l) => l.from.region)]);
  const sessions = new Map<string, RegionSession>();
  await Promise.all(
    [...needed].map(async (name) => {
      const region = config.regions.get(name);
      if (region) sessions.set(name, await openRegion(region, { name: "jetstream-relay/streams", logger, timeoutMs }));
    }),
  );

  const sources = new Map<string, Promise<StreamFact>>();
  const sourceFacts = new Map<LinkConfig, StreamFact>();
  await Promise.all(
    links.map(async (l) => {
      const key = `${l.from.region}/${l.from.stream}`;
      let p = sources.get(key);
      if (!p) {
        p = readSource(sessions.get(l.from.region), l.from.stream);
        sources.set(key, p);
      }
      sourceFacts.set(l, await p);
    }),
  );
  const sourceOf = (l: LinkConfig): StreamFact => sourceFacts.get(l) ?? { kind: "unreachable" };

  const planned = await Promise.all(
    regions.map(async (region): Promise<RegionPlan> => {
      const session = sessions.get(region);
      if (!session || !session.ok)
        return { region, error: session?.ok === false ? session.reason : "not connected", items: [] };
      const head = {
        region,
        server: session.server,
        ...(session.version ? { serverVersion: session.version } : {}),
        clustered: session.clustered,
      };
      const needs = regionNeeds(config, region, sourceOf);
      try {
        const { existing, owners } = await readRegion(session.jsm, needs);
        const facts = {
          needs,
          existing,
          owners,
          server: { ...(session.version ? { version: session.version } : {}), clustered: session.clustered },
          sources: sourceNotes(config, region, sourceOf, sessions),
        };
        return { ...head, items: planRegionItems(region, facts, { force: opts.force === true }) };
      } catch (err) {
        return { ...head, error: `region ${region}: cannot list its streams: ${message(err)}`, items: [] };
      }
    }),
  );
  return { plan: { force: opts.force === true, regions: planned }, sessions };
}
