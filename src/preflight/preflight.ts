/**
 * `check --live`: connects to every region the selected links touch, gathers the facts each check
 * needs (stream and consumer info, the streams that capture a subject, Redis persistence), runs
 * the checks of checks.ts per link, and closes every connection it opened.
 *
 * Nothing fails as a whole because one thing is unreachable: an unreachable region or Redis is an
 * error row for the links that need it, and the checks that depend on it are skipped.
 */
import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { pino } from "pino";
import type { Logger } from "pino";
import { linkUnits } from "../config/partitions.js";
import type { LinkConfig, RedisGuardConnection, RegionConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError, isRelayError } from "../errors.js";
import {
  checkPersistence,
  checkRedisVersion,
  connectClient,
  createRedisClient,
  describeRedis,
  sanitizeError,
  secretsOf as redisSecretsOf,
} from "../guard/redis-connection.js";
import type { GuardRedisClient } from "../guard/redis-connection.js";
import { heldByEarlierRelay, markerGroups, readMarker } from "../guard/marker.js";
import { readEviction, readReplication } from "../guard/safety-probe.js";
import { leaseKey } from "../config/lease-key.js";
import { isApiCode } from "../nats/durable-consumer.js";
import { openRegion } from "../nats/region-session.js";
import { withDeadline } from "../lifecycle/deadline.js";
import {
  checkConsumer,
  checkDeadLetter,
  checkDestinationStream,
  checkDuplicateWindow,
  checkGuard,
  checkGuardEviction,
  checkGuardMarker,
  checkGuardReplication,
  checkLoops,
  checkOverlaps,
  checkPartitions,
  checkRegion,
  checkRetention,
  checkSourceStream,
  checkStart,
  checkSubjectsBound,
  checkWindow,
} from "./checks.js";
import { readStart } from "./start-facts.js";
import { destinationPatterns, sourcePatterns, unboundSubjects } from "../link/binding.js";
import { checkOrder } from "./order-checks.js";
import { streamFacts } from "../nats/stream-facts.js";
import type { StreamFact } from "../nats/stream-facts.js";
import type {
  CheckResult,
  ConsumerFact,
  DeadLetterFact,
  MarkerFact,
  PartitionFact,
  RedisFact,
  RegionFact,
} from "./checks.js";

export interface PreflightOptions {
  /** Only the links whose destination is this region. */
  readonly region?: string;
  /** Give up on a region's first connect after this long (ms). Default 5 s. */
  readonly connectTimeoutMs?: number;
  /** Give up on Redis after this long (ms). Default 5 s. */
  readonly redisTimeoutMs?: number;
  readonly logger?: Logger;
}

export interface LinkReport {
  readonly link: LinkConfig;
  readonly rows: readonly CheckResult[];
}

export interface PreflightReport {
  readonly links: readonly LinkReport[];
}

/** 2 when any row is an error, 1 when any is a warning and `strict`, else 0. */
export function exitCodeFor(report: PreflightReport, strict: boolean): number {
  const rows = report.links.flatMap((l) => l.rows);
  if (rows.some((r) => r.level === "error")) return 2;
  if (strict && rows.some((r) => r.level === "warning")) return 1;
  return 0;
}

/** The links `check --region NAME` looks at; a USAGE error for a region the config does not have. */
export function selectLinks(config: RelayConfig, region: string | undefined): readonly LinkConfig[] {
  if (region === undefined) return config.links;
  if (!config.regions.has(region)) {
    throw new RelayError(
      ErrorCodes.USAGE,
      `check: --region ${region} is not a region of the config (known: ${[...config.regions.keys()].join(", ")})`,
    );
  }
  return config.links.filter((l) => l.to.region === region);
}

interface RegionSession {
  readonly fact: RegionFact;
  readonly nc?: NatsConnection;
  readonly jsm?: JetStreamManager;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** How long the check waits for a region's round trip (the pull window row says when it did not come). */
const RTT_WAIT_MS = 2_000;

/** The lowest of `n` round trips, one after the other: the network's share, not a busy moment's. */
async function lowestRtt(nc: NatsConnection, n: number): Promise<number> {
  let lowest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < n; i++) lowest = Math.min(lowest, await nc.rtt());
  return lowest;
}

