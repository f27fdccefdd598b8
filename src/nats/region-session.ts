/**
 * A connection to one region for the commands that inspect it (`check --live`, `streams plan|apply`):
 * connected (auth and TLS from the config, the first connect given up after a timeout), with a
 * JetStream manager for the region's domain.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { RegionConfig } from "../config/types.js";
import { connectRegion, stripCredentials } from "./connect.js";

export type RegionSession =
  | {
      readonly ok: true;
      readonly region: RegionConfig;
      readonly nc: NatsConnection;
      readonly jsm: JetStreamManager;
      /** The server connected to, without credentials. */
      readonly server: string;
      readonly version?: string;
      readonly clustered: boolean;
    }
  | { readonly ok: false; readonly region: RegionConfig; readonly reason: string };

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export interface OpenRegionOptions {
  /** The connection's name, as the server lists it. */
  readonly name: string;
  readonly logger: Logger;
  readonly timeoutMs: number;
  /** Ask the JetStream API once before returning (default true); false leaves that to the first call. */
  readonly checkApi?: boolean;
}

export async function openRegion(region: RegionConfig, opts: OpenRegionOptions): Promise<RegionSession> {
  const { logger, timeoutMs } = opts;
  let nc: NatsConnection;
  try {
    nc = await connectRegion(region, {
      name: opts.name,
      logger,
      firstConnectTimeoutMs: timeoutMs,
    });
  } catch (err) {
    // connectRegion's errors name the region and its servers without credentials.
    return { ok: false, region, reason: message(err) };
  }
  try {
    const jsm = await jetstreamManager(nc, {
      timeout: timeoutMs,
      ...(opts.checkApi === false ? { checkAPI: false } : {}),
      ...(region.domain ? { domain: region.domain } : {}),
    });
    const info = nc.info;
    return {
      ok: true,
      region,
      nc,
      jsm,
      server: stripCredentials(nc.getServer()),
      ...(info?.version ? { version: info.version } : {}),
      clustered: Boolean(info?.cluster),
    };
  } catch (err) {
    await nc.close().catch(() => undefined);
    return { ok: false, region, reason: `region ${region.name}: JetStream API: ${message(err)}` };
  }
}

export async function closeSessions(sessions: Iterable<RegionSession>): Promise<void> {
  await Promise.all([...sessions].map((s) => (s.ok ? s.nc.close().catch(() => undefined) : undefined)));
}
