import type { Logger } from "pino";
import type { GuardConfig } from "../config/types.js";
import { MemoryGuard } from "./memory-guard.js";
import { NoneGuard } from "./none-guard.js";
import type { Guard } from "./types.js";

export interface GuardDeps {
  /** Already bound to the link (`{ link, component: "guard" }`); the guard adds `store` only. */
  readonly logger: Logger;
  /**
   * Namespace of the guard's keys: `<destination region>:<destination stream>`. Links writing to
   * the same destination stream must share it (they dedupe against each other); it is also the
   * Redis Cluster hash tag, so it must not be empty.
   */
  readonly scope: string;
  readonly linkName: string;
  /**
   * The link's lease key: the guard keeps the newest lease revision it saw under it and refuses claims
   * and commits of an older one (a paused ex-owner). Default: the link name.
   */
  readonly fence?: string;
  /**
   * The name this caller's claims and commits go by among the scope's writers (lua.ts WRITERS): a
   * writer sees every live writer of its scope but itself. Default: the fence, which is the link's
   * relay. Any other caller of the same link (`repair`) needs a name of its own: under the relay's name
   * it would not see the relay's live claims, and would overwrite the relay's word.
   */
  readonly writer?: string;
}

/**
 * The guard for one link. Nothing connects here: `start()` does, so a bad address or an
 * unreadable TLS file surfaces as a rejected start(), not as a throw while building links.
 * The Redis client is loaded only when a link uses the Redis guard (it adds about 20 MB of RSS).
 */
export async function createGuard(config: GuardConfig | undefined, deps: GuardDeps): Promise<Guard> {
  if (config === undefined) return new NoneGuard();
  const store = config.store;
  if (store.kind === "memory") return new MemoryGuard(config, deps);
  const { RedisGuard } = await import("./redis-guard.js");
  return new RedisGuard(store, config, deps);
}
