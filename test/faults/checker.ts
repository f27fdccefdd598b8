import assert from "node:assert/strict";
import { appendFile } from "node:fs/promises";
import type { NatsConnection } from "@nats-io/nats-core";
import { jetstreamManager } from "@nats-io/jetstream";
import type { StoredMessage } from "../helpers/streams.js";
import { readStream, streamCount } from "../helpers/streams.js";
import type { LivenessReport } from "../helpers/liveness.js";

/**
 * The one verdict every fault test ends with: what the destination holds, compared with the source,
 * for loss, duplicates, extras, ORDER (overall and per subject) and per-entity versions.
 *
 * Order is the point: an earlier round of fault tests checked exactly-once only and passed while
 * the relay stored messages out of order.
 */

/** One message of the source stream, in source order. */
export interface SourceMessage {
  readonly id: string;
  readonly subject: string;
  /** Source stream sequence: the order the destination must keep. */
  readonly seq: number;
  readonly entity?: string;
  readonly version?: number;
}

/** One message found in the destination, in destination stream order. */
export interface StoredCopy {
  /** Its `Nats-Msg-Id` (undefined when it has none). */
  readonly id: string | undefined;
  readonly subject: string;
}

export interface FaultReport {
  readonly fault: string;
  /** Source messages expected (distinct ids). */
  readonly messages: number;
  /** Copies of an id the source itself stored more than once (a publisher's retry); expected once. */
  readonly sourceDuplicates?: number;
  /** Expected ids with no copy in the destination. */
  readonly lost: number;
  /**
   * Of the lost, those whose entity the destination holds at a newer version: what the guard drops as a
   * stale version (a retried publish judged again after a newer version of its entity was stored).
   */
  readonly lostSuperseded: number;
  /** Copies beyond the first of an expected id (so stored = messages - lost + duplicated + extra). */
  readonly duplicated: number;
  /** First copies stored after a message that comes later in source order (overall). */
  readonly reordered: number;
  /** The same, counted within each destination subject. */
  readonly reorderedBySubject: number;
  /** Per entity, a stored version lower than one stored before it (every copy counts). */
  readonly versionsRegressed: number;
  /** Stored messages that are no expected message: unknown id, no id, or an expected id on the wrong subject. */
  readonly extra: number;
  /** First 10 ids of each kind. */
  /** Up to 10 ids of each; an extra as "<id or (no id)> on <subject>". */
  readonly samples: { lost: string[]; duplicated: string[]; reordered: string[]; extra: string[] };
  /** `/healthz` probes while the fault was on; attached by the test. */
  readonly liveness?: LivenessReport;
  /** relay_messages_total{outcome="relayed"}, when the test could read it. */
  readonly relayedMetric?: number;
}

const SAMPLES = 10;

/**
 * Pure: compares what the destination stores (in destination order) with the source (any order; its
 * `seq` is the order). `subjectOf` maps a source message to the subject it must have in the
 * destination (default: the same subject); a copy of an expected id on another subject is not a
 * delivery of it but an extra.
 *
 * `reordered`: walking the destination in order, considering only the first copy of each expected
 * id, a message whose source seq is lower than the highest source seq already seen. `reorderedBySubject`
 * is the same walk within each destination subject. Both count messages, so one message stored late
 * among many counts once, while a message stored early makes everything it overtook count.
 */
