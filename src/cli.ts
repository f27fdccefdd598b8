#!/usr/bin/env node
import { ErrorCodes, isRelayError } from "./errors.js";

type Command = (argv: readonly string[]) => Promise<number>;

/** Each command's module is loaded when it runs: `run` does not carry what only `check` or `verify` need. */
const COMMANDS: Record<string, { summary: string; load: () => Promise<Command> }> = {
  run: {
    summary: "run the links whose destination is --region",
    load: async () => (await import("./cli/run-command.js")).runCommand,
  },
  check: {
    summary: "validate a config file and show what each region's relay runs",
    load: async () => (await import("./cli/check-command.js")).checkCommand,
  },
  config: {
    summary: "expand: print the links a config's meshes expand to, as YAML",
    load: async () => (await import("./cli/config-command.js")).configCommand,
  },
  streams: {
    summary: "plan|apply: create or update the streams and bucket the links need in each region",
    load: async () => (await import("./cli/streams-command.js")).streamsCommand,
  },
  status: {
    summary: "print a running relay's link status as a table",
    load: async () => (await import("./cli/status-command.js")).statusCommand,
  },
  verify: {
    summary: "compare both sides of a link by id: missing, duplicated, out of order, and what is expected",
    load: async () => (await import("./cli/verify-command.js")).verifyCommand,
  },
  repair: {
    summary: "publish into the destination the messages verify finds missing (Relay-Repair: true, after later ones)",
    load: async () => (await import("./cli/repair-command.js")).repairCommand,
  },
  guard: {
    summary: "status|resume: the guard's scope markers; resume a link paused with GUARD_STATE_LOST",
    load: async () => (await import("./cli/guard-command.js")).guardCommand,
  },
  link: {
    summary: "pause|resume|status|start-at: pause a link across its region's group of relays, resume it; give the start of a link whose position is unknown",
    load: async () => (await import("./cli/link-command.js")).linkCommand,
  },
  health: {
    summary: "exit 0 when this config's relay answers /healthz (container health checks)",
    load: async () => (await import("./cli/health-command.js")).healthCommand,
  },
  demo: {
    summary: "two local regions, traffic, an injected failure, and the numbers",
    load: async () => (await import("./cli/demo-command.js")).demoCommand,
  },
};

function usage(): string {
  const lines = ["usage: jetstream-relay <command> [options]", "", "commands:"];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(8)} ${c.summary}`);
  lines.push("", "jetstream-relay <command> --help for the command's options; --version for the version");
  return lines.join("\n");
}

/** The package's version: package.json sits one level above both src/ and dist/ (and in the image). */
async function version(): Promise<string> {
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}

/** Exit codes: 0 ok, 1 runtime failure, 2 bad config or usage. */
async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === "--version" || name === "-V" || name === "version") {
    console.log(`jetstream-relay ${await version()}`);
    return 0;
  }
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
    return await (
      await command.load()
    )(rest);
  } catch (err) {
    if (isRelayError(err) && (err.code === ErrorCodes.CONFIG_INVALID || err.code === ErrorCodes.USAGE)) {
      console.error(err.message);
      return 2;
    }
    const code = isRelayError(err) ? err.code : ErrorCodes.INTERNAL;
    console.error(
      `jetstream-relay ${name} failed [${code}]: ${err instanceof Error ? err.message : String(err)}`,
    );
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
