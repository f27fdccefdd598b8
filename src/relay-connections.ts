import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { RegionConfig } from "./config/types.js";
import { ErrorCodes, RelayError } from "./errors.js";
import { connectRegion } from "./nats/connect.js";

/**
 * A relay's connections, one per region it talks to, shared by its links. A region is connected on first
 * use and retried until it works or the relay stops; a config reload can `forget` one (new links then
 * get a new connection, while the links still on the old one stop before it is closed).
 */
export class RegionConnections {
  private readonly open = new Map<string, NatsConnection>();
  private readonly connecting = new Map<string, { nc: Promise<NatsConnection>; abort: AbortController }>();

  constructor(
    private readonly opts: {
      /** The relay's own region (its connection is `local`, the others `remote`). */
      readonly region: string;
      /** The regions of the running config. */
      readonly regions: () => ReadonlyMap<string, RegionConfig>;
      readonly logger: Logger;
      /** The relay stopping: no new connection, and first connects still retrying give up. */
      readonly signal: AbortSignal;
    },
  ) {}

  /** The region's connection once it is up; undefined for a region the config does not have. */
  get(name: string): Promise<NatsConnection> | undefined {
    const known = this.connecting.get(name);
    if (known) return known.nc;
    const region = this.opts.regions().get(name);
    if (!region || this.opts.signal.aborted) return undefined;
    const abort = new AbortController();
    const role = name === this.opts.region ? "local" : "remote";
    const nc: Promise<NatsConnection> = connectRegion(region, {
      name: `jetstream-relay/${this.opts.region}/${role}:${name}`,
      logger: this.opts.logger,
      signal: AbortSignal.any([this.opts.signal, abort.signal]),
    }).then(async (c) => {
      if (this.connecting.get(name)?.nc === nc) {
        this.open.set(name, c);
        return c;
      }
      await c.close(); // forgotten while it connected
      throw new RelayError(ErrorCodes.NATS_CONNECT, `region ${name}: connection replaced by a config reload`);
    });
    nc.catch(() => undefined); // observed by the links that wait for it
    this.connecting.set(name, { nc, abort });
    return nc;
  }

  /** Regions connected or connecting. */
  names(): string[] {
    return [...this.connecting.keys()];
  }

  /** Forgets a region's connection (the next `get` connects anew); returns it, for the caller to close. */
  forget(name: string): NatsConnection | undefined {
    this.connecting.get(name)?.abort.abort();
    this.connecting.delete(name);
    const nc = this.open.get(name);
    this.open.delete(name);
    return nc;
  }

  /** Drains every open connection (closes it when the drain fails). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.open.keys()].map((name) => close(this.forget(name))));
  }
}

/** Drains a connection (closes it when the drain fails). */
export async function close(nc: NatsConnection | undefined): Promise<void> {
  await nc?.drain().catch(() => nc.close());
}
