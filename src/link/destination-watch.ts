import type { Logger } from "pino";
import type { NatsConnection, Subscription } from "@nats-io/nats-core";
import type { RelayMetrics } from "../observability/metrics.js";

/**
 * What can change a link's destination under it:
 * - `created`, `updated`, `deleted`: the destination stream's own advisories. Only an update (subjects
 *   narrowed) or a deletion can let another stream capture the link's subjects: the server refuses a
 *   stream whose subjects overlap an existing one. A deleted stream recreated with other settings (nats-server
 *   2.9 refuses to change retention in place) announces itself by `created`.
 * - `other_created`: another stream in the account. It cannot overlap the destination's subjects, so it
 *   matters only if the destination's own update was missed; a re-read is cheap and stream creation rare.
 * - `reconnected`: the destination connection came back; advisories sent meanwhile were lost.
 * - `restarted`: a PubAck's sequence went backwards (the pipeline saw it): the stream was recreated
 *   and the advisory has not arrived yet.
 */
export type DestinationChangeKind = "created" | "updated" | "deleted" | "other_created" | "reconnected" | "restarted";

export interface DestinationWatchDeps {
  /** The destination region's connection (advisories are account subjects, without a JetStream domain). */
  readonly nc: NatsConnection;
  readonly link: string;
  readonly stream: string;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  /** The link holds publishing and reads the destination again. Never throws back. */
  readonly changed: (kind: DestinationChangeKind, detail: string) => void;
}

const ADVISORY = "$JS.EVENT.ADVISORY.STREAM";
const KINDS: Readonly<Record<string, DestinationChangeKind>> = { CREATED: "created", UPDATED: "updated", DELETED: "deleted" };

/**
 * Watches one link's destination stream through the JetStream advisories
 * (`$JS.EVENT.ADVISORY.STREAM.{CREATED,UPDATED,DELETED}.<stream>`, and `CREATED.*` for other streams), so
 * that a stream re-bound or recreated while the link runs is read again before more is published.
 * Lifecycle: `start()` once, `stop()` (idempotent), `closed()`.
 */
export class DestinationWatch {
  private subs: Subscription[] = [];
  private started = false;
  private stopped = false;
  private resolveClosed!: () => void;
  private readonly closedPromise = new Promise<void>((r) => (this.resolveClosed = r));

  constructor(private readonly deps: DestinationWatchDeps) {}

  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    const { nc, stream } = this.deps;
    this.subs.push(
      nc.subscribe(`${ADVISORY}.*.${stream}`, {
        callback: (err, m) => {
          if (err) return this.subscriptionEnded(err);
          const kind = KINDS[m.subject.split(".")[4] ?? ""];
          if (kind) this.announce(kind, `destination stream ${stream} ${kind}`);
        },
      }),
      nc.subscribe(`${ADVISORY}.CREATED.*`, {
        callback: (err, m) => {
          if (err) return this.subscriptionEnded(err);
          const other = m.subject.split(".")[5];
          if (other !== undefined && other !== stream) this.announce("other_created", `stream ${other} created in the destination's account`);
        },
      }),
    );
    this.deps.logger.info({ stream, subjects: this.subs.map((s) => s.getSubject()) }, "watching the destination stream for changes");
  }

  /** The destination connection came back: what was announced while it was away is lost. */
  reconnected(): void {
    if (this.started && !this.stopped) this.announce("reconnected", `connection to the destination region restored: changes to ${this.deps.stream} meanwhile are not known`);
  }

  /** A PubAck's sequence went backwards: the stream is not the one the link read. */
  restarted(detail: string): void {
    if (this.started && !this.stopped) this.announce("restarted", detail);
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
    this.resolveClosed();
  }

  closed(): Promise<void> {
    return this.closedPromise;
  }

  private announce(kind: DestinationChangeKind, detail: string): void {
    if (this.stopped) return;
    const { link, stream } = this.deps;
    this.deps.metrics.destinationChanges.inc({ link, kind });
    this.deps.logger.warn({ stream, kind }, `${detail}: publishing held until the destination's binding and retention are read again`);
    this.deps.changed(kind, detail);
  }

  private subscriptionEnded(err: Error): void {
    if (this.stopped) return;
    this.deps.logger.warn({ stream: this.deps.stream, err: err.message }, "destination advisory subscription failed: changes are found by PubAcks and reconnects only");
  }
}
