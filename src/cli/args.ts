import { parseArgs } from "node:util";
import { ErrorCodes, RelayError } from "../errors.js";

export interface CommandSpec {
  readonly name: string;
  readonly summary: string;
  readonly usage: string;
  readonly options: Record<string, { type: "string" | "boolean"; short?: string; description: string }>;
}

/** parseArgs with USAGE errors that name the command, and `--help` on every command. */
export function parseCommandArgs(spec: CommandSpec, argv: readonly string[]) {
  try {
    const { values } = parseArgs({
      args: [...argv],
      options: { ...spec.options, help: { type: "boolean", short: "h" } },
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
  if (typeof v !== "string" || v === "") {
    throw new RelayError(ErrorCodes.USAGE, `${spec.name}: --${key} is required\n\n${helpText(spec)}`);
  }
  return v;
}

export function helpText(spec: CommandSpec): string {
  const lines = [`jetstream-relay ${spec.name}: ${spec.summary}`, "", `usage: ${spec.usage}`, "", "options:"];
  for (const [name, o] of Object.entries(spec.options)) {
    lines.push(`  --${name}${o.type === "string" ? " VALUE" : ""}`.padEnd(28) + o.description);
  }
  lines.push("  --help".padEnd(28) + "show this help");
  return lines.join("\n");
}