async function openCheckedRegion(region: RegionConfig, logger: Logger, timeoutMs: number): Promise<RegionSession> {
  const s = await openRegion(region, { name: "jetstream-relay/check", logger, timeoutMs, checkApi: false });
  if (!s.ok) return { fact: { ok: false, reason: s.reason } };
  const rttMs = await withDeadline(lowestRtt(s.nc, 3), RTT_WAIT_MS, "round trip").catch(() => undefined);
  const maxPayload = s.nc.info?.max_payload;
  const version = s.nc.info?.version;
  return {
    fact: { ok: true, server: s.server, ...(version !== undefined ? { version } : {}), ...(rttMs !== undefined ? { rttMs } : {}), ...(maxPayload !== undefined ? { maxPayload } : {}) },
    nc: s.nc,
    jsm: s.jsm,
  };
}

async function readStream(session: RegionSession | undefined, stream: string): Promise<StreamFact> {
  if (!session?.jsm) return { kind: "unreachable" };
  try {
    return streamFacts(await session.jsm.streams.info(stream));
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) return { kind: "missing" };
    return { kind: "failed", reason: message(err) };
  }
}

async function readConsumer(
  session: RegionSession | undefined,
  link: LinkConfig,
  source: StreamFact,
): Promise<ConsumerFact> {
  if (!session?.jsm || source.kind !== "found") return { kind: "unreachable" };
  try {
    const info = await session.jsm.consumers.info(link.from.stream, link.durableName);
    const cfg = info.config;
    return {
      kind: "found",
      consumer: {
        filterSubjects: cfg.filter_subjects?.length
          ? cfg.filter_subjects
          : cfg.filter_subject
            ? [cfg.filter_subject]
            : [],
        numPending: info.num_pending,
        numAckPending: info.num_ack_pending,
        ackFloorStreamSeq: info.ack_floor.stream_seq,
        ackFloorConsumerSeq: info.ack_floor.consumer_seq,
      },
    };
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.ConsumerNotFound)) return { kind: "missing" };
    return { kind: "failed", reason: message(err) };
  }
}

/** The subjects of a partitioned link's source that match its filter, with message counts. */
async function readPartitionSubjects(session: RegionSession | undefined, link: LinkConfig, source: StreamFact): Promise<PartitionFact> {
  if (!session?.jsm || source.kind !== "found" || !link.from.filterSubject) return { kind: "unreachable" };
  try {
    const info = await session.jsm.streams.info(link.from.stream, { subjects_filter: link.from.filterSubject });
    return { kind: "found", subjects: info.state.subjects ?? {} };
  } catch (err) {
    return { kind: "failed", reason: message(err) };
  }
}

/** Names of the streams in the region whose subjects overlap `subject`. */
async function streamsFor(session: RegionSession | undefined, subject: string): Promise<DeadLetterFact> {
  if (!session?.jsm) return { kind: "unreachable" };
  try {
    const names: string[] = [];
    for await (const n of session.jsm.streams.names(subject)) names.push(n);
    return { kind: "found", streams: names };
  } catch (err) {
    return { kind: "failed", reason: message(err) };
  }
}

/** A link's marker entry to read: its guard scope and its lease key. */
interface MarkerTarget {
  readonly scope: string;
  readonly fence: string;
}

const markerId = (t: MarkerTarget): string => `${t.scope}\n${t.fence}`;

interface RedisProbe {
  readonly fact: RedisFact;
  /** By markerId. */
  readonly markers: ReadonlyMap<string, MarkerFact>;
}

async function probeRedis(conn: RedisGuardConnection, timeoutMs: number, targets: readonly MarkerTarget[]): Promise<RedisProbe> {
  const markers = new Map<string, MarkerFact>();
  const fact = await probeRedisFact(conn, timeoutMs, async (client) => {
    for (const t of targets) {
      try {
        const entry = await readMarker(client, t.scope, t.fence, markerGroups(conn));
        const earlier = entry === undefined && (await heldByEarlierRelay(client, t.scope, t.fence));
        markers.set(markerId(t), entry ? { kind: "found", entry } : earlier ? { kind: "earlier-relay" } : { kind: "missing" });
      } catch (err) {
        markers.set(markerId(t), { kind: "failed", reason: sanitizeError(err, redisSecretsOf(conn)).message });
      }
    }
  });
  return { fact, markers: markers };
}

