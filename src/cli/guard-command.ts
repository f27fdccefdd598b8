import { loadConfig } from "../config/load.js";
import { linkUnits } from "../config/partitions.js";
import type { LinkConfig, RedisGuardConnection, RelayConfig } from "../config/types.js";
import { formatDuration } from "../config/durations.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { leaseKey } from "../config/lease-key.js";
import { markerField, markerGroups, markerKey, readMarker, writeMarker } from "../guard/marker.js";
import {
  connectClient,
  createRedisClient,
  describeRedis,
  sanitizeError,
  secretsOf,
} from "../guard/redis-connection.js";
import type { GuardRedisClient } from "../guard/redis-connection.js";
import type { GuardMarkerEntry } from "../guard/types.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

/**
 * `jetstream-relay guard status|resume`: the scope markers of the Redis guard (loss detection, see
 * src/guard/marker.ts). A link whose guard lost its memory pauses with GUARD_STATE_LOST; `resume`
 * writes its marker entry, which the relay owning the link reads on its next poll (about a second):
 * no restart, and it works whichever relay of a group owns the link.
 */
export const guardSpec: CommandSpec = {
  name: "guard",
  summary:
    "status|resume: the guard's scope markers; resume a link paused with GUARD_STATE_LOST (accept the loss, or --resync)",
  usage:
    "jetstream-relay guard status --config FILE [--link NAME]\n       jetstream-relay guard resume --config FILE (--link NAME | --all) [--resync]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    link: {
      type: "string",
      short: "l",
      description:
        "the link (its name in the config; a partitioned link's partitions: NAME/p0, or all of them by NAME)",
    },
    all: { type: "boolean", description: "resume: every link with a Redis guard" },
    resync: {
      type: "boolean",
      description:
        "resume: ask for a full resync of the link (latest message per subject, then live) instead of accepting the loss",
    },
  },
};

const SUBCOMMANDS = ["status", "resume"] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

/** Exit codes: 0 done (status: every selected link has its marker entry), 1 status found one without, or Redis failed; 2 usage/config. */
export async function guardCommand(argv: readonly string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h") {
    console.log(helpText(guardSpec));
    return sub === undefined ? 2 : 0;
  }
  if (!SUBCOMMANDS.includes(sub as Subcommand)) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `guard: unknown subcommand "${sub}" (use status or resume)\n\n${helpText(guardSpec)}`,
    );
  }
  const values = parseCommandArgs(guardSpec, rest);
  if (values.help) {
    console.log(helpText(guardSpec));
    return 0;
  }
  const config = await loadConfig(requireString(guardSpec, values, "config"));
  const name = typeof values.link === "string" ? values.link : undefined;
  if (sub === "resume" && name === undefined && values.all !== true) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `guard resume: give --link NAME or --all\n\n${helpText(guardSpec)}`,
    );
  }
  if (sub === "status" && (values.resync || values.all)) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `guard status: --resync and --all belong to resume\n\n${helpText(guardSpec)}`,
    );
  }
  const units = selectUnits(config, name);
  const sessions = new Sessions();
  try {
    let missing = 0;
    for (const unit of units) {
      const store = unit.guard?.store as RedisGuardConnection;
      const client = await sessions.open(store);
      const scope = `${unit.to.region}:${unit.to.stream}`;
      const fence = leaseKey(unit);
      const where = `${markerKey(scope)}${store.cluster ? " (and its other slot groups)" : ""} ${markerField(fence)}`;
      const groups = markerGroups(store);
      const entry = await sessions.run(store, () => readMarker(client, scope, fence, groups));
      if (sub === "status") {
        if (!entry) missing++;
        console.log(
          `${unit.name}: ${entry ? describe(entry) : "no marker entry (a new link writes it at start; a link with history pauses with GUARD_STATE_LOST)"}  [${where}]`,
        );
        continue;
      }
      const idTtl = formatDuration(unit.guard?.idTtlMs ?? 0);
      const write = (mark: "resumed" | "resync") =>
        sessions.run(store, () =>
          writeMarker(client, scope, fence, mark, {
            waitReplicas: store.waitReplicas ?? 0,
            groups,
            ...(store.waitTimeoutMs !== undefined ? { waitTimeoutMs: store.waitTimeoutMs } : {}),
          }),
        );
      if (values.resync) {
        await write("resync");
        console.log(
          `${unit.name}: resync requested [${where}]: the relay that owns the link resyncs it (latest message per subject, then live) within about a second`,
        );
      } else if (entry && entry.mark !== "resync") {
        console.log(`${unit.name}: nothing to resume: ${describe(entry)} [${where}]`);
      } else {
        await write("resumed");
        const cancelled = entry ? " (this replaces the resync that was requested)" : "";
        console.log(
          `${unit.name}: resumed${cancelled} [${where}]: the link relays again within about a second. For the next ${idTtl} (idTtl), ` +
            "redeliveries of messages relayed before the loss are caught only by the destination's duplicate window, and versions start over",
        );
      }
    }
    return sub === "status" && missing > 0 ? 1 : 0;
  } finally {
    sessions.close();
  }
}

function describe(entry: GuardMarkerEntry): string {
  switch (entry.mark) {
    case "joined":
      return `marker entry present (joined ${entry.at})`;
    case "resumed":
      return `marker entry present (resumed after a loss ${entry.at})`;
    case "resync":
      return `resync requested ${entry.at}, not done yet`;
    case "resynced":
      return `marker entry present (resynced after a loss ${entry.at})`;
  }
}

/** The link units (a partitioned link's partitions) selected by --link (or all), each with a Redis guard. */
function selectUnits(config: RelayConfig, name: string | undefined): LinkConfig[] {
  const all = config.links.flatMap((l) => linkUnits(l));
  const guarded = (u: LinkConfig): boolean => u.guard?.store.kind === "redis";
  if (name === undefined) return all.filter(guarded);
  const units = all.filter((u) => u.name === name || u.partition?.link === name);
  if (units.length === 0) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `guard: unknown link "${name}" (links in the config: ${config.links.map((l) => l.name).join(", ")})`,
    );
  }
  if (!units.every(guarded)) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `guard: link "${name}" has no Redis guard: only a Redis guard keeps scope markers (a memory guard forgets everything by design)`,
    );
  }
  return units;
}

/** One client per distinct Redis, closed at the end; errors name host:port only, never a secret. */
class Sessions {
  private readonly clients = new Map<string, GuardRedisClient>();

  async open(store: RedisGuardConnection): Promise<GuardRedisClient> {
    const key = JSON.stringify(store);
    const known = this.clients.get(key);
    if (known) return known;
    const timeoutMs = 5_000;
    const client = await this.run(store, async () =>
      createRedisClient(
        store,
        {
          commandTimeoutMs: timeoutMs,
          connectTimeoutMs: timeoutMs,
          startTimeoutMs: timeoutMs,
          maxBackoffMs: 1_000,
        },
        "jetstream-relay/guard",
      ),
    );
    // A late reconnect error must not reach ioredis's unhandled-error printer (its text is not scrubbed).
    client.on("error", () => undefined);
    this.clients.set(key, client);
    await this.run(store, () => connectClient(client, timeoutMs));
    return client;
  }

  async run<T>(store: RedisGuardConnection, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw new RelayError(
        ErrorCodes.GUARD_UNAVAILABLE,
        `${describeRedis(store)}: ${sanitizeError(err, secretsOf(store)).message}`,
      );
    }
  }

  close(): void {
    for (const client of this.clients.values()) client.disconnect();
  }
}
