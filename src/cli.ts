#!/usr/bin/env node
import { ErrorCodes, isRelayError } from "./errors.js";
import { checkCommand } from "./cli/check-command.js";
import { demoCommand } from "./cli/demo-command.js";
import { runCommand } from "./cli/run-command.js";
import { statusCommand } from "./cli/status-command.js";
import { verifyCommand } from "./cli/verify-command.js";

const COMMANDS: Record<string, { summary: string; run: (argv: readonly string[]) => Promise<number> }> = {
  run: { summary: "run the links whose destination is --region", run: runCommand },
  check: { summary: "validate a config file and show what each region's relay runs", run: checkCommand },
  status: { summary: "print a running relay's link status as a table", run: statusCommand },
  verify: { summary: "compare both sides of a link by id: missing, duplicated, versions gone backwards", run: verifyCommand },
  demo: { summary: "two local regions, traffic, an injected failure, and the numbers", run: demoCommand },
};

function usage(): string {
  const lines = ["usage: jetstream-relay <command> [options]", "", "commands:"];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(8)} ${c.summary}`);
  lines.push("", "jetstream-relay <command> --help for the command's options");
  return lines.join("\n");
}

/** Exit codes: 0 ok, 1 runtime failure, 2 bad config or usage. */
async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    console.error(`unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  try {
    return await command.run(rest);
  } catch (err) {
    if (isRelayError(err) && (err.code === ErrorCodes.CONFIG_INVALID || err.code === ErrorCodes.USAGE)) {
      console.error(err.message);
      return 2;
    }
    const code = isRelayError(err) ? err.code : ErrorCodes.INTERNAL;
    console.error(`jetstream-relay ${name} failed [${code}]: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // Connections and timers are closed by now; exit explicitly so a stray handle cannot keep us up.
    setTimeout(() => process.exit(code), 100).unref();
  },
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
