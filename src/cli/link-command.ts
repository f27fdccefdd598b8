import { hostname, userInfo } from "node:os";
import { parseArgs } from "node:util";
import type { KV } from "@nats-io/kv";
import { pino } from "pino";
import { leaseKey } from "../config/lease-key.js";
import { loadConfig } from "../config/load.js";
import { linkUnits } from "../config/partitions.js";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { openGroupBucket } from "../group/bucket.js";
import { controlKey, describePause, readControl, writeControl } from "../group/link-control.js";
import type { LinkControlValue } from "../group/link-control.js";
import { startKey, writeExplicitStart } from "../group/link-position.js";
import { describeStartAt } from "../link/start-at.js";
import { closeSessions, openRegion } from "../nats/region-session.js";
import type { RegionSession } from "../nats/region-session.js";
import type { CommandSpec } from "./args.js";
import { helpText } from "./args.js";

/**
 * `jetstream-relay link pause|resume|status`: an operator's pause of a link, kept in the region's group
 * bucket (group/link-control.ts) so that every relay of the group honours it, one that restarts too.
 * A paused link finishes and acks what it holds and pulls nothing more (the rest waits in the source
 * consumer); resumed, it pulls again at once.
 */
export const linkSpec: CommandSpec = {
  name: "link",
  summary: "pause|resume|status|start-at: pause a link across its region's group of relays (it finishes what it holds, then pulls nothing), resume it; give the start of a link halted with POSITION_UNKNOWN",
  usage:
    "jetstream-relay link pause LINK --config FILE [--region NAME] --reason TEXT [--by WHO]\n" +
    "       jetstream-relay link resume LINK --config FILE [--region NAME] [--reason TEXT] [--by WHO]\n" +
    "       jetstream-relay link status [LINK] --config FILE [--region NAME] [--json]\n" +
    "       jetstream-relay link start-at LINK (--seq N | --as-configured) --config FILE [--region NAME] [--reason TEXT] [--by WHO]\n" +
    "LINK: a link's name (a partitioned link: all its partitions), or one partition (NAME/p0)",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    region: { type: "string", short: "r", description: "the link's destination region, whose group runs it (default: the link's own)" },
    reason: { type: "string", description: "pause: why (required; shown in /status and the relays' logs); resume: optional" },
    by: { type: "string", description: "who asks (default: user@host)" },
    json: { type: "boolean", description: "status: print JSON" },
    seq: { type: "string", description: "start-at: the source sequence a link whose position is unknown (POSITION_UNKNOWN) starts at" },
    "as-configured": { type: "boolean", description: "start-at: the link has no record (a new link): it starts where its startAt says" },
  },
};

const SUBCOMMANDS = ["pause", "resume", "status", "start-at"] as const;
export type LinkSubcommand = (typeof SUBCOMMANDS)[number];

export interface LinkArgs {
  readonly sub: LinkSubcommand;
  /** The link or partition named (status: absent for every link). */
  readonly link?: string;
  readonly config: string;
  readonly region?: string;
  readonly reason?: string;
  readonly by?: string;
  readonly json: boolean;
  readonly help: boolean;
  /** start-at: the source sequence, or `"startAt"` (--as-configured). */
  readonly seq?: number | "startAt";
}

function usage(message: string): RelayError {
  return new RelayError(ErrorCodes.USAGE, `link: ${message}\n\n${helpText(linkSpec)}`);
}

/** The command line after `link`: the subcommand, the link and the options; USAGE errors otherwise. */
export function parseLinkArgs(argv: readonly string[]): LinkArgs {
  const [sub, ...rest] = argv;
  if (sub === undefined) throw usage("give a subcommand: pause, resume, status or start-at");
  if (sub === "--help" || sub === "-h") return { sub: "status", config: "", json: false, help: true };
  if (!SUBCOMMANDS.includes(sub as LinkSubcommand)) throw usage(`unknown subcommand "${sub}" (use pause, resume, status or start-at)`);
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: rest,
      options: { ...Object.fromEntries(Object.entries(linkSpec.options).map(([k, o]) => [k, { type: o.type, ...(o.short ? { short: o.short } : {}) }])), help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: true,
    });
  } catch (err) {
    throw usage((err as Error).message);
  }
  const { values, positionals } = parsed;
  const help = values["help"] === true;
  const str = (k: string) => (typeof values[k] === "string" && values[k] !== "" ? (values[k] as string) : undefined);
  if (help) return { sub: sub as LinkSubcommand, config: str("config") ?? "", json: false, help };
  if (positionals.length > 1) throw usage(`${sub}: one link at a time (got ${positionals.join(", ")})`);
  const link = positionals[0];
  if (sub !== "status" && link === undefined) throw usage(`${sub}: name the link (jetstream-relay link ${sub} LINK ...)`);
  const config = str("config");
  if (config === undefined) throw usage("--config is required");
  const reason = str("reason");
  if (sub === "pause" && reason === undefined) throw usage('pause: --reason is required (say why, e.g. --reason "destination maintenance")');
  if (sub === "status" && (reason !== undefined || str("by") !== undefined)) throw usage("status: --reason and --by belong to pause and resume");
  if (sub !== "status" && values["json"]) throw usage("--json belongs to status");
  const seqText = str("seq");
  if (sub !== "start-at" && seqText !== undefined) throw usage("--seq belongs to start-at");
  const configured = values["as-configured"] === true;
  if (sub !== "start-at" && configured) throw usage("--as-configured belongs to start-at");
  if (configured && seqText !== undefined) throw usage("start-at: --seq or --as-configured, not both");
  const seq = configured ? "startAt" : seqText === undefined ? undefined : Number(seqText);
  if (sub === "start-at" && seq !== "startAt" && (seq === undefined || !Number.isSafeInteger(seq) || seq < 1)) throw usage(`start-at: --seq N is required, a source sequence >= 1 (got ${seqText ?? "none"}), or --as-configured`);
  const region = str("region");
  const by = str("by");
  return {
    sub: sub as LinkSubcommand,
    ...(link !== undefined ? { link } : {}),
    config,
    ...(region !== undefined ? { region } : {}),
    ...(reason !== undefined ? { reason } : {}),
    ...(by !== undefined ? { by } : {}),
    json: values["json"] === true,
    help: false,
    ...(seq !== undefined ? { seq } : {}),
  };
}