async function probeRedisFact(conn: RedisGuardConnection, timeoutMs: number, more: (client: GuardRedisClient) => Promise<void>): Promise<RedisFact> {
  const target = describeRedis(conn);
  const secrets = redisSecretsOf(conn);
  let client: GuardRedisClient;
  try {
    client = createRedisClient(
      conn,
      {
        commandTimeoutMs: timeoutMs,
        connectTimeoutMs: timeoutMs,
        startTimeoutMs: timeoutMs,
        maxBackoffMs: 1_000,
      },
      "jetstream-relay/check",
    );
  } catch (err) {
    return { ok: false, target, reason: sanitizeError(err, secrets).message };
  }
  // After connectClient stops listening, a late reconnect error must not reach ioredis's
  // "unhandled error event" printer (its text is not scrubbed).
  client.on("error", () => undefined);
  try {
    await connectClient(client, timeoutMs);
    const [version] = await checkRedisVersion(client, target);
    const report = await checkPersistence(client);
    const eviction = await readEviction(client);
    const replication = (conn.waitReplicas ?? 0) > 0 ? await readReplication(client) : undefined;
    await more(client);
    const scrub = (r: { reason?: string }) => (r.reason === undefined ? r : { ...r, reason: sanitizeError(r.reason, secrets).message });
    return {
      ok: true,
      target,
      ...(version !== undefined ? { version } : {}),
      eviction: scrub(eviction),
      ...(replication ? { replication: scrub(replication) } : {}),
      persistence: report.persistence,
      ...(report.appendfsync !== undefined ? { appendfsync: report.appendfsync } : {}),
      ...(report.reason !== undefined ? { reason: sanitizeError(report.reason, secrets).message } : {}),
    };
  } catch (err) {
    if (isRelayError(err, ErrorCodes.GUARD_UNSUPPORTED)) return { ok: false, target, unsupported: true, reason: err.message };
    return { ok: false, target, reason: sanitizeError(err, secrets).message };
  } finally {
    client.disconnect();
  }
}

/** Memoises an async lookup by key, so links sharing a stream or a Redis ask once. */
function memo<T>(): (key: string, fn: () => Promise<T>) => Promise<T> {
  const cache = new Map<string, Promise<T>>();
  return (key, fn) => {
    let p = cache.get(key);
    if (!p) {
      p = fn();
      cache.set(key, p);
    }
    return p;
  };
}

