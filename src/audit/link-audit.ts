/**
 * The link's continuous audit of its own delivery (docs/verify.md, "The continuous audit"), run by the
 * link's owner while it works the link. Lifecycle: `start()`, `stop()` (idempotent), `status()`.
 *
 * Every tick the owner samples (S, D): the source consumer's ack floor S, then the destination's last
 * seq D. Every source seq at or below S was acknowledged after its PubAck (or dead-lettered, or
 * suppressed as a correction), so its copy, if it has one, lies at or below D. Once a sample is
 * `audit.after` old, a range pass judges (judged, S]: it reads the destination's headers from where the
 * last pass stopped to D, marks each source seq the link's `Relay-Source` markers name (range-record.ts),
 * checks their order and versions, and judges the seqs without a copy against the source (gaps.ts).
 * Every `audit.sweepEvery` a sweep judges the whole retained window of the source again, against the
 * whole destination, so a loss after the first check is found too. Where it has got to is stored in the
 * group bucket (audit-state.ts), so a new owner goes on from there.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "pino";
import type { AllLinks } from "../config/routes.js";
import type { LinkConfig } from "../config/types.js";
import { toRelayError } from "../errors.js";
import type { PositionStore } from "../group/link-position.js";
import type { Guard } from "../guard/types.js";
import { sleep } from "../lifecycle/backoff.js";
import type { TickGrid } from "../lifecycle/tick-grid.js";
import { readStream } from "../nats/stream-reader.js";
import type { StreamSide } from "../nats/stream-reader.js";
import type { RelayMetrics } from "../observability/metrics.js";
import { newTotals, parseAuditState } from "./audit-state.js";
import type { AuditState, Finding } from "./audit-state.js";
import { CopyReader } from "./copies.js";
import { judgeGaps } from "./gaps.js";
import type { GapVerdict } from "./gaps.js";
import { putBack } from "./put-back.js";
import type { RepairItem } from "./put-back.js";
import { CopyOrder, EXAMPLES, RangeRecord } from "./range-record.js";
import type { Copy } from "./copies.js";

/** What the audit asks the running link. */
export interface AuditedLink {
  /** This relay works the link now (owns it, not standing by, not resyncing, not failed). */
  working(): boolean;
  /** The source's JetStream manager, once the link has one. */
  jsm(): JetStreamManager | undefined;
  /** The source stream's incarnation (creation time, ms), once read. */
  sourceCreatedMs(): number | undefined;
  /** The highest source seq the destination stored: it moves when the link relays. */
  progress(): number;
}

export interface LinkAuditDeps {
  readonly config: LinkConfig;
  readonly links: AllLinks;
  readonly source: NatsConnection;
  readonly sourceDomain?: string | undefined;
  readonly dest: NatsConnection;
  readonly destDomain?: string | undefined;
  readonly positions: PositionStore;
  readonly guard: Guard;
  readonly metrics: RelayMetrics;
  readonly logger: Logger;
  readonly ticks: TickGrid;
  readonly link: AuditedLink;
  readonly clock?: () => number;
}

export interface AuditStatus {
  /** Every source seq at or below this one was judged. */
  readonly judgedSeq: number;
  readonly judgedAt: string;
  readonly lagSeconds: number;
  readonly coverage: number;
  readonly nextSweepAt: string;
  readonly totals: AuditState["totals"];
  readonly lastFinding?: Finding;
  readonly lastError?: string;
}

interface Sample {
  readonly atMs: number;
  readonly ackFloor: number;
  readonly destSeq: number;
  readonly destCreatedMs: number;
}

/** A pass that would read more than this many seconds of audit.maxReadRate skips ahead instead. */
const MAX_PASS_SECONDS = 300;
/** Source seqs without a copy judged in one pass at most (a filtered link's sweep can have many). */
const MAX_GAPS = 1_000_000;

class Stopped extends Error {}

export class LinkAudit {
  private readonly now: () => number;
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private samples: Sample[] = [];
  private lastProgress = -1;
  private state: AuditState | undefined;
  private revision = 0;
  /** Copies of seqs above the judged range, read already (in memory only: a new owner reads from readFrom). */
  private carried: Copy[] = [];
  private nextRead = 1;
  private order = new CopyOrder();
  private coverage = 1;
  private lastError: string | undefined;
  /** Read budget: the time (ms, on `now`) until which what was read so far is paid for. */
  private paidUntil = 0;

