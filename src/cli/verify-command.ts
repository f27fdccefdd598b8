import { loadConfig } from "../config/load.js";
import { secretsOf } from "../config/redact.js";
import { createLogger } from "../observability/logger.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { formatKvReport } from "../verify/kv-report.js";
import { findKvLink, verifyKvLink } from "../verify/kv-verify.js";
import { formatReport } from "../verify/report.js";
import { parseSince } from "../verify/since.js";
import { findLink, verifyLink } from "../verify/verify.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const verifySpec: CommandSpec = {
  name: "verify",
  summary:
    "compare both sides of one link by message id: missing, duplicated, out of order, versions gone backwards " +
    "(unexpected); dead-lettered, superseded, not forwarded, not yet relayed (expected); with --kv, a KV link's " +
    "two buckets key by key (latest value and version, tombstones)",
  usage: "jetstream-relay verify --config FILE --link NAME [--since TIME] [--json]\n       jetstream-relay verify --config FILE --link NAME --kv [--json]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    link: { type: "string", short: "l", description: "the link to verify (its name in the config)" },
    since: {
      type: "string",
      description: "only messages at/after TIME: RFC 3339, or a duration back from now (1h)",
    },
    kv: {
      type: "boolean",
      description: "a KV link: compare its two buckets key by key (latest entry, version, tombstones; see docs/verify.md)",
    },
    json: { type: "boolean", description: "print the report as JSON" },
  },
};

/**
 * Exit codes: 0 the two sides agree: every difference is an expected one (not yet relayed,
 * dead-lettered, superseded, not forwarded, bad but not confirmed), or with `--kv` both buckets hold
 * the same latest entry for every key; 1 they differ: something is
 * missing, duplicated, out of order or an entity's version went backwards (or the check itself failed:
 * then stderr says `failed [CODE]` and nothing is printed on stdout); 2 config or usage error (thrown as
 * CONFIG_INVALID / USAGE; the CLI maps them). A progress line per phase is drawn on stderr when it is a
 * terminal, never with `--json`.
 */
export async function verifyCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(verifySpec, argv);
  if (values.help) {
    console.log(helpText(verifySpec));
    return 0;
  }
  const path = requireString(verifySpec, values, "config");
  const name = requireString(verifySpec, values, "link");
  if (values.kv && values.since !== undefined) {
    throw new RelayError(ErrorCodes.USAGE, "verify --kv: --since does not apply (a bucket is compared by each key's latest entry)");
  }
  const since = typeof values.since === "string" ? parseSince(values.since) : undefined;
  const config = await loadConfig(path);
  // USAGE, listing the links (or saying the link is not a KV link), before any connection is tried.
  const link = values.kv ? findKvLink(config, name) : findLink(config, name);
  if (!values.kv && link.from.bucket !== undefined) {
    throw new RelayError(ErrorCodes.USAGE, `verify: link "${name}" is a KV link: verify it with --kv (its buckets keep only the winning writes, not every message)`);
  }
  // Logs go to stderr, so that stdout holds only the report (`--json` output stays parseable).
  const logger = createLogger({
    level: "warn",
    destination: process.stderr,
    pretty: false,
    secrets: secretsOf(config),
  });
  if (values.kv) {
    const report = await verifyKvLink(config, name, { logger, ...(values.json ? {} : { progress: process.stderr }) });
    console.log(values.json ? JSON.stringify(report, null, 2) : formatKvReport(report));
    return report.agree ? 0 : 1;
  }
  const report = await verifyLink(config, name, {
    logger,
    ...(since ? { since } : {}),
    ...(values.json ? {} : { progress: process.stderr }),
  });
  console.log(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
  return report.agree ? 0 : 1;
}
