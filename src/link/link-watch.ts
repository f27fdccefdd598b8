/**
 * What the link hears from its connections and its consumer: disconnects and reconnects of either
 * region, a source connection dropped as stale (a silent path) and replaced, a consumer or stream that
 * vanished, and heartbeats that stopped coming.
 */
import type { ConsumerMessages } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import type { Trouble } from "./link-status.js";

export interface LinkWatchDeps {
  readonly logger: Logger;
  /** The link stopping. */
  readonly signal: AbortSignal;
  /** Messages the pipeline holds. */
  held(): number;
  /** This relay works the link now: it owns the lease, does not stand by and does not resync. */
  working(): boolean;
  /** Deletes the consumer: the consume loop places a new cursor (ordered recovery). */
  recreateConsumer(): Promise<void>;
  readonly events: {
    trouble(kind: Trouble, err: RelayError): void;
    clear(kind: Trouble): void;
    /** The pull hears nothing (why): the link is stalled. */
    stalled(reason: string): void;
    /** The destination connection is back: changes announced while it was away were lost. */
    destReconnected(): void;
    /**
     * The destination connection went away (false) or is back (true). Gone, what awaits a PubAck is
     * rolled back at once: published again first, in order, once it is back (the late retry looks in
     * the destination first), so nothing newer is published on the new connection before it.
     */
    destUp(up: boolean): void;
  };
}

export class LinkWatch {
  /** The destination connection is up (a reconnect after trouble does not clear it by itself). */
  private destUp = true;
  /** The source connection was dropped as stale (a silent path): handled when it is back. */
  private silentSource = false;

  constructor(private readonly deps: LinkWatchDeps) {}

  /** The destination connection is up. */
  get destConnected(): boolean {
    return this.destUp;
  }

  /** Consumer notifications: a consumer or stream that vanished is re-created by the loop. */
  async watchConsumer(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (s.type === "consumer_deleted" || s.type === "consumer_not_found" || s.type === "stream_not_found") {
        this.deps.events.trouble("source", new RelayError(ErrorCodes.STREAM_NOT_FOUND, `source ${s.type.replace(/_/g, " ")}`));
        messages.stop();
      } else if (s.type === "heartbeats_missed" && s.count >= 2) {
        // The pull hears nothing, not even the server's heartbeats: the path may carry nothing while
        // the connection stays open (its PINGs find that out within seconds, and it reconnects).
        this.deps.events.stalled(`no delivery and no heartbeat from the source (${s.count} heartbeats missed): the path to it may be silent`);
      }
    }
  }

  watchConnection(nc: Pick<NatsConnection, "status">, side: "source" | "dest"): void {
    const { events } = this.deps;
    void (async () => {
      for await (const s of nc.status()) {
        if (this.deps.signal.aborted) return;
        // The client dropped a connection whose PINGs went unanswered: the path to that server went
        // silent (or the server hung), with the connection still open on the server's side.
        if (s.type === "staleConnection" && side === "source") this.silentSource = true;
        if (s.type === "disconnect") {
          if (side === "dest") {
            this.destUp = false;
            events.destUp(false);
          }
          events.trouble(side, new RelayError(ErrorCodes.NATS_CONNECT, `${side} region disconnected`));
        }
        if (s.type === "reconnect" && side === "source" && this.silentSource) {
          this.silentSource = false;
          this.leftSilentSource();
        }
        if (s.type === "reconnect" && side === "dest") {
          this.destUp = true;
          events.destUp(true);
          events.destReconnected(); // changes announced while it was away were lost
        }
        // With messages waiting, the first PubAck (pipeline.healthy) says the destination is back;
        // a reconnect alone does not (its stream may still be electing a leader).
        if (s.type === "reconnect" && side === "dest" && this.deps.held() === 0) events.clear("dest");
      }
    })().catch((err: unknown) => this.deps.logger.warn({ err: toRelayError(err).message }, "status watcher ended"));
  }

  /**
   * Back on another source server after a silent path. The server still counts the old connection as
   * a client (it PINGs it only every few minutes) and keeps serving the pull requests it left: up to a
   * window of deliveries go into the silence for as long as those requests live, ahead of the new
   * ones. Re-creating the consumer ends them at once; the new one starts after what the destination
   * holds, once what this relay held is finished (ordered recovery).
   */
  private leftSilentSource(): void {
    if (!this.deps.working()) return;
    this.deps.logger.warn("the source connection went silent and was replaced: re-creating the consumer so requests left on the silent one deliver nothing");
    this.deps.recreateConsumer().catch((err: unknown) =>
      this.deps.logger.warn({ err: toRelayError(err).message }, "could not re-create the consumer after a silent path (it is replaced when its pulls expire)"),
    );
  }
}