  constructor(private readonly deps: LinkAuditDeps) {
    this.now = deps.clock ?? Date.now;
  }

  private get audit() {
    return this.deps.config.audit;
  }

  private get label() {
    return { link: this.deps.config.name };
  }

  start(): void {
    if (!this.audit.enabled || this.unsubscribe) return;
    const tickMs = Math.min(10_000, Math.max(250, Math.floor(this.audit.afterMs / 4)));
    this.unsubscribe = this.deps.ticks.every(tickMs, () => {
      this.running ??= this.step().finally(() => (this.running = undefined));
    });
  }

  stop(): void {
    this.stopped = true;
    this.unsubscribe?.();
  }

  status(): AuditStatus | undefined {
    const s = this.state;
    if (!s) return undefined;
    return {
      judgedSeq: s.judgedSeq,
      judgedAt: s.judgedAt,
      lagSeconds: this.lagMs() / 1000,
      coverage: this.coverage,
      nextSweepAt: new Date(s.nextSweepMs).toISOString(),
      totals: { ...s.totals },
      ...(s.lastFinding ? { lastFinding: s.lastFinding } : {}),
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  private async step(): Promise<void> {
    const { link, logger } = this.deps;
    if (this.stopped) return;
    if (!link.working()) {
      // A new ownership reads the stored state again: another owner may have gone on meanwhile.
      this.state = undefined;
      this.samples = [];
      this.carried = [];
      this.lastProgress = -1;
      return;
    }
    const jsm = link.jsm();
    const sourceCreatedMs = link.sourceCreatedMs();
    if (!jsm || sourceCreatedMs === undefined) return;
    try {
      await this.sample(jsm);
      if (!this.state) await this.load(jsm, sourceCreatedMs);
      if (this.state) {
        await this.rangePass(jsm, sourceCreatedMs);
        await this.sweep(jsm, sourceCreatedMs);
      }
      this.deps.metrics.auditLag.set(this.label, this.lagMs() / 1000);
      if (this.lastError) logger.info("audit goes on");
      this.lastError = undefined;
    } catch (err) {
      if (err instanceof Stopped) return;
      const message = toRelayError(err).message;
      if (this.lastError === undefined) logger.warn({ err: message }, "audit pass failed; trying again");
      this.lastError = message;
      this.state = undefined; // read again: the bucket holds what was last written
    }
  }

  /** (ack floor, destination last seq), the floor read first, when the link moved since the last one. */
  private async sample(jsm: JetStreamManager): Promise<void> {
    const progress = this.deps.link.progress();
    const last = this.samples[this.samples.length - 1];
    if (last && progress === this.lastProgress && last.ackFloor >= progress) return;
    const { config } = this.deps;
    const ci = await jsm.consumers.info(config.from.stream, config.durableName);
    const dest = await this.destInfo();
    this.lastProgress = progress;
    const sample = { atMs: this.now(), ackFloor: ci.ack_floor.stream_seq, destSeq: dest.lastSeq, destCreatedMs: dest.createdMs };
    if (last && last.ackFloor === sample.ackFloor && last.destCreatedMs === sample.destCreatedMs) return;
    this.samples.push(sample);
  }

  private async destInfo(): Promise<{ lastSeq: number; firstSeq: number; createdMs: number }> {
    const jsm = await jetstreamManager(this.deps.dest, this.deps.destDomain ? { domain: this.deps.destDomain, checkAPI: false } : { checkAPI: false });
    const info = await jsm.streams.info(this.deps.config.to.stream);
    return { lastSeq: info.state.last_seq, firstSeq: info.state.first_seq, createdMs: Date.parse(info.created) };
  }

  /** The stored state, or a new one that judges the source from its first message on. */
  private async load(jsm: JetStreamManager, sourceCreatedMs: number): Promise<void> {
    const first = this.samples[0];
    if (!first) return;
    const stored = await this.deps.positions.auditState();
    let state = stored ? parseAuditState(stored.text) : undefined;
    this.revision = stored?.revision ?? 0;
    if (state && (state.sourceCreatedMs !== sourceCreatedMs || state.destCreatedMs !== first.destCreatedMs)) {
      this.deps.logger.info("audit starts over: the source or destination stream is another incarnation than the one audited");
      state = undefined;
    }
    if (!state) {
      const info = await jsm.streams.info(this.deps.config.from.stream);
      state = {
        sourceCreatedMs,
        destCreatedMs: first.destCreatedMs,
        judgedSeq: Math.max(0, info.state.first_seq - 1),
        judgedAt: new Date(this.now()).toISOString(),
        judgedDestSeq: 0,
        readFrom: 1,
        orderedTo: 0,
        highest: 0,
        nextSweepMs: this.now() + this.audit.sweepEveryMs,
        totals: newTotals(),
      };
    }
    this.state = state;
    this.nextRead = state.readFrom;
    this.carried = [];
    this.order = new CopyOrder(state.highest);
    this.deps.logger.info({ judgedSeq: state.judgedSeq, readFrom: state.readFrom }, "audit starts");
  }

  private lagMs(): number {
    const s = this.state;
    if (!s) return 0;
    const settled = this.eligible();
    if (!settled || settled.ackFloor <= s.judgedSeq) return 0;
    return Math.max(0, settled.atMs - Date.parse(s.judgedAt));
  }

  /** The newest sample `audit.after` old (the others before it are no longer needed). */
  private eligible(): Sample | undefined {
    const cutoff = this.now() - this.audit.afterMs;
    let found: Sample | undefined;
    for (const s of this.samples) if (s.atMs <= cutoff) found = s;
    return found;
  }

  private async rangePass(jsm: JetStreamManager, sourceCreatedMs: number): Promise<void> {
    const state = this.state!;
    const target = this.eligible();
    if (!target) return;
    this.samples = this.samples.filter((s) => s.atMs >= target.atMs);
    if (target.destCreatedMs !== state.destCreatedMs) {
      this.state = undefined; // the destination was re-created: start over on the next tick
      this.samples = [];
      return;
    }
    if (target.ackFloor <= state.judgedSeq) return;
    const toRead = target.destSeq - this.nextRead + 1;
    if (toRead > this.audit.maxReadRate * MAX_PASS_SECONDS) return this.skipTo(target);
    const record = new RangeRecord(state.judgedSeq, target.ackFloor);
    for (const c of this.carried) record.note(c);
    const copies = new CopyReader(this.deps.config, sourceCreatedMs);
    const orderedTo = state.orderedTo;
    await this.readPaced(this.destSide(), this.nextRead, target.destSeq, (m) => {
      const copy = copies.read(m);
      if (!copy) return;
      const first = record.note(copy);
      if (m.seq <= orderedTo) return; // read before this owner's restart: checked then
      if (first) this.order.note(copy);
      else if (copy.sourceSeq <= record.from && !copy.late) record.extra++;
    });
    const verdict = await this.judge(record, copies, sourceCreatedMs);
    const later = record.later;
    this.carried = later;
    this.nextRead = target.destSeq + 1;
    state.readFrom = later.length > 0 ? Math.min(...later.map((c) => c.destSeq)) : this.nextRead;
    state.orderedTo = target.destSeq;
    state.highest = this.order.highest;
    state.judgedSeq = target.ackFloor;
    state.judgedDestSeq = target.destSeq;
    state.judgedAt = new Date(target.atMs).toISOString();
    this.coverage = 1;
    this.deps.metrics.auditCoverage.set(this.label, 1);
    await this.report("range", record, verdict, this.order.take(), sourceCreatedMs);
  }

  /** Too far behind to read it all within its budget: the range up to `target` is left unchecked, and said so. */
  private async skipTo(target: Sample): Promise<void> {
    const state = this.state!;
    const skipped = target.ackFloor - state.judgedSeq;
    this.deps.logger.warn(
      { fromSeq: state.judgedSeq + 1, toSeq: target.ackFloor, maxReadRate: this.audit.maxReadRate },
      "audit skipped a range it could not read within audit.maxReadRate; the next sweep checks it",
    );
    this.coverage = 0;
    this.deps.metrics.auditCoverage.set(this.label, 0);
    this.carried = [];
    this.nextRead = target.destSeq + 1;
    state.readFrom = this.nextRead;
    state.orderedTo = target.destSeq;
    state.judgedSeq = target.ackFloor;
    state.judgedDestSeq = target.destSeq;
    state.judgedAt = new Date(target.atMs).toISOString();
    this.deps.metrics.auditPasses.inc({ ...this.label, kind: "range", outcome: "skipped" });
    this.deps.logger.debug({ skipped }, "audit range skipped");
    await this.save();
  }

  /** The whole retained window of the source, against the whole destination, every audit.sweepEvery. */
  private async sweep(jsm: JetStreamManager, sourceCreatedMs: number): Promise<void> {
    const state = this.state!;
    if (this.audit.sweepEveryMs === 0 || this.now() < state.nextSweepMs) return;
    const info = await jsm.streams.info(this.deps.config.from.stream);
    const record = new RangeRecord(Math.max(0, info.state.first_seq - 1), state.judgedSeq);
    if (record.to > record.from) {
      this.deps.logger.info({ fromSeq: record.from + 1, toSeq: record.to }, "audit sweep of the source's retained window starts");
      const copies = new CopyReader(this.deps.config, sourceCreatedMs);
      await this.readPaced(this.destSide(), 1, state.judgedDestSeq, (m) => {
        const copy = copies.read(m);
        if (copy && copy.sourceSeq <= record.to) record.note(copy);
      });
      const verdict = await this.judge(record, copies, sourceCreatedMs);
      state.nextSweepMs = this.now() + this.audit.sweepEveryMs;
      await this.report("sweep", record, verdict, new CopyOrder().take(), sourceCreatedMs);
      return;
    }
    state.nextSweepMs = this.now() + this.audit.sweepEveryMs;
    await this.save();
  }

  private judge(record: RangeRecord, copies: CopyReader, sourceCreatedMs: number): Promise<GapVerdict> {
    const gaps = record.gaps(MAX_GAPS);
    if (gaps.more > 0)
      this.deps.logger.warn({ judged: gaps.seqs.length, left: gaps.more }, "audit judged only the first source seqs without a copy in this pass");
    return judgeGaps(
      {
        link: this.deps.config,
        links: typeof this.deps.links === "function" ? this.deps.links() : this.deps.links,
        source: this.sourceSide(),
        dest: this.destSide(),
        incarnation: sourceCreatedMs,
        guard: this.deps.guard,
        copies,
        paced: (n) => this.paced(n),
      },
      gaps.seqs,
    );
  }

  /** Counts, logs and stores what a pass found; with audit.repair auto, puts the missing back. */
  private async report(
    pass: "range" | "sweep",
    record: RangeRecord,
    verdict: GapVerdict,
    order: ReturnType<CopyOrder["take"]>,
    sourceCreatedMs: number,
  ): Promise<void> {
    const { metrics, logger } = this.deps;
    const state = this.state!;
    const checked = record.to - record.from;
    const missing = verdict.missing;
    metrics.auditChecked.inc(this.label, checked);
    state.totals.checked += checked;
    for (const [kind, n] of verdict.expected) if (n > 0) metrics.auditExpected.inc({ ...this.label, kind }, n);
    const at = new Date(this.now()).toISOString();
    const findings: Finding[] = [];
    if (missing.length > 0) {
      metrics.auditMissing.inc(this.label, missing.length);
      state.totals.missing += missing.length;
      const shown = missing.slice(0, EXAMPLES);
      findings.push({ at, kind: "missing", count: missing.length, sourceSeqs: shown.map((m) => m.sourceSeq), ids: shown.map((m) => m.id), pass });
      logger.error(
        { pass, count: missing.length, sourceSeqs: shown.map((m) => m.sourceSeq), ids: shown.map((m) => m.id), repair: this.audit.repair },
        "audit found messages missing from the destination",
      );
    }
    if (record.extra > 0) {
      metrics.auditExtra.inc(this.label, record.extra);
      state.totals.extra += record.extra;
      const ex = record.extraExamples;
      findings.push({ at, kind: "extra", count: record.extra, sourceSeqs: ex.map((e) => e.sourceSeq), ids: ex.map((e) => e.id), pass });
      logger.warn({ pass, count: record.extra, examples: ex }, "audit found extra copies in the destination");
    }
    if (order.reordered > 0) {
      metrics.auditReordered.inc(this.label, order.reordered);
      state.totals.reordered += order.reordered;
      findings.push({ at, kind: "reordered", count: order.reordered, sourceSeqs: order.reorderExamples.map((e) => e.sourceSeq), pass });
      logger.warn({ pass, count: order.reordered, examples: order.reorderExamples }, "audit found copies out of source order");
    }
    if (order.backwards > 0) {
      metrics.auditBackwards.inc(this.label, order.backwards);
      state.totals.backwards += order.backwards;
      findings.push({ at, kind: "backwards", count: order.backwards, sourceSeqs: [], pass });
      logger.warn({ pass, count: order.backwards, examples: order.backwardExamples }, "audit found entity versions going backwards");
    }
    const last = findings[0];
    if (last) state.lastFinding = last;
    metrics.auditPasses.inc({ ...this.label, kind: pass, outcome: findings.length > 0 ? "findings" : "clean" });
    logger.debug({ pass, fromSeq: record.from + 1, toSeq: record.to, gaps: verdict.expected.size }, "audit pass done");
    if (missing.length > 0 && this.audit.repair === "auto") await this.repair(missing, sourceCreatedMs);
    await this.save();
  }

  private async repair(missing: GapVerdict["missing"], sourceCreatedMs: number): Promise<void> {
    const items: RepairItem[] = missing.map((m) => ({ id: m.id, sourceSeq: m.sourceSeq }));
    const commitError = await putBack(this.deps.config, { source: this.sourceSide(), dest: this.destSide() }, items, this.deps.guard.kind === "none" ? undefined : this.deps.guard, {
      incarnation: sourceCreatedMs,
    });
    const repaired = items.filter((i) => i.outcome === "repaired");
    if (repaired.length > 0) {
      this.deps.metrics.auditRepaired.inc(this.label, repaired.length);
      this.state!.totals.repaired += repaired.length;
    }
    const byOutcome: Record<string, number[]> = {};
    for (const i of items) (byOutcome[i.outcome ?? "failed"] ??= []).push(i.sourceSeq);
    const level = repaired.length === items.length ? "info" : "warn";
    this.deps.logger[level]({ outcomes: byOutcome, ...(commitError ? { guardCommitError: commitError } : {}) }, "audit put missing messages back");
  }

  private async save(): Promise<void> {
    if (this.stopped || !this.deps.link.working()) throw new Stopped();
    const text = JSON.stringify(this.state);
    try {
      this.revision = await this.deps.positions.writeAuditState(text, this.revision);
    } catch (err) {
      // Another owner wrote it since: its word stands; read it again on the next tick.
      this.state = undefined;
      throw err;
    }
  }

  /** Reads [from, to] of a side in chunks, spending the read budget between them; stops with the audit. */
  private async readPaced(side: StreamSide, from: number, to: number, onMessage: Parameters<typeof readStream>[2]): Promise<void> {
    const chunk = Math.max(1_000, Math.min(50_000, Math.floor(this.audit.maxReadRate)));
    let next = from;
    while (next <= to) {
      if (this.stopped || !this.deps.link.working()) throw new Stopped();
      const r = await readStream(side, { startSeq: next, endSeq: to, maxMessages: chunk }, onMessage);
      await this.paced(r.delivered);
      if (r.delivered < chunk) return; // reached `to` (or the stream's end)
      next = r.lastSeq + 1;
    }
  }

  /** Waits as long as `messages` more reads cost at audit.maxReadRate. */
  private async paced(messages: number): Promise<void> {
    const now = this.now();
    this.paidUntil = Math.max(this.paidUntil, now) + (messages * 1000) / this.audit.maxReadRate;
    const wait = this.paidUntil - now - 1_000; // a second of reads may go at once
    if (wait > 0) await sleep(wait);
  }

  private sourceSide(): StreamSide {
    const { config, source, sourceDomain } = this.deps;
    return { nc: source, region: config.from.region, stream: config.from.stream, ...(sourceDomain ? { domain: sourceDomain } : {}) };
  }

  private destSide(): StreamSide {
    const { config, dest, destDomain } = this.deps;
    return { nc: dest, region: config.to.region, stream: config.to.stream, ...(destDomain ? { domain: destDomain } : {}) };
  }
}
