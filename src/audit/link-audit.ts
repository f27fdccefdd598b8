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
import type { TickGrid } from "../lifecycle/tick-grid.js";
import type { StreamSide } from "../nats/stream-reader.js";
import type { RelayMetrics } from "../observability/metrics.js";
import { newTotals, parseAuditState } from "./audit-state.js";
import type { AuditState, Finding } from "./audit-state.js";
import { CopyReader } from "./copies.js";
import { judgeGaps } from "./gaps.js";
import type { GapVerdict } from "./gaps.js";
import { putBack } from "./put-back.js";
import type { RepairItem } from "./put-back.js";
import { CopyOrder, RangeRecord } from "./range-record.js";
import type { Copy } from "./copies.js";
import { recordFindings } from "./findings.js";
import type { Pass } from "./findings.js";
import { AuditStopped, Pacer, readPaced } from "./pacer.js";

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
  /** Samples of the link's position (ack floor, destination seq) waiting to be `audit.after` old. */
  readonly pendingSamples: number;
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

/** The sweep's share of audit.maxReadRate (it reads beside the range passes). */
const SWEEP_SHARE = 0.25;
/** Source seqs without a copy judged in one pass at most. */
const MAX_GAPS = 1_000_000;
/** Samples kept at most while the audit cannot go on (a failing read): the oldest go. */
const MAX_SAMPLES = 10_000;
/** The regions' clocks differ: a sweep reads the destination from this long before its first source message. */
const CLOCK_SLACK_MS = 60_000;

export class LinkAudit {
  private readonly now: () => number;
  private readonly rangePacer: Pacer;
  private readonly sweepPacer: Pacer;
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private sweeping: Promise<void> | undefined;
  private saving: Promise<unknown> = Promise.resolve();
  private stopped = false;
  private samples: Sample[] = [];
  private lastProgress = -1;
  private state: AuditState | undefined;
  private revision = 0;
  /** Copies of seqs above the judged range, read already (in memory only: a new owner reads from readFrom). */
  private carried: Copy[] = [];
  private nextRead = 1;
  private order = new CopyOrder();
  /** Source seqs this owner checked and skipped (over its budget): the coverage. */
  private covered = 0;
  private skipped = 0;
  private lastError: string | undefined;

