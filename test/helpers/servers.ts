import { ContainersBackend } from "./containers-backend.js";
import { LocalBackend } from "./local-backend.js";
import { existsSync } from "node:fs";
import { findBinary } from "./local-process.js";
import { natsServerBin } from "./nats-version.js";
import type { ServerBackend } from "./types.js";
import { deferrals } from "./teardown.js";
import type { HasAfter } from "./teardown.js";

export { deferrals } from "./teardown.js";
export type { HasAfter } from "./teardown.js";

/**
 * The backend tests should use, picked by environment:
 * - RELAY_TEST_BACKEND=local or =containers decides; NATS_SERVER_BIN=/path/to/nats-server runs that
 *   binary (local processes);
 * - otherwise local processes when nats-server is installed (this project's CI and dev machines have
 *   nats-server/redis-server but no Docker engine), else Testcontainers when a Docker engine is
 *   reachable (DOCKER_HOST, or the default socket);
 * - otherwise fail fast with the fix, rather than with an ENOENT deep inside the first test.
 */
export function createBackend(env: NodeJS.ProcessEnv = process.env): ServerBackend {
  const chosen = env.RELAY_TEST_BACKEND;
  if (chosen === "containers") return new ContainersBackend();
  if (chosen === "local" || env.NATS_SERVER_BIN || findBinary("nats-server") || !dockerEngineLikely(env)) {
    natsServerBin(env); // NATS_SERVER_BIN (an executable), else nats-server from PATH: fails fast with the fix
    return new LocalBackend();
  }
  return new ContainersBackend();
}

function dockerEngineLikely(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.DOCKER_HOST) || existsSync("/var/run/docker.sock");
}

/**
 * Creates a backend whose servers are all stopped and deleted when `t` finishes (on its teardown
 * stack: after whatever was started on them later with the same `t`, relays and connections):
 *
 *   import { after } from "node:test";
 *   const servers = withServers({ after });
 *   const nats = await servers.startNats();
 */
export function withServers(t: HasAfter): ServerBackend {
  const backend = createBackend();
  deferrals(t)(() => backend.cleanup());
  return backend;
}
