import { ContainersBackend } from "./containers-backend.js";
import { LocalBackend } from "./local-backend.js";
import { requireBinary } from "./local-process.js";
import type { ServerBackend } from "./types.js";

/**
 * The backend tests should use. Local processes are the default because this project's CI and
 * dev machines have nats-server/redis-server installed but no Docker engine;
 * RELAY_TEST_BACKEND=containers opts into Testcontainers where Docker exists.
 */
export function createBackend(): ServerBackend {
  if (process.env.RELAY_TEST_BACKEND === "containers") return new ContainersBackend();
  // Fail fast with the fix, rather than with an ENOENT from deep inside the first test.
  requireBinary("nats-server", "nats-server");
  return new LocalBackend();
}

/** Anything with node:test's `after` hook: a TestContext (`t`), a SuiteContext, or `{ after }` itself. */
export interface HasAfter {
  after(fn: () => unknown): void;
}

/**
 * Creates a backend whose servers are all stopped and deleted when `t` finishes:
 *
 *   import { after } from "node:test";
 *   const servers = withServers({ after });
 *   const nats = await servers.startNats();
 */
export function withServers(t: HasAfter): ServerBackend {
  const backend = createBackend();
  t.after(() => backend.cleanup());
  return backend;
}