  constructor(private readonly deps: LinkAuditDeps) {
    this.now = deps.clock ?? Date.now;
    this.rangePacer = new Pacer(() => this.audit.maxReadRate, this.now);
    this.sweepPacer = new Pacer(() => this.audit.maxReadRate * SWEEP_SHARE, this.now);
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
      coverage: this.coverage(),
      nextSweepAt: new Date(s.nextSweepMs).toISOString(),
      pendingSamples: this.samples.length,
      totals: { ...s.totals },
      ...(s.lastFinding ? { lastFinding: s.lastFinding } : {}),
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  private going = (): boolean => !this.stopped && this.deps.link.working();

  private coverage(): number {
    const all = this.covered + this.skipped;
    return all === 0 ? 1 : this.covered / all;
  }

  private async step(): Promise<void> {
    const { link } = this.deps;
    if (this.stopped) return;
    if (!link.working()) {
      // A new ownership reads the stored state again: another owner may have gone on meanwhile.
      this.state = undefined;
      this.samples = [];
      this.carried = [];
      this.lastProgress = -1;
      this.deps.metrics.auditLag.set(this.label, 0); // the owner reports it
      return;
    }
    const jsm = link.jsm();
    const sourceCreatedMs = link.sourceCreatedMs();
    if (!jsm || sourceCreatedMs === undefined) return;
    try {
      await this.sample(jsm);
      if (!this.state) await this.load(jsm, sourceCreatedMs);
      const state = this.state;
      if (!state) return;
      await this.rangePass(state, sourceCreatedMs);
      if (this.state === state && !this.sweeping && this.audit.sweepEveryMs > 0 && this.now() >= state.nextSweepMs) {
        this.sweeping = this.sweep(state, jsm, sourceCreatedMs)
          .catch((err: unknown) => this.failed(err, "audit sweep failed; the next one is due after audit.sweepEvery"))
          .finally(() => (this.sweeping = undefined));
      }
      this.deps.metrics.auditLag.set(this.label, this.lagMs() / 1000);
      if (this.lastError) this.deps.logger.info("audit goes on");
      this.lastError = undefined;
    } catch (err) {
      this.failed(err, "audit pass failed; trying again");
      if (!(err instanceof AuditStopped)) this.state = undefined; // read again: the bucket holds what was last written
    }
  }

  private failed(err: unknown, what: string): void {
    if (err instanceof AuditStopped || this.stopped) return;
    const message = toRelayError(err).message;
    if (this.lastError === undefined) this.deps.logger.warn({ err: message }, what);
    this.lastError = message;
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
    if (this.samples.length > MAX_SAMPLES) this.samples.shift();
  }

  private async destInfo(): Promise<{ lastSeq: number; createdMs: number }> {
    const { dest, destDomain, config } = this.deps;
    const jsm = await jetstreamManager(dest, destDomain ? { domain: destDomain, checkAPI: false } : { checkAPI: false });
    const info = await jsm.streams.info(config.to.stream);
    return { lastSeq: info.state.last_seq, createdMs: Date.parse(info.created) };
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
      const originSeq = await this.originOf(jsm, first);
      state = {
        sourceCreatedMs,
        destCreatedMs: first.destCreatedMs,
        originSeq,
        judgedSeq: originSeq,
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
    this.covered = 0;
    this.skipped = 0;
    this.deps.logger.info({ judgedSeq: state.judgedSeq, readFrom: state.readFrom }, "audit starts");
  }

  /**
   * Where a new audit begins: before the first message the link's consumer delivers from (all of the
   * stream, or a start sequence), else (a start at new messages or at a time) at the link's ack floor.
   */
  private async originOf(jsm: JetStreamManager, first: Sample): Promise<number> {
    const { config } = this.deps;
    const [info, ci] = await Promise.all([jsm.streams.info(config.from.stream), jsm.consumers.info(config.from.stream, config.durableName)]);
    const firstSeq = info.state.first_seq;
    if (ci.config.deliver_policy === "all") return Math.max(0, firstSeq - 1);
    if (ci.config.deliver_policy === "by_start_sequence") return Math.max(firstSeq, ci.config.opt_start_seq ?? 1) - 1;
    return first.ackFloor;
  }

  private lagMs(): number {
    const s = this.state;
    const settled = this.eligible();
    if (!s || !settled || settled.ackFloor <= s.judgedSeq) return 0;
    return Math.max(0, settled.atMs - Date.parse(s.judgedAt));
  }

  /** The index of the newest sample that is `audit.after` old (-1: none). */
  private eligibleIndex(): number {
    const cutoff = this.now() - this.audit.afterMs;
    let found = -1;
    this.samples.forEach((s, i) => {
      if (s.atMs <= cutoff) found = i;
    });
    return found;
  }

  private eligible(): Sample | undefined {
    return this.samples[this.eligibleIndex()];
  }

  private async rangePass(state: AuditState, sourceCreatedMs: number): Promise<void> {
    const t = this.eligibleIndex();
    const target = this.samples[t];
    if (!target) return;
    if (target.destCreatedMs !== state.destCreatedMs) {
      this.state = undefined; // the destination was re-created: start over on the next tick
      this.samples = [];
      return;
    }
    if (target.ackFloor <= state.judgedSeq) return;
    const sampled = this.sampleAhead(state, t);
    const record = new RangeRecord(state.judgedSeq, target.ackFloor);
    for (const c of this.carried) record.note(c);
    const copies = new CopyReader(this.deps.config, sourceCreatedMs);
    const orderedTo = state.orderedTo;
    await readPaced(this.destSide(), { seq: this.nextRead }, target.destSeq, this.rangePacer, this.going, (m, seq) => {
      const copy = copies.read(m, seq);
      if (!copy) return;
      const first = record.note(copy);
      if (seq <= orderedTo) return; // read before (an earlier owner's, a skip's): checked then
      if (first) this.order.note(copy);
      else if (copy.sourceSeq <= record.from && !copy.late) record.extra++;
    });
    // A sampled pass: gaps below its lowest copy may be copies stored before its read began.
    const above = sampled ? Math.min(record.to, record.lowest - 1) : record.from;
    const verdict = await this.judge(record, copies, sourceCreatedMs, this.rangePacer, above);
    const later = record.later;
    this.carried = later;
    this.nextRead = target.destSeq + 1;
    state.readFrom = later.length > 0 ? Math.min(...later.map((c) => c.destSeq)) : this.nextRead;
    state.orderedTo = target.destSeq;
    state.highest = this.order.highest;
    state.judgedSeq = target.ackFloor;
    state.judgedDestSeq = target.destSeq;
    state.judgedAt = new Date(target.atMs).toISOString();
    this.samples = this.samples.slice(t);
    this.skipped += above - record.from;
    this.covered += record.to - above;
    this.deps.metrics.auditCoverage.set(this.label, this.coverage());
    await this.finish(state, "range", record, verdict, this.order.take(), sourceCreatedMs, record.to - above);
  }

  /**
   * More to read than audit.maxReadRate allows in one audit.after: the pass starts at the earliest
   * sample j whose range it can read within that, from the destination seq of the sample before
   * (true returned). The source seqs up to there are left unchecked, logged and counted in the coverage;
   * so are the seqs below the pass's lowest copy, which may have copies stored before its read began.
   */
  private sampleAhead(state: AuditState, t: number): boolean {
    const target = this.samples[t]!;
    const budget = (this.audit.maxReadRate * Math.max(1_000, this.audit.afterMs)) / 1000;
    if (target.destSeq - this.nextRead + 1 <= budget) return false;
    let j = t;
    while (j > 1 && target.destSeq - this.samples[j - 2]!.destSeq <= budget) j--;
    const start = this.samples[j - 1] ?? target; // no sample before the target: all of it goes unchecked
    const skipped = start.ackFloor - state.judgedSeq;
    if (skipped <= 0) return false;
    this.deps.logger.warn(
      { fromSeq: state.judgedSeq + 1, toSeq: start.ackFloor, maxReadRate: this.audit.maxReadRate },
      "audit is over its read budget: it leaves these source seqs unchecked (the sweep covers them)",
    );
    this.skipped += skipped;
    this.carried = [];
    this.nextRead = start.destSeq + 1;
    state.orderedTo = start.destSeq;
    state.judgedSeq = start.ackFloor;
    this.deps.metrics.auditPasses.inc({ ...this.label, kind: "range", outcome: "sampled" });
    return true;
  }

  /**
   * The source's retained window up to the judged floor, again, against the destination, beside the range
   * passes (a quarter of their budget): at most as many source seqs as that share reads in one
   * audit.sweepEvery, the newest ones, so a sweep ends before the next is due.
   */
  private async sweep(state: AuditState, jsm: JetStreamManager, sourceCreatedMs: number): Promise<void> {
    const { config, logger } = this.deps;
    const info = await jsm.streams.info(config.from.stream);
    const retainedFrom = Math.max(0, info.state.first_seq - 1);
    const budget = Math.max(1_000, Math.floor((this.audit.maxReadRate * SWEEP_SHARE * this.audit.sweepEveryMs) / 1000));
    const record = new RangeRecord(Math.max(retainedFrom, state.originSeq, state.judgedSeq - budget), state.judgedSeq);
    const destTo = state.judgedDestSeq;
    state.nextSweepMs = this.now() + this.audit.sweepEveryMs;
    if (record.to <= record.from) return void (await this.save(state));
    logger.info({ fromSeq: record.from + 1, toSeq: record.to, retainedFromSeq: retainedFrom + 1 }, "audit sweep starts");
    // A copy is stored after its source message (give or take the regions' clocks).
    const first = record.from > retainedFrom ? await jsm.streams.getMessage(config.from.stream, { seq: record.from + 1 }).catch(() => null) : null;
    const from = first ? { ms: first.time.getTime() - CLOCK_SLACK_MS } : { seq: 1 };
    const copies = new CopyReader(config, sourceCreatedMs);
    await readPaced(this.destSide(), from, destTo, this.sweepPacer, this.going, (m, seq) => {
      const copy = copies.read(m, seq);
      if (copy && copy.sourceSeq <= record.to) record.note(copy);
    });
    const verdict = await this.judge(record, copies, sourceCreatedMs, this.sweepPacer);
    await this.finish(state, "sweep", record, verdict, new CopyOrder().take(), sourceCreatedMs);
  }

  private judge(record: RangeRecord, copies: CopyReader, sourceCreatedMs: number, pacer: Pacer, above = record.from): Promise<GapVerdict> {
    const gaps = record.gaps(MAX_GAPS, above);
    if (gaps.more > 0) this.deps.logger.warn({ judged: gaps.seqs.length, left: gaps.more }, "audit judged only the first source seqs without a copy in this pass");
    return judgeGaps(
      {
        link: this.deps.config,
        links: typeof this.deps.links === "function" ? this.deps.links() : this.deps.links,
        source: this.sourceSide(),
        dest: this.destSide(),
        incarnation: sourceCreatedMs,
        guard: this.deps.guard,
        copies,
        paced: (n) => pacer.spend(n),
        read: (side, from, to, filter, onMessage) => readPaced(side, from, to, pacer, this.going, onMessage, filter),
      },
      gaps.seqs,
    );
  }

  /** Counts and logs what a pass found, puts the missing back with audit.repair auto, and stores the state. */
  private async finish(state: AuditState, pass: Pass, record: RangeRecord, verdict: GapVerdict, order: ReturnType<CopyOrder["take"]>, sourceCreatedMs: number, checked?: number): Promise<void> {
    const { metrics, logger, config } = this.deps;
    recordFindings({ metrics, logger, link: config.name, now: this.now }, state, pass, record, verdict, order, checked);
    if (verdict.missing.length > 0 && this.audit.repair === "auto") await this.repair(state, verdict.missing, sourceCreatedMs);
    await this.save(state);
  }

  private async repair(state: AuditState, missing: GapVerdict["missing"], sourceCreatedMs: number): Promise<void> {
    const items: RepairItem[] = missing.map((m) => ({ id: m.id, sourceSeq: m.sourceSeq }));
    const guard = this.deps.guard.kind === "none" ? undefined : this.deps.guard;
    const commitError = await putBack(this.deps.config, { source: this.sourceSide(), dest: this.destSide() }, items, guard, { incarnation: sourceCreatedMs });
    const repaired = items.filter((i) => i.outcome === "repaired").length;
    if (repaired > 0) {
      this.deps.metrics.auditRepaired.inc(this.label, repaired);
      state.totals.repaired += repaired;
    }
    const outcomes: Record<string, number[]> = {};
    for (const i of items) (outcomes[i.outcome ?? "failed"] ??= []).push(i.sourceSeq);
    const level = repaired === items.length ? "info" : "warn";
    this.deps.logger[level]({ outcomes, ...(commitError ? { guardCommitError: commitError } : {}) }, "audit put missing messages back");
  }

  /** Writes the state, one write at a time, only while this relay still works the link with it. */
  private save(state: AuditState): Promise<void> {
    const write = this.saving.then(async () => {
      if (!this.going() || state !== this.state) throw new AuditStopped();
      try {
        this.revision = await this.deps.positions.writeAuditState(JSON.stringify(state), this.revision);
      } catch (err) {
        // Another owner wrote it since: its word stands; the state is read again on the next tick.
        if (state === this.state) this.state = undefined;
        throw err;
      }
    });
    this.saving = write.catch(() => undefined);
    return write;
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
