import { loadConfig } from "../config/load.js";
import { secretsOf } from "../config/redact.js";
import { installShutdown } from "../lifecycle/shutdown.js";
import { HttpServer } from "../observability/http-server.js";
import { createLogger } from "../observability/logger.js";
import { Relay } from "../relay.js";
import type { CommandSpec } from "./args.js";
import { parseCommandArgs, parseHttpFlag, requireString, helpText } from "./args.js";

export const runSpec: CommandSpec = {
  name: "run",
  summary: "run the links whose destination is REGION (consume remotely, publish locally)",
  usage: "jetstream-relay run --config FILE --region NAME [--http HOST:PORT]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)", env: "RELAY_CONFIG" },
    region: { type: "string", short: "r", description: "this relay's region: the destination of its links", env: "RELAY_REGION" },
    http: { type: "string", description: "override http.listen (HOST:PORT; port 0 picks a free one)", env: "RELAY_HTTP" },
  },
};

export async function runCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(runSpec, argv);
  if (values.help) {
    console.log(helpText(runSpec));
    return 0;
  }
  const configPath = requireString(runSpec, values, "config");
  const region = requireString(runSpec, values, "region");
  const config = await loadConfig(configPath);
  const logger = createLogger({ level: config.log.level, secrets: secretsOf(config) });
  const relay = new Relay(config, region, { logger });
  const override = typeof values.http === "string" ? values.http : process.env["RELAY_HTTP"] || undefined;
  const { host, port } = override === undefined ? config.http : parseHttpFlag(override);
  const http = new HttpServer({
    host,
    port,
    source: override === undefined ? `http.listen (${configPath})` : "--http",
    ...(config.http.token === undefined ? {} : { token: config.http.token }),
    protectMetrics: config.http.protectMetrics,
    registry: relay.registry,
    status: () => relay.status(),
    ready: () => relay.readiness(),
  });
  const boundPort = await http.start();
  logger.info({ host, port: boundPort }, "http listening: /metrics /healthz /readyz /status");
  const done = new Promise<number>((resolve) => {
    installShutdown({
      graceMs: config.shutdownGraceMs,
      logger,
      drain: async (deadline) => {
        await relay.stop(deadline);
        await http.stop();
      },
      exit: resolve,
    });
  });
  try {
    await relay.start();
  } catch (err) {
    await relay.stop(AbortSignal.timeout(2_000));
    await http.stop();
    throw err;
  }
  return done;
}


