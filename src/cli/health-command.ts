import { loadConfig } from "../config/load.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, parseHttpFlag, requireString } from "./args.js";

export const healthSpec: CommandSpec = {
  name: "health",
  summary: "exit 0 when the relay of this config answers /healthz on its http.listen address (a container health check)",
  usage: "jetstream-relay health --config FILE [--http HOST:PORT]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML): http.listen says where to ask", env: "RELAY_CONFIG" },
    http: { type: "string", description: "the address the relay was started with, when --http overrode http.listen", env: "RELAY_HTTP" },
  },
};

/** The address to ask: a wildcard listen address is asked on loopback. */
function probeHost(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::" || host === "[::]") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

export async function healthCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(healthSpec, argv);
  if (values.help) {
    console.log(helpText(healthSpec));
    return 0;
  }
  const config = await loadConfig(requireString(healthSpec, values, "config"));
  const override = typeof values.http === "string" ? values.http : process.env["RELAY_HTTP"] || undefined;
  const listen = override === undefined ? config.http : parseHttpFlag(override);
  const url = `http://${probeHost(listen.host)}:${listen.port}/healthz`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(3_000) });
    if (res.ok) return 0;
    console.error(`${url}: HTTP ${res.status}`);
  } catch (err) {
    const cause = err instanceof Error ? (err.cause as Error | undefined) : undefined;
    console.error(`${url}: ${cause?.message ?? (err instanceof Error ? err.message : String(err))}`);
  }
  return 1;
}