/** Who is asking, when --by does not say: user@host. */
export function defaultBy(): string {
  let user: string | undefined;
  try {
    user = userInfo().username;
  } catch {
    user = process.env["USER"] ?? process.env["USERNAME"];
  }
  return `${user || "unknown"}@${hostname()}`;
}

/**
 * The link units named (a partitioned link by its name: all its partitions; `NAME/p<i>`: one), or every
 * unit (`name` absent), of the links whose destination is `region` when one is given.
 */
export function selectLinkUnits(config: RelayConfig, name: string | undefined, region: string | undefined): LinkConfig[] {
  if (region !== undefined && !config.regions.has(region)) {
    throw new RelayError(ErrorCodes.USAGE, `link: --region ${region} is not in the config (regions: ${[...config.regions.keys()].join(", ")})`);
  }
  const all = config.links.flatMap((l) => linkUnits(l));
  const named = name === undefined ? all : all.filter((u) => u.name === name || u.partition?.link === name);
  if (named.length === 0) {
    throw new RelayError(ErrorCodes.USAGE, `link: unknown link "${name ?? ""}" (links in the config: ${config.links.map((l) => l.name).join(", ") || "none"})`);
  }
  if (region === undefined) return named;
  const inRegion = named.filter((u) => u.to.region === region);
  if (inRegion.length === 0 && name !== undefined) {
    throw new RelayError(ErrorCodes.USAGE, `link: link "${name}" is relayed into region ${named[0]?.to.region}, not ${region}: its group is that region's`);
  }
  return inRegion;
}

/** Exit codes: 0 done, 1 a region or its bucket could not be reached, 2 usage or config (an unknown link). */
export async function linkCommand(argv: readonly string[]): Promise<number> {
  const args = parseLinkArgs(argv);
  if (args.help) {
    console.log(helpText(linkSpec));
    return 0;
  }
  const config = await loadConfig(args.config);
  const units = selectLinkUnits(config, args.link, args.region);
  const by = args.by ?? defaultBy();
  const logger = pino({ level: "silent" });
  const sessions = new Map<string, RegionSession>();
  const results: { link: string; key: string; region: string; control?: LinkControlValue }[] = [];
  try {
    // Each destination region keeps its links' keys in its own group bucket.
    for (const regionName of [...new Set(units.map((u) => u.to.region))]) {
      const region = config.regions.get(regionName);
      if (!region) continue;
      const session = await openRegion(region, { name: "jetstream-relay/link", logger, timeoutMs: 5_000, checkApi: false });
      sessions.set(regionName, session);
      if (!session.ok) throw new RelayError(ErrorCodes.NATS_CONNECT, session.reason);
      let kv: KV;
      try {
        kv = await openGroupBucket({ nc: session.nc, domain: region.domain, bucket: config.group.bucket, timeoutMs: 5_000 });
      } catch (err) {
        throw new RelayError(ErrorCodes.JETSTREAM_API, `region ${regionName}: group bucket ${config.group.bucket}: ${(err as Error).message}`);
      }
      const at = new Date().toISOString();
      for (const unit of units.filter((u) => u.to.region === regionName)) {
        const key = leaseKey(unit);
        if (args.sub === "start-at" && args.seq !== undefined) {
          await writeExplicitStart(kv, key, { seq: args.seq, by, at, reason: args.reason ?? "" });
          console.log(
            `${unit.name}: start ${args.seq === "startAt" ? `where its startAt says (${describeStartAt(unit.startAt)})` : `at source seq ${args.seq}`} [region ${regionName}, bucket ${config.group.bucket}, key ${startKey(key)}]: applies only while the link's position is unknown (halted with POSITION_UNKNOWN), once; restart the relay that halted it`,
          );
          continue;
        }
        const where = `[region ${regionName}, bucket ${config.group.bucket}, key ${controlKey(key)}]`;
        const before = await readControl(kv, key);
        if (args.sub === "status") {
          results.push({ link: unit.name, key: controlKey(key), region: regionName, ...(before ? { control: before } : {}) });
          if (!args.json) console.log(`${unit.name}: ${describe(before)} ${where}`);
          continue;
        }
        if (args.sub === "resume" && !before?.paused) {
          console.log(`${unit.name}: not paused, nothing to resume ${where}`);
          continue;
        }
        const value: LinkControlValue = { paused: args.sub === "pause", reason: args.reason ?? "", by, at };
        await writeControl(kv, key, value);
        console.log(
          args.sub === "pause"
            ? `${unit.name}: ${describePause(value)} ${where}: every relay of region ${regionName}'s group finishes what it holds and pulls nothing more (within about a second)`
            : `${unit.name}: resumed by ${by} at ${at} ${where}: the relay that owns it pulls again at once`,
        );
      }
    }
    if (args.sub === "status" && args.json) console.log(JSON.stringify(results, null, 2));
    return 0;
  } finally {
    await closeSessions(sessions.values());
  }
}

function describe(value: LinkControlValue | undefined): string {
  if (!value) return "not paused";
  if (value.paused) return describePause(value);
  return `not paused (resumed by ${value.by || "?"} at ${value.at || "?"}${value.reason ? `: ${value.reason}` : ""})`;
}
