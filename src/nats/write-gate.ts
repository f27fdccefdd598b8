import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";

/** Something that puts bytes on a connection only while it owns the right to: a link and its lease. */
export interface GatedWriter {
  readonly name: string;
  /** Whether its bytes may still leave now (the lease still valid at this moment). */
  owns(): boolean;
}

/** What the gate needs of nats.js's protocol handler (not public API: checked when the gate is made). */
interface Protocol {
  flushPending(): void;
  outbound: { size(): number; reset(): void };
  /** Empties the buffer and fails the PINGs waiting in it (nats.js does this itself before every reconnect). */
  resetOutbound?(): void;
  transport?: { socket?: { writableLength?: number }; _closed?(err: Error, internal?: boolean): Promise<void> };
}

function protocolOf(nc: NatsConnection): Protocol | undefined {
  const p = (nc as unknown as { protocol?: Partial<Protocol> }).protocol;
  if (!p || typeof p.flushPending !== "function" || typeof p.outbound?.size !== "function" || typeof p.outbound.reset !== "function") return undefined;
  return p as Protocol;
}

/**
 * Ownership is checked when a publish or an ack is issued, but nats.js sends the bytes later: it
 * buffers them and writes them in a microtask. A process stopped in between (SIGSTOP, a long GC pause,
 * a VM frozen) and woken after its lease expired would send publishes and acks that passed the check
 * while another relay owns the link — a copy past the destination's duplicate window, an ack that
 * moves a consumer the new owner re-created. The gate checks again at the moment the client writes:
 * when a writer that put bytes in the buffer since the last write no longer owns its link, the buffer
 * is discarded (everything in it: the connection carries other links' bytes too) and the connection
 * dropped without flushing, so the client reconnects, subscribes again and its callers retry what
 * they lost. Bytes the socket took before the pause are in the network already: no gate can call those
 * back (the destination's duplicate window and the guard's fence cover them).
 */
export class WriteGate {
  private readonly pending = new Set<GatedWriter>();
  private readonly protocol: Protocol | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly opts: { readonly name: string; readonly logger: Logger; readonly discarded?: (writers: readonly string[]) => void },
  ) {
    this.protocol = protocolOf(nc);
    if (!this.protocol) {
      opts.logger.warn({ connection: opts.name }, "this NATS client does not let the relay check ownership when bytes are written: only when they are issued");
      return;
    }
    const protocol = this.protocol;
    const flush = protocol.flushPending.bind(protocol);
    protocol.flushPending = () => {
      if (this.pending.size > 0) {
        const lapsed = [...this.pending].filter((w) => !w.owns()).map((w) => w.name);
        if (lapsed.length > 0) return this.discard(lapsed);
      }
      flush();
      // Not written (disconnected): still pending, checked again when they are (nats.js empties the
      // buffer before it reconnects anyway).
      if (protocol.outbound.size() === 0) this.pending.clear();
    };
  }

  /** Whether the gate could be installed on this client. */
  get active(): boolean {
    return this.protocol !== undefined;
  }

  /** A writer is about to put bytes in the connection's buffer: checked again when they are written. */
  wrote(writer: GatedWriter): void {
    this.pending.add(writer);
  }

  /**
   * A writer's lease was found lost: bytes of it still waiting in the client's buffer or the socket's
   * (a slow path) must not leave.
   */
  lapsed(writer: GatedWriter): void {
    const queued = this.protocol?.transport?.socket?.writableLength ?? 0;
    if (this.pending.has(writer) || queued > 0) this.discard([writer.name]);
  }

  private discard(writers: readonly string[]): void {
    const protocol = this.protocol;
    if (!protocol || this.nc.isClosed()) return;
    const bytes = protocol.outbound.size() + (protocol.transport?.socket?.writableLength ?? 0);
    if (protocol.resetOutbound) protocol.resetOutbound();
    else protocol.outbound.reset();
    this.pending.clear();
    this.opts.logger.warn(
      { connection: this.opts.name, writers, bytes },
      "a link's lease lapsed before its bytes were written: the connection's unsent bytes are discarded and it reconnects",
    );
    this.opts.discarded?.(writers);
    // An error makes nats.js drop the socket without flushing it, then reconnect.
    void protocol.transport?._closed?.(new Error("write gate: a lease lapsed before its bytes were written"), true);
  }
}

/** One gate per connection, made when a link first asks (a relay's connections are shared by its links). */
export class WriteGates {
  private readonly gates = new WeakMap<NatsConnection, WriteGate>();

  constructor(private readonly opts: { readonly logger: Logger; readonly discarded?: (connection: string, writers: readonly string[]) => void }) {}

  of(nc: NatsConnection, name: string): WriteGate {
    let gate = this.gates.get(nc);
    if (!gate) {
      gate = new WriteGate(nc, { name, logger: this.opts.logger, discarded: (writers) => this.opts.discarded?.(name, writers) });
      this.gates.set(nc, gate);
    }
    return gate;
  }
}