export function computeReport(
  fault: string,
  stored: readonly StoredCopy[],
  source: readonly SourceMessage[],
  subjectOf: (s: SourceMessage) => string = (s) => s.subject,
): FaultReport {
  const byId = new Map<string, SourceMessage>();
  let sourceDuplicates = 0;
  for (const s of source) {
    const first = byId.get(s.id);
    if (first === undefined) {
      byId.set(s.id, s);
      continue;
    }
    // One message stored twice by the source itself: a test publisher's retry across an election of
    // the source stream's leader that the source's own dedup missed. One identity, expected once, in
    // its first copy's place. Two different messages under one id are a bug of the test.
    if (first.subject !== s.subject || first.entity !== s.entity || first.version !== s.version) {
      throw new Error(`computeReport: id ${s.id} names two different messages in the source (seq ${first.seq} and ${s.seq}); the checker needs unique ids`);
    }
    sourceDuplicates++;
    if (s.seq < first.seq) byId.set(s.id, s);
  }
  const expected = [...byId.values()];

  const copies = new Map<string, number>();
  let extra = 0;
  const extraIds: string[] = [];
  let duplicated = 0;
  const duplicatedIds: string[] = [];
  let reordered = 0;
  const reorderedIds: string[] = [];
  let highest = -Infinity;
  let reorderedBySubject = 0;
  const highestBySubject = new Map<string, number>();
  let versionsRegressed = 0;
  const highestVersion = new Map<string, number>();

  for (const copy of stored) {
    const s = copy.id === undefined ? undefined : byId.get(copy.id);
    if (!s || copy.subject !== subjectOf(s)) {
      extra++;
      if (extraIds.length < SAMPLES) extraIds.push(`${copy.id ?? "(no id)"} on ${copy.subject}`);
      continue;
    }
    // Every copy moves an entity's state, so a late older copy is a regression even when duplicated.
    if (s.entity !== undefined && s.version !== undefined) {
      const before = highestVersion.get(s.entity);
      if (before !== undefined && s.version < before) versionsRegressed++;
      else highestVersion.set(s.entity, s.version);
    }
    const n = (copies.get(s.id) ?? 0) + 1;
    copies.set(s.id, n);
    if (n > 1) {
      duplicated++;
      if (n === 2 && duplicatedIds.length < SAMPLES) duplicatedIds.push(s.id);
      continue;
    }
    if (s.seq < highest) {
      reordered++;
      if (reorderedIds.length < SAMPLES) reorderedIds.push(s.id);
    } else highest = s.seq;
    const subjectHighest = highestBySubject.get(copy.subject) ?? -Infinity;
    if (s.seq < subjectHighest) reorderedBySubject++;
    else highestBySubject.set(copy.subject, s.seq);
  }

  const lostMessages = expected.filter((s) => !copies.has(s.id));
  const lostIds = lostMessages.map((s) => s.id);
  const lostSuperseded = lostMessages.filter(
    (s) => s.entity !== undefined && s.version !== undefined && (highestVersion.get(s.entity) ?? -Infinity) > s.version,
  ).length;
  return {
    fault,
    messages: expected.length,
    ...(sourceDuplicates > 0 ? { sourceDuplicates } : {}),
    lost: lostIds.length,
    lostSuperseded,
    duplicated,
    reordered,
    reorderedBySubject,
    versionsRegressed,
    extra,
    samples: { lost: lostIds.slice(0, SAMPLES), duplicated: duplicatedIds, reordered: reorderedIds, extra: extraIds },
  };
}

/**
 * The source stream in order. id = `Nats-Msg-Id` (fault tests always publish with one; a message
 * without it rejects). Entity and version come from the named headers (default `Test-Entity` and
 * `Test-Version`, which publishIds stamps); a version that is not a non-negative integer rejects,
 * since the checker must not guess.
 */
export async function readSource(
  nc: NatsConnection,
  stream: string,
  /** `versions: false`: ignore entities (a fault where the server itself may reorder, counted separately). */
  opts: { entityHeader?: string; versionHeader?: string; versions?: false } = {},
): Promise<SourceMessage[]> {
  const messages = await readWhole(nc, stream);
  return messages.map((m) => {
    const id = m.headers["Nats-Msg-Id"];
    if (id === undefined) throw new Error(`readSource: ${stream} seq ${m.seq} has no Nats-Msg-Id`);
    // publishIds stamps every message with these; tests publishing their own name theirs.
    const entity = opts.versions === false ? undefined : m.headers[opts.entityHeader ?? "Test-Entity"];
    const rawVersion = opts.versions === false ? undefined : m.headers[opts.versionHeader ?? "Test-Version"];
    if (rawVersion !== undefined && !/^\d+$/.test(rawVersion)) {
      throw new Error(`readSource: ${stream} seq ${m.seq} has version ${JSON.stringify(rawVersion)}`);
    }
    return {
      id,
      subject: m.subject,
      seq: m.seq,
      ...(entity === undefined ? {} : { entity }),
      ...(rawVersion === undefined ? {} : { version: Number(rawVersion) }),
    };
  });
}

/** Reads the whole destination stream and compares it with `source` (see computeReport). */
export async function checkDelivery(opts: {
  fault: string;
  dest: NatsConnection;
  stream: string;
  source: readonly SourceMessage[];
  /** The subject a source message must have in the destination; default: the same subject. */
  subjectOf?: (s: SourceMessage) => string;
}): Promise<FaultReport> {
  const stored = await readWhole(opts.dest, opts.stream);
  const copies = stored.map((m) => ({ id: m.headers["Nats-Msg-Id"], subject: m.subject }));
  return computeReport(opts.fault, copies, opts.source, opts.subjectOf);
}

/**
 * readStream, refusing a short read: it ends quietly on its timeout, and a truncated destination would
 * read as lost messages. Fault streams only grow, so fewer messages than the count before is short.
 */
async function readWhole(nc: NatsConnection, stream: string): Promise<StoredMessage[]> {
  const before = await streamCount(nc, stream);
  const messages = await readStream(nc, stream, 300_000);
  if (messages.length < before) {
    const state = (await (await jetstreamManager(nc)).streams.info(stream).catch(() => undefined))?.state;
    const gaps: string[] = [];
    for (let i = 1; i < messages.length && gaps.length < 5; i++) {
      const prev = messages[i - 1] as StoredMessage;
      const cur = messages[i] as StoredMessage;
      if (cur.seq !== prev.seq + 1) gaps.push(`${prev.seq}->${cur.seq}`);
    }
    throw new Error(
      `reading ${stream} ended after ${messages.length} of its ${before} messages (last read seq ${messages.at(-1)?.seq ?? "none"}, ` +
        `sequence gaps ${gaps.join(" ") || "none"}; stream now first ${state?.first_seq} last ${state?.last_seq} messages ${state?.messages} deleted ${state?.num_deleted ?? 0})`,
    );
  }
  return messages;
}

