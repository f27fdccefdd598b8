import { readFile } from "node:fs/promises";
import { connect } from "@nats-io/transport-node";
import { credsAuthenticator, errors, nkeyAuthenticator } from "@nats-io/nats-core";
import type { ConnectionOptions, NatsConnection, Server } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { RegionConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { sleep } from "../lifecycle/backoff.js";
import { limitApiFields } from "./api-fields.js";

export interface RegionConnectOptions {
  /** Connection name shown in the server's connz: `jetstream-relay/<relay region>/<role>`. */
  readonly name: string;
  readonly logger: Logger;
  /** Reject if the first connect does not succeed within this many ms (0 = keep trying forever). */
  readonly firstConnectTimeoutMs?: number;
  readonly signal?: AbortSignal;
}

async function authOptions(region: RegionConfig): Promise<Partial<ConnectionOptions>> {
  const auth = region.auth;
  if (!auth) return {};
  switch (auth.kind) {
    case "token":
      return { token: auth.token };
    case "user":
      return { user: auth.user, pass: auth.password };
    case "creds":
      return { authenticator: credsAuthenticator(await readFile(auth.credsFile)) };
    case "nkey": {
      const seed = (await readFile(auth.seedFile, "utf8")).trim();
      return { authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)) };
    }
  }
}

/** PINGs every 2 s, two unanswered allowed: a silent connection is dropped within 6 s. */
export const PING_INTERVAL_MS = 2_000;
export const MAX_PINGS_OUT = 2;

/**
 * Which server of the region to dial next: the one dialled longest ago (never dialled first). The
 * server a connection just lost is the most recently dialled, so it is tried last: a node behind a
 * silent path (or hung) accepts a connection and never answers, and dialling it again first would
 * hold the reconnect for the whole connect timeout while the region's other nodes are reachable.
 */
export function leastRecentlyDialled(pool: ReadonlyArray<Server>): Server | null {
  let pick: Server | undefined;
  for (const s of pool) if (pick === undefined || s.lastConnect < pick.lastConnect) pick = s;
  return pick ?? null;
}

/**
 * Connects to a region with infinite reconnects: a region that goes away is waited for, never given up on.
 * The first connect is retried with backoff until it works, `firstConnectTimeoutMs` passes or `signal`
 * aborts. Auth failures reject at once (NATS_AUTH); errors never carry credentials.
 */
export async function connectRegion(region: RegionConfig, opts: RegionConnectOptions): Promise<NatsConnection> {
  const options: ConnectionOptions = {
    servers: [...region.servers],
    name: opts.name,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    reconnectJitter: 250,
    // A path that goes silent without closing (a middlebox or NAT that lost its state, a hung node) is
    // noticed by PINGs: unanswered for 3 intervals (at most 6 s) and the client drops the connection
    // and reconnects, to another server of the region when it has one. A PONG queued behind seconds of
    // deliveries on a saturated link comes late but comes: keep the interval above what one pull
    // window takes to cross the link.
    pingInterval: PING_INTERVAL_MS,
    maxPingOut: MAX_PINGS_OUT,
    reconnectToServer: leastRecentlyDialled,
    timeout: 5_000,
    // Without async traces a request does not capture two stacks (an error made in advance for its
    // failure and one for its timeout) every time: a thousand links renewing leases and reading their
    // backlog spent more on those than on the requests. The relay's errors say what failed and where.
    noAsyncTraces: true,
    ...(await authOptions(region)),
  };
  if (region.tls) {
    options.tls = {
      ...(region.tls.caFile ? { caFile: region.tls.caFile } : {}),
      ...(region.tls.certFile ? { certFile: region.tls.certFile } : {}),
      ...(region.tls.keyFile ? { keyFile: region.tls.keyFile } : {}),
    };
  }
  const deadline = opts.firstConnectTimeoutMs ? Date.now() + opts.firstConnectTimeoutMs : Infinity;
  let delay = 250;
  for (;;) {
    try {
      const nc = await connect(options);
      limitApiFields(nc, opts.logger); // a 2.9 server gets no field of a newer one
      opts.logger.info({ peerRegion: region.name, server: nc.getServer(), version: nc.info?.version }, "connected to region");
      return nc;
    } catch (err) {
      const classified = classifyConnectError(region, err);
      if (!classified.isRetryable() || Date.now() + delay > deadline || opts.signal?.aborted) throw classified;
      opts.logger.warn({ peerRegion: region.name, code: classified.code, err: classified.message }, "region not reachable yet; retrying");
      await sleep(delay, opts.signal);
      delay = Math.min(delay * 2, 5_000);
    }
  }
}

export function classifyConnectError(region: RegionConfig, err: unknown): RelayError {
  const servers = region.servers.map(stripCredentials).join(", ");
  if (err instanceof errors.AuthorizationError || err instanceof errors.UserAuthenticationExpiredError) {
    return new RelayError(ErrorCodes.NATS_AUTH, `region ${region.name} (${servers}): authorization rejected`, {
      cause: err,
    });
  }
  const reason = err instanceof Error ? err.message : String(err);
  return new RelayError(ErrorCodes.NATS_CONNECT, `region ${region.name} (${servers}): ${reason}`, { cause: err });
}

/** `nats://user:pass@host:4222` → `nats://host:4222`: server URLs may embed credentials. */
export function stripCredentials(url: string): string {
  return url.replace(/\/\/[^@/]*@/, "//");
}
