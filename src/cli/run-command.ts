import { secretsOf } from "../config/redact.js";
import { ConfigReloader, readConfigFile } from "../config/reloader.js";
import type { RelayConfig } from "../config/types.js";
import { HeapGrowth } from "../lifecycle/heap-growth.js";
import { installShutdown } from "../lifecycle/shutdown.js";
import { HttpServer } from "../observability/http-server.js";
import { createLogger, LogSecrets } from "../observability/logger.js";
import { Relay } from "../relay/relay.js";
import type { CommandSpec } from "./args.js";
import { parseCommandArgs, parseHttpFlag, requireString, helpText } from "./args.js";

export const runSpec: CommandSpec = {
  name: "run",
  summary: "run the links whose destination is REGION (consume remotely, publish locally)",
  usage: "jetstream-relay run --config FILE --region NAME [--http HOST:PORT]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)", env: "RELAY_CONFIG" },
    region: {
      type: "string",
      short: "r",
      description: "this relay's region: the destination of its links",
      env: "RELAY_REGION",
    },
    http: {
      type: "string",
      description: "override http.listen (HOST:PORT; port 0 picks a free one)",
      env: "RELAY_HTTP",
    },
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
  const { config, digest } = await readConfigFile(configPath);
  // The values scrubbed from every log line: the config's secrets, and those a reload brings.
  const secrets = new LogSecrets(secretsOf(config));
  const logger = createLogger({ level: config.log.level, secrets });
  const relay = new Relay(config, region, { logger });
  // Before the links start: at rest (and starting) the old generation stays within twice what is live.
  const heap = new HeapGrowth(() => relay.metrics.load.finished);
  heap.start();
  const override = typeof values.http === "string" ? values.http : process.env["RELAY_HTTP"] || undefined;
  const { host, port } = override === undefined ? config.http : parseHttpFlag(override);
  // What a config reload changes outside the relay: the token and protectMetrics (read per request),
  // and the shutdown grace (the handlers are installed again). http.listen needs a restart.
  let current: RelayConfig = config;
  const http = new HttpServer({
    host,
    port,
    source: override === undefined ? `http.listen (${configPath})` : "--http",
    get token() {
      return current.http.token;
    },
    get protectMetrics() {
      return current.http.protectMetrics;
    },
    registry: relay.registry,
    status: () => relay.status(),
    ready: () => relay.readiness(),
  });
  const boundPort = await http.start();
  logger.info({ host, port: boundPort }, "http listening: /metrics /healthz /readyz /status");
  let exit!: (code: number) => void;
  const done = new Promise<number>((resolve) => (exit = resolve));
  const reloader = new ConfigReloader({
    path: configPath,
    target: relay,
    logger: logger.child({ region, component: "relay" }),
    onLoaded: (next) => secrets.add(secretsOf(next)),
    onApplied: (next) => {
      const graceChanged = next.shutdownGraceMs !== current.shutdownGraceMs;
      current = next;
      if (graceChanged) {
        uninstall();
        uninstall = shutdown();
      }
    },
  });
  const shutdown = () =>
    installShutdown({
      graceMs: current.shutdownGraceMs,
      logger,
      drain: async (deadline) => {
        heap.stop();
        reloader.stop(); // a SIGHUP while draining is ignored (its handler stays: the default would end the process)
        await relay.stop(deadline);
        await http.stop();
      },
      exit,
    });
  // SIGHUP reloads the config (without a handler it would end the process); one at a time.
  const onHangup = () => void reloader.request("SIGHUP");
  process.on("SIGHUP", onHangup);
  let uninstall = shutdown();
  try {
    await relay.start();
  } catch (err) {
    reloader.stop();
    process.off("SIGHUP", onHangup);
    await relay.stop(AbortSignal.timeout(2_000));
    await http.stop();
    throw err;
  }
  reloader.start(config, digest);
  return done;
}