/** Copies the destination stored: first copies, extra copies of expected ids, and extras. */
export function storedCopies(report: FaultReport): number {
  return report.messages - report.lost + report.duplicated + report.extra;
}

/**
 * The guarantees: nothing lost, nothing duplicated, nothing extra, at most `reorderedAllowed`
 * (default 0) reordered overall and per subject, no version regressed; when liveness was attached,
 * every `/healthz` probe answered 2xx and the slowest in under 1 s (or `livenessLimitMs`); with `relayedMustEqualStored`
 * and a `relayedMetric`, the relayed counter equals the copies stored. The message carries the whole
 * report.
 */
export function assertDelivery(
  report: FaultReport,
  opts: {
    reorderedAllowed?: number;
    /** Versions seen going back that are allowed (each message the server itself reordered moves its entity's version back). */
    versionsRegressedAllowed?: number;
    /**
     * Lost messages allowed when each is superseded (the destination holds a newer version of its
     * entity): the stale drops the relays counted (`relay_stale_retries_total`). Default 0.
     */
    staleDropsAllowed?: number;
    relayedMustEqualStored?: boolean;
    /** false: source order is promised per subject only (a partitioned link: partitions interleave). */
    overallOrder?: boolean;
    /**
     * Slowest /healthz allowed (default 1000 ms, a Kubernetes probe's default timeout). Only for relays
     * that share the test's own event loop with other relays and the load generator, where a probe
     * measures all of them at once; a relay process of its own is always held to the default.
     */
    livenessLimitMs?: number;
  } = {},
): void {
  const allowed = opts.reorderedAllowed ?? 0;
  const problems: string[] = [];
  const staleAllowed = opts.staleDropsAllowed ?? 0;
  const superseded = Math.min(report.lostSuperseded, staleAllowed);
  if (report.lost - superseded !== 0)
    problems.push(
      staleAllowed === 0
        ? `${report.lost} lost`
        : `${report.lost} lost (${report.lostSuperseded} superseded by a newer version, ${staleAllowed} stale drops allowed)`,
    );
  if (report.duplicated !== 0) problems.push(`${report.duplicated} duplicated`);
  if (report.extra !== 0) problems.push(`${report.extra} extra`);
  if (opts.overallOrder !== false && report.reordered > allowed) problems.push(`${report.reordered} reordered (allowed ${allowed})`);
  if (report.reorderedBySubject > allowed)
    problems.push(`${report.reorderedBySubject} reordered within a subject (allowed ${allowed})`);
  const versionsAllowed = opts.versionsRegressedAllowed ?? 0;
  if (report.versionsRegressed > versionsAllowed)
    problems.push(`${report.versionsRegressed} versions regressed (allowed ${versionsAllowed})`);
  if (report.liveness) {
    if (report.liveness.failures !== 0)
      problems.push(
        `${report.liveness.failures} failed /healthz probes (${report.liveness.firstFailure ?? "?"})`,
      );
    const limit = opts.livenessLimitMs ?? 1_000;
    if (report.liveness.worstMs >= limit)
      problems.push(`slowest /healthz ${report.liveness.worstMs}ms (limit ${limit}ms)`);
  }
  if (
    opts.relayedMustEqualStored &&
    report.relayedMetric !== undefined &&
    report.relayedMetric !== storedCopies(report)
  ) {
    problems.push(`relayed metric ${report.relayedMetric} != ${storedCopies(report)} stored copies`);
  }
  assert.ok(
    problems.length === 0,
    `${report.fault}: ${problems.join(", ")}\n${JSON.stringify(report, null, 2)}`,
  );
}

/** Appends the report as one JSON line to the file named by FAULTS_REPORT (the --long table); else nothing. */
export async function recordRow(report: FaultReport): Promise<void> {
  const file = process.env.FAULTS_REPORT;
  if (!file) return;
  await appendFile(file, `${JSON.stringify(report)}\n`);
}

/** `npm run test:faults -- --long`: more messages, minutes per scenario, randomized timing. */
export const LONG: boolean = process.env.FAULTS_LONG === "1";

/** `short` in CI, `long` under FAULTS_LONG=1. */
export function scaled(short: number, long: number): number {
  return LONG ? long : short;
}

/** A random delay in [0, maxMs) ms for fault timing; callers pass a larger max in LONG. */
export function jitter(maxMs: number): number {
  return Math.floor(Math.random() * maxMs);
}
