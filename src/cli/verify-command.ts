import { loadConfig } from "../config/load.js";
import { secretsOf } from "../config/redact.js";
import { createLogger } from "../observability/logger.js";
import { formatReport } from "../verify/report.js";
import { parseSince } from "../verify/since.js";
import { findLink, verifyLink } from "../verify/verify.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const verifySpec: CommandSpec = {
  name: "verify",
  summary:
    "compare both sides of one link by message id: missing, duplicated, out of order, versions gone backwards " +
    "(unexpected); dead-lettered, superseded, not forwarded, not yet relayed (expected)",
  usage: "jetstream-relay verify --config FILE --link NAME [--since TIME] [--json]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    link: { type: "string", short: "l", description: "the link to verify (its name in the config)" },
    since: {
      type: "string",
      description: "only messages at/after TIME: RFC 3339, or a duration back from now (1h)",
    },
    json: { type: "boolean", description: "print the report as JSON" },
  },
};

/**
 * Exit codes: 0 the two sides agree: every difference is an expected one (not yet relayed,
 * dead-lettered, superseded, not forwarded, bad but not confirmed); 1 they differ: something is
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
  const since = typeof values.since === "string" ? parseSince(values.since) : undefined;
  const config = await loadConfig(path);
  findLink(config, name); // USAGE, listing the links, before any connection is tried
  // Logs go to stderr, so that stdout holds only the report (`--json` output stays parseable).
  const logger = createLogger({
    level: "warn",
    destination: process.stderr,
    pretty: false,
    secrets: secretsOf(config),
  });
  const report = await verifyLink(config, name, {
    logger,
    ...(since ? { since } : {}),
    ...(values.json ? {} : { progress: process.stderr }),
  });
  console.log(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
  return report.agree ? 0 : 1;
}