export async function runPreflight(
  config: RelayConfig,
  opts: PreflightOptions = {},
): Promise<PreflightReport> {
  const links = selectLinks(config, opts.region);
  const logger = opts.logger ?? pino({ level: "silent" });
  const connectTimeoutMs = opts.connectTimeoutMs ?? 5_000;
  const redisTimeoutMs = opts.redisTimeoutMs ?? 5_000;

  const regionNames = [...new Set(links.flatMap((l) => [l.from.region, l.to.region]))];
  const sessions = new Map<string, RegionSession>();
  await Promise.all(
    regionNames.map(async (name) => {
      const region = config.regions.get(name);
      if (region) sessions.set(name, await openCheckedRegion(region, logger, connectTimeoutMs));
    }),
  );

  try {
    const streams = memo<StreamFact>();
    const stream = (region: string, name: string): Promise<StreamFact> =>
      streams(`${region}/${name}`, () => readStream(sessions.get(region), name));
    const subjectStreams = memo<DeadLetterFact>();
    const streamsOf = (region: string, subject: string): Promise<DeadLetterFact> =>
      subjectStreams(`${region} ${subject}`, () => streamsFor(sessions.get(region), subject));
    const redis = memo<RedisProbe>();
    // Every link unit's marker entry, read in the same session as its Redis's other facts.
    const markerTargets = new Map<string, MarkerTarget[]>();
    for (const l of links) {
      for (const unit of linkUnits(l)) {
        const store = unit.guard?.store;
        if (store?.kind !== "redis") continue;
        const key = JSON.stringify(store);
        markerTargets.set(key, [...(markerTargets.get(key) ?? []), { scope: `${unit.to.region}:${unit.to.stream}`, fence: leaseKey(unit) }]);
      }
    }

    // Every stream any selected link touches, first: the overlap check compares links.
    const sourceFacts = new Map<LinkConfig, StreamFact>();
    const destFacts = new Map<LinkConfig, StreamFact>();
    await Promise.all(
      links.map(async (l) => {
        sourceFacts.set(l, await stream(l.from.region, l.from.stream));
        destFacts.set(l, await stream(l.to.region, l.to.stream));
      }),
    );
    const sourceOf = (l: LinkConfig): StreamFact => sourceFacts.get(l) ?? { kind: "unreachable" };

    const reports = await Promise.all(
      links.map(async (link): Promise<LinkReport> => {
        const source = sourceOf(link);
        const dest = destFacts.get(link) ?? { kind: "unreachable" };
        const fromSession = sessions.get(link.from.region);
        const toSession = sessions.get(link.to.region);

        const others = new Map<string, readonly string[]>();
        for (const subject of unboundSubjects(link, source, dest)) {
          const found = await streamsOf(link.to.region, subject);
          if (found.kind === "found") others.set(subject, found.streams);
        }
        const guard = link.guard?.store;
        const redisProbe =
          guard?.kind === "redis"
            ? await redis(JSON.stringify(guard), () => probeRedis(guard, redisTimeoutMs, markerTargets.get(JSON.stringify(guard)) ?? []))
            : undefined;
        const redisFact = redisProbe?.fact;
        const deadLetter =
          link.badMessage.action === "dead-letter"
            ? await streamsOf(link.to.region, link.badMessage.subject)
            : undefined;
        // A partitioned link has a durable per partition.
        const unitFacts = await Promise.all(linkUnits(link).map(async (unit) => ({ unit, consumer: await readConsumer(fromSession, unit, source) })));
        const consumers = unitFacts.map(({ unit, consumer }) => checkConsumer(unit, consumer));
        const startSessions = { source: fromSession?.jsm, dest: toSession?.nc, destDomain: config.regions.get(link.to.region)?.domain };
        const starts = await Promise.all(unitFacts.map(async ({ unit, consumer }) => checkStart(unit, consumer, await readStart(startSessions, unit, consumer))));
        const markers = unitFacts.flatMap(({ unit, consumer }) => {
          const fact: MarkerFact = redisProbe?.markers.get(markerId({ scope: `${unit.to.region}:${unit.to.stream}`, fence: leaseKey(unit) })) ?? { kind: "unreachable" };
          const row = checkGuardMarker(unit, fact, consumer);
          return row ? [row] : [];
        });
        const eviction = checkGuardEviction(link, redisFact);
        const replication = checkGuardReplication(link, redisFact);
        const partitions = checkPartitions(link, link.partitions ? await readPartitionSubjects(fromSession, link, source) : { kind: "unreachable" });
        const from = sourcePatterns(link, source);

        const rows: CheckResult[] = [
          checkRegion(
            "source",
            link.from.region,
            fromSession?.fact ?? { ok: false, reason: "not connected" },
          ),
          checkSourceStream(link, source),
          checkWindow(link, source, fromSession?.fact ?? { ok: false, reason: "not connected" }),
          checkRegion(
            "destination",
            link.to.region,
            toSession?.fact ?? { ok: false, reason: "not connected" },
          ),
          checkDestinationStream(link, dest, from ? destinationPatterns(link, from) : undefined),
          checkRetention(link, dest),
          checkDuplicateWindow(link, dest, config.group.leaseMs),
          checkSubjectsBound(link, source, dest, others),
          checkOverlaps(link, links, sourceOf),
          checkLoops(link, config.links),
          checkGuard(link, redisFact),
          ...(eviction ? [eviction] : []),
          ...(replication ? [replication] : []),
          checkDeadLetter(link, deadLetter),
          ...checkOrder(link, source, dest, config.links),
          ...(partitions ? [partitions] : []),
          ...consumers,
          ...starts,
          ...markers,
        ];
        return { link, rows };
      }),
    );
    return { links: reports };
  } finally {
    await Promise.all([...sessions.values()].map((s) => s.nc?.close().catch(() => undefined)));
  }
}
