import { parseArgs } from "node:util";
import { parseHostPort } from "../config/schema.js";
import { ErrorCodes, RelayError } from "../errors.js";

/** `--http HOST:PORT` (port 0 picks a free one); a USAGE error naming the flag otherwise. */
export function parseHttpFlag(text: string): { host: string; port: number } {
  const parsed = parseHostPort(text, 0);
  if (!parsed) throw new RelayError(ErrorCodes.USAGE, `--http ${JSON.stringify(text)}: expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:9464`);
  return parsed;
}

export interface CommandSpec {
  readonly name: string;
  readonly summary: string;
  readonly usage: string;
  /** `env`: the environment variable a missing string option is read from (container images set them). */
  readonly options: Record<string, { type: "string" | "boolean"; short?: string; description: string; env?: string }>;
}

/** parseArgs with USAGE errors that name the command, and `--help` on every command. */
export function parseCommandArgs(spec: CommandSpec, argv: readonly string[]) {
  try {
    const { values } = parseArgs({
      args: [...argv],
      options: { ...Object.fromEntries(Object.entries(spec.options).map(([k, o]) => [k, { type: o.type, ...(o.short ? { short: o.short } : {}) }])), help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    });
    return values as Record<string, string | boolean | undefined>;
  } catch (err) {
    throw new RelayError(ErrorCodes.USAGE, `${spec.name}: ${(err as Error).message}\n\n${helpText(spec)}`);
  }
}

export function requireString(spec: CommandSpec, values: Record<string, unknown>, key: string): string {
  const v = values[key];
  const fromEnv = spec.options[key]?.env === undefined ? undefined : process.env[spec.options[key].env];
  if (typeof v === "string" && v !== "") return v;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const env = spec.options[key]?.env;
  throw new RelayError(ErrorCodes.USAGE, `${spec.name}: --${key} is required${env ? ` (or set ${env})` : ""}\n\n${helpText(spec)}`);
}

export function helpText(spec: CommandSpec): string {
  const lines = [`jetstream-relay ${spec.name}: ${spec.summary}`, "", `usage: ${spec.usage}`, "", "options:"];
  for (const [name, o] of Object.entries(spec.options)) {
    const flag = `${o.short ? `-${o.short}, ` : "    "}--${name}${o.type === "string" ? " VALUE" : ""}`;
    lines.push(`  ${flag}`.padEnd(32) + o.description + (o.env ? ` (env ${o.env})` : ""));
  }
  lines.push("  -h, --help".padEnd(32) + "show this help");
  return lines.join("\n");
}

export { plural } from "../text/plural.js";
