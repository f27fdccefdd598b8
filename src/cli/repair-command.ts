import { loadConfig } from "../config/load.js";
import { secretsOf } from "../config/redact.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { createLogger } from "../observability/logger.js";
import { formatKvRepair, kvRepairExitCode, repairKvLink } from "../verify/kv-repair.js";
import { findKvLink } from "../verify/kv-verify.js";
import { formatRepair, repairExitCode, repairLink } from "../verify/repair.js";
import { findLink } from "../verify/verify.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const repairSpec: CommandSpec = {
  name: "repair",
  summary:
    "publish into the destination the source messages verify finds missing (same ids, payloads and headers, " +
    "plus Relay-Repair: true), through the link's guard; they arrive after later messages; with --kv, put each " +
    "key's newer write on the bucket that lacks it",
  usage:
    "jetstream-relay repair --config FILE --link NAME [--from-seq N] [--to-seq M] [--dry-run]\n" +
    "       jetstream-relay repair --config FILE --link NAME --kv [--dry-run]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    link: { type: "string", short: "l", description: "the link to repair (its name in the config)" },
    "from-seq": { type: "string", description: "only missing source messages at/after this source sequence" },
    "to-seq": { type: "string", description: "only missing source messages at/before this source sequence" },
    kv: {
      type: "boolean",
      description: "a KV link: put each key's winner (the newer write) on the bucket that lacks it, unless the key changed since the read",
    },
    "dry-run": { type: "boolean", description: "print the plan (verify's missing ids, or with --kv its differences); publish nothing" },
  },
};

function seqOption(values: Record<string, unknown>, key: "from-seq" | "to-seq"): number | undefined {
  const raw = values[key];
  if (raw === undefined) return undefined;
  if (typeof raw !== "string" || !/^[1-9]\d{0,15}$/.test(raw) || !Number.isSafeInteger(Number(raw))) {
    throw new RelayError(ErrorCodes.USAGE, `repair: --${key} ${JSON.stringify(raw)}: want a source stream sequence (1 or more)`);
  }
  return Number(raw);
}

/**
 * Exit codes: 0 nothing left that repair can do (every missing message in range repaired or refused as
 * stale, nothing missing, or a dry run); 1 some message could not be repaired now (still in the
 * destination's duplicate window, in flight, gone from the source, a failed publish) or the command
 * failed; 2 config or usage error (unknown link: the message names it, the config file and its links).
 */
export async function repairCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(repairSpec, argv);
  if (values.help) {
    console.log(helpText(repairSpec));
    return 0;
  }
  const path = requireString(repairSpec, values, "config");
  const name = requireString(repairSpec, values, "link");
  const fromSeq = seqOption(values, "from-seq");
  const toSeq = seqOption(values, "to-seq");
  if (fromSeq !== undefined && toSeq !== undefined && fromSeq > toSeq) {
    throw new RelayError(ErrorCodes.USAGE, `repair: --from-seq ${fromSeq} is after --to-seq ${toSeq}`);
  }
  if (values.kv && (fromSeq !== undefined || toSeq !== undefined)) {
    throw new RelayError(ErrorCodes.USAGE, "repair --kv: --from-seq and --to-seq do not apply (a bucket is repaired key by key)");
  }
  const config = await loadConfig(path);
  // USAGE before any connection is tried: an unknown link, --kv on a stream link or none on a KV link.
  const link = values.kv ? findKvLink(config, name, "repair", path) : findLink(config, name, "repair", path);
  if (!values.kv && link.from.bucket !== undefined) {
    throw new RelayError(ErrorCodes.USAGE, `repair: link "${name}" is a KV link: repair it with --kv`);
  }
  // Logs go to stderr; stdout holds only what repair did.
  const logger = createLogger({
    level: "warn",
    destination: process.stderr,
    pretty: false,
    secrets: secretsOf(config),
  });
  if (values.kv) {
    const kv = await repairKvLink(config, name, { logger, progress: process.stderr, ...(values["dry-run"] ? { dryRun: true } : {}) });
    console.log(formatKvRepair(kv));
    return kvRepairExitCode(kv);
  }
  const result = await repairLink(config, name, {
    logger,
    progress: process.stderr,
    ...(fromSeq === undefined ? {} : { fromSeq }),
    ...(toSeq === undefined ? {} : { toSeq }),
    ...(values["dry-run"] ? { dryRun: true } : {}),
  });
  console.log(formatRepair(result));
  return repairExitCode(result);
}
