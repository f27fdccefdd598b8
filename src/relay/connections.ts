import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { RegionConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { connectRegion, stripCredentials } from "../nats/connect.js";

/**
 * `local`: the relay's own region (publishes, destination reads); `remote`: a source region;
 * `ownership`: a second connection to the relay's own region for the group only (lease renewals and
 * membership heartbeats), so they never queue behind publishes on the `local` one.
 */
export type ConnectionRole = "local" | "remote" | "ownership";

/** One connection as `/status` and `relay_connection_up` show it. */
export interface ConnectionStatus {
  /** The name the servers list it under (connz). */
  readonly name: string;
  readonly region: string;
  readonly role: ConnectionRole;
  readonly state: "connecting" | "connected" | "reconnecting" | "closed";
  /** The server it is connected to, without credentials. */
  readonly server?: string;
  readonly since: string;
  /** Reconnects since it first connected. */
  readonly reconnects: number;
}

interface Entry {
  readonly nc: Promise<NatsConnection>;
  readonly abort: AbortController;
  open?: NatsConnection;
  status: ConnectionStatus;
}

/**
 * A relay's connections, one per region it talks to, shared by its links, and the ownership connection
 * to its own region. A connection is made on first use and retried until it works or the relay stops
 * (then it reconnects forever, like every region connection); a config reload can `forget` one (new
 * links then get a new connection, while the links still on the old one stop before it is closed).
 */
export class RegionConnections {
  private readonly regions = new Map<string, Entry>();
  private ownershipEntry: Entry | undefined;

  constructor(
    private readonly opts: {
      /** The relay's own region (its connection is `local`, the others `remote`). */
      readonly region: string;
      /** The regions of the running config. */
      readonly regions: () => ReadonlyMap<string, RegionConfig>;
      readonly logger: Logger;
      /** The relay stopping: no new connection, and first connects still retrying give up. */
      readonly signal: AbortSignal;
      /** A connection changed state, was made or went away (`status()` has them all). */
      readonly onChange?: () => void;
    },
  ) {}

  /** The region's connection once it is up; undefined for a region the config does not have. */
  get(name: string): Promise<NatsConnection> | undefined {
    const known = this.regions.get(name);
    if (known) return known.nc;
    const entry = this.connect(name, name === this.opts.region ? "local" : "remote", () => this.regions.get(name));
    if (!entry) return undefined;
    this.regions.set(name, entry);
    this.opts.onChange?.();
    return entry.nc;
  }

  /**
   * The group's own connection to this relay's region (same servers, auth and TLS as `local`): leases
   * and membership. Undefined once the relay stops.
   */
  ownership(): Promise<NatsConnection> | undefined {
    if (this.ownershipEntry) return this.ownershipEntry.nc;
    this.ownershipEntry = this.connect(this.opts.region, "ownership", () => this.ownershipEntry);
    if (this.ownershipEntry) this.opts.onChange?.();
    return this.ownershipEntry?.nc;
  }

  private connect(name: string, role: ConnectionRole, current: () => Entry | undefined): Entry | undefined {
    const region = this.opts.regions().get(name);
    if (!region || this.opts.signal.aborted) return undefined;
    const abort = new AbortController();
    const connName = `jetstream-relay/${this.opts.region}/${role}:${name}`;
    const nc: Promise<NatsConnection> = connectRegion(region, {
      name: connName,
      logger: this.opts.logger,
      signal: AbortSignal.any([this.opts.signal, abort.signal]),
    }).then(async (c) => {
      if (current() === entry) {
        entry.open = c;
        this.follow(entry, c);
        return c;
      }
      await c.close(); // forgotten while it connected
      throw new RelayError(ErrorCodes.NATS_CONNECT, `region ${name}: connection replaced by a config reload`);
    });
    // Observed by the links that wait for it; a first connect given up (stop, reload, auth) is closed.
    nc.catch(() => {
      if (entry.open) return;
      entry.status = { ...entry.status, state: "closed", since: new Date().toISOString() };
      this.opts.onChange?.();
    });
    const entry: Entry = {
      nc,
      abort,
      status: { name: connName, region: name, role, state: "connecting", since: new Date().toISOString(), reconnects: 0 },
    };
    return entry;
  }

  /** Keeps the entry's status in step with its connection until it closes. */
  private follow(entry: Entry, nc: NatsConnection): void {
    const set = (state: ConnectionStatus["state"], reconnected = false) => {
      const { server: _server, ...rest } = entry.status;
      const server = state === "connected" ? nc.getServer() : undefined;
      entry.status = {
        ...rest,
        state,
        since: new Date().toISOString(),
        reconnects: entry.status.reconnects + (reconnected ? 1 : 0),
        ...(server ? { server: stripCredentials(server) } : {}),
      };
      this.opts.onChange?.();
    };
    set("connected");
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") set("reconnecting");
        else if (s.type === "reconnect") set("connected", true);
      }
    })().catch(() => undefined);
    void nc.closed().then(() => set("closed"));
  }

  /** Regions connected or connecting (the ownership connection is not one of them). */
  names(): string[] {
    return [...this.regions.keys()];
  }

  /** Every connection made or being made, the ownership one included (forgotten ones are not). */
  status(): ConnectionStatus[] {
    return [...this.regions.values(), ...(this.ownershipEntry ? [this.ownershipEntry] : [])].map((e) => e.status);
  }

  /** Forgets a region's connection (the next `get` connects anew); returns it, for the caller to close. */
  forget(name: string): NatsConnection | undefined {
    const entry = this.regions.get(name);
    entry?.abort.abort();
    this.regions.delete(name);
    if (entry) this.opts.onChange?.();
    return entry?.open;
  }

  /** Drains every open connection (closes it when the drain fails), the ownership one last. */
  async closeAll(): Promise<void> {
    await Promise.all([...this.regions.keys()].map((name) => close(this.forget(name))));
    const ownership = this.ownershipEntry;
    ownership?.abort.abort();
    await close(ownership?.open);
  }
}

/** Drains a connection (closes it when the drain fails). */
export async function close(nc: NatsConnection | undefined): Promise<void> {
  await nc?.drain().catch(() => nc.close());
}
