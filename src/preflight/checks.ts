/**
 * The live checks of `jetstream-relay check --live`, one function per row of a link's table.
 *
 * Every function is pure: preflight.ts gathers the facts (connections, stream and consumer info,
 * Redis persistence) and passes them in; a check only decides. A check whose facts could not be
 * gathered because something it depends on failed is "skipped" (the failure has its own row).
 * Nothing here ever sees a secret: the facts hold names, subjects and numbers only, and error
 * reasons were scrubbed where they were caught.
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { destinationPatterns, sourcePatterns, unboundSubjects } from "../link/binding.js";
import { windowPerSecond } from "../nats/pull-window.js";
import { REFERENCE_RATE_PER_SEC, startingWindow } from "../link/window-controller.js";
import { initialWindow } from "../link/link-window.js";
import { formatDuration } from "../config/durations.js";
import { evictionFinding, replicationFinding } from "../guard/safety.js";
import type { EvictionReport, ReplicationReport } from "../guard/safety.js";
import type { GuardMarkerEntry } from "../guard/types.js";
import {
  firstIntersection,
  isSubsetOf,
  intersects,
  patternProblem,
  transformPattern,
} from "../protocol/subjects.js";

export type Level = "ok" | "warning" | "error" | "skipped";

export interface CheckResult {
  readonly name: string;
  readonly level: Level;
  /** What was found and why it matters. */
  readonly detail: string;
  /** What to do about it (warnings and errors). */
  readonly fix?: string;
}

// ---------------------------------------------------------------------------------------------
// Facts, as preflight.ts gathers them

export type RegionFact =
  | {
      readonly ok: true;
      readonly server: string;
      /** The round trip to the region's server from where the check runs (ms), when it answered in time. */
      readonly rttMs?: number;
      /** The server's `max_payload`. */
      readonly maxPayload?: number;
    }
  | { readonly ok: false; readonly reason: string };

export interface ConsumerFacts {
  readonly filterSubjects: readonly string[];
  readonly numPending: number;
  readonly numAckPending: number;
  readonly ackFloorStreamSeq: number;
  readonly ackFloorConsumerSeq: number;
}

export type ConsumerFact =
  | { readonly kind: "found"; readonly consumer: ConsumerFacts }
  | { readonly kind: "missing" }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

export type RedisFact =
  | {
      readonly ok: true;
      readonly target: string;
      readonly persistence: "aof" | "none" | "unknown";
      readonly appendfsync?: string;
      readonly reason?: string;
      /** `redis_version`, when INFO answered. */
      readonly version?: string;
      /** `maxmemory` and `maxmemory-policy` (or why they could not be read). */
      readonly eviction?: EvictionReport;
      /** INFO replication, read when the connection sets `waitReplicas`. */
      readonly replication?: ReplicationReport;
    }
  | { readonly ok: false; readonly target: string; readonly reason: string; readonly unsupported?: true };

/** A link's entry in its guard scope's marker (loss detection), read when the guard Redis answered. */
export type MarkerFact =
  | { readonly kind: "found"; readonly entry: GuardMarkerEntry }
  | { readonly kind: "missing" }
  /** No entry, but the state a relay from before scope markers left (an upgrade): the relay writes the entry at start. */
  | { readonly kind: "earlier-relay" }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

/** Streams in the destination region whose subjects overlap the dead-letter subject. */
export type DeadLetterFact =
  | { readonly kind: "found"; readonly streams: readonly string[] }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

// ---------------------------------------------------------------------------------------------
// Helpers

const MIN_HORIZON_MS = 120_000;

/**
 * How long after its first publish a message can be published again by the link: a redelivery
 * after the ack wait (twice, to allow one lost ack), a replay up to `maxReplayAge`, and never less
 * than the NATS default duplicate window (2 min).
 */
export function replayHorizonMs(link: LinkConfig): number {
  return Math.max(link.ackWaitMs * 2, link.maxReplayAgeMs ?? 0, MIN_HORIZON_MS);
}

function where(region: string, stream: string): string {
  return `${region}/${stream}`;
}

function list(values: readonly string[]): string {
  return values.length === 0 ? "(none)" : values.join(", ");
}

/**
 * The command that creates or updates the region's destination and dead-letter streams
 * (docs/streams.md). The checks do not know the config file's path.
 */
function streamsApply(region: string): string {
  return `jetstream-relay streams apply --config <your config> --region ${region}`;
}

function skipped(name: string, because: string): CheckResult {
  return { name, level: "skipped", detail: `not checked: ${because}` };
}

// ---------------------------------------------------------------------------------------------
// Regions

export function checkRegion(role: "source" | "destination", region: string, fact: RegionFact): CheckResult {
  const name = `${role} region`;
  if (fact.ok) return { name, level: "ok", detail: `${region}: connected to ${fact.server}` };
  return {
    name,
    level: "error",
    // The reason names the region and its servers (credentials stripped).
    detail: `not reachable: ${fact.reason}`,
    fix: `check regions.${region}.servers, the network path to them, auth and TLS; the ${role === "source" ? "link cannot read" : "link cannot publish"} until it connects`,
  };
}

/** A round trip at least this long is a WAN, where the pull window bounds what a link can move. */
const WAN_RTT_MS = 10;

const MIB = 1024 * 1024;
/** The most `inFlightBytes` takes (the config's bound). */
const MAX_IN_FLIGHT_BYTES = 16 * 1024 * MIB;

const mib = (bytes: number): string => (bytes >= MIB ? `${+(bytes / MIB).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`);

/** A size as the config takes it (whole MiB, else whole KiB rounded up). */
const configSize = (bytes: number): string => (bytes % MIB === 0 ? `${bytes / MIB}MiB` : `${Math.ceil(bytes / 1024)}KiB`);

/**
 * The window the link starts with and the cap it may grow to (it sizes itself to the round trip:
 * link-window.ts), against what the round trip to the source region needs at 10,000 msgs/s (measured
 * from where the check runs, so run it where the relay runs). A cap below that across a WAN warns: the
 * link moves at most one cap per round trip. The bytes cap is inFlightBytes over the stream's average
 * message size (the relay measures it as it goes; an empty stream gives no size to judge by).
 */
export function checkWindow(link: LinkConfig, source: StreamFact, region: RegionFact): CheckResult {
  const name = "pull window";
  if (!region.ok) return skipped(name, `region ${link.from.region} is not reachable`);
  if (source.kind !== "found") return skipped(name, `stream ${where(link.from.region, link.from.stream)} was not read`);
  const s = source.stream;
  const avg = s.bytes !== undefined && s.messages > 0 ? s.bytes / s.messages : undefined;
  const rtt = region.rttMs === undefined ? undefined : Math.max(1, Math.round(region.rttMs));
  const start = startingWindow({
    capMessages: link.inFlight,
    capBytes: link.inFlightBytes,
    batchSize: link.batchSize,
    initial: initialWindow(link),
    ...(rtt !== undefined ? { rttMs: rtt } : {}),
    ...(avg !== undefined ? { avgMessageBytes: avg } : {}),
  });
  const byBytes = start.cap < link.inFlight;
  const capWhy = byBytes ? `inFlightBytes ${mib(link.inFlightBytes)} over messages of ~${mib(avg ?? 0)} on average` : `inFlight ${link.inFlight}`;
  const base = `starts at ${start.window} messages and sizes itself to the round trip, up to ${start.cap} (${capWhy})`;
  if (rtt === undefined) return { name, level: "ok", detail: `${base}; round trip to ${link.from.region} not measured` };
  const detail = `${base}; round trip from here ${rtt} ms: ${REFERENCE_RATE_PER_SEC} msgs/s needs ~${start.neededForRtt ?? 0}, the cap allows ~${windowPerSecond(start.cap, rtt)} msgs/s`;
  if (start.limit === "rtt" || rtt < WAN_RTT_MS) return { name, level: "ok", detail };
  const needed = start.neededForRtt ?? link.inFlight;
  const raise = byBytes
    ? `links[${link.name}].inFlightBytes: ${configSize(Math.min(MAX_IN_FLIGHT_BYTES, Math.ceil(needed * (avg ?? 1))))} (the window it needs × the average message)`
    : `links[${link.name}].inFlight: ${Math.min(65_536, needed)}`;
  return {
    name,
    level: "warning",
    detail,
    fix: `across this round trip the cap holds the window below what ${REFERENCE_RATE_PER_SEC} msgs/s needs: ${raise} (README, "A link across a WAN")`,
  };
}

// ---------------------------------------------------------------------------------------------
// 1. Streams exist

export function checkSourceStream(link: LinkConfig, source: StreamFact): CheckResult {
  const name = "source stream";
  const at = where(link.from.region, link.from.stream);
  switch (source.kind) {
    case "unreachable":
      return skipped(name, `region ${link.from.region} is not reachable`);
    case "failed":
      return {
        name,
        level: "error",
        detail: `${at}: cannot read the stream: ${source.reason}`,
        fix: "make sure JetStream is enabled for the account and the relay's user may use the JetStream API",
      };
    case "missing":
      return {
        name,
        level: "error",
        detail: `${at} does not exist: the link has nothing to read and its durable cannot be created`,
        fix: `create it in region ${link.from.region} with the subjects its publishers use, file storage and limits retention (e.g. nats stream add ${link.from.stream} --subjects "<subjects>" --storage file --retention limits), or correct links[${link.name}].from.stream; jetstream-relay streams apply never creates or changes a source stream`,
      };
    case "found": {
      const s = source.stream;
      const filter = link.from.filterSubject;
      const base = `${at} exists: subjects ${list(s.subjects)}${s.sourced ? " (mirror/sourced)" : ""}, ${s.messages} message(s)`;
      if (filter && s.subjects.length > 0 && !s.subjects.some((subj) => intersects(filter, subj))) {
        return {
          name,
          level: "error",
          detail: `${base}; the link's filter ${filter} matches none of them: the server refuses the durable, and it would relay nothing`,
          fix: `set links[${link.name}].from.filter to a subset of ${list(s.subjects)}, or remove it`,
        };
      }
      return { name, level: "ok", detail: filter ? `${base}; filter ${filter}` : base };
    }
  }
}

export function checkDestinationStream(
  link: LinkConfig,
  dest: StreamFact,
  wanted: readonly string[] | undefined,
): CheckResult {
  const name = "destination stream";
  const at = where(link.to.region, link.to.stream);
  switch (dest.kind) {
    case "unreachable":
      return skipped(name, `region ${link.to.region} is not reachable`);
    case "failed":
      return {
        name,
        level: "error",
        detail: `${at}: cannot read the stream: ${dest.reason}`,
        fix: "make sure JetStream is enabled for the account and the relay's user may use the JetStream API",
      };
    case "missing": {
      const subjects = wanted && wanted.length > 0 ? `subjects ${wanted.join(", ")}` : "the subjects the links publish to";
      return {
        name,
        level: "error",
        detail: `${at} does not exist: every publish would get no responders and the link would retry forever`,
        fix: `create it: ${streamsApply(link.to.region)} (creates ${link.to.stream} with ${subjects}, file storage, limits retention, duplicate window ${formatDuration(replayHorizonMs(link))})`,
      };
    }
    case "found": {
      const s = dest.stream;
      return {
        name,
        level: "ok",
        detail: `${at} exists: subjects ${list(s.subjects)}, ${s.messages} message(s)`,
      };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Destination retention

export function checkRetention(link: LinkConfig, dest: StreamFact): CheckResult {
  const name = "destination retention";
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const r = dest.stream.retention;
  if (r === "limits")
    return {
      name,
      level: "ok",
      detail: "limits: a stored message stays until the stream's limits remove it",
    };
  return {
    name,
    level: "error",
    detail: `${r}: interest/work-queue destinations can ack a message they dropped (no consumer interest, or consumed and removed), so the relay would ack the source for a message that is gone and never relay it again; dedup by id also stops working once it is removed`,
    fix: `use a stream with retention limits: on nats-server 2.10+ ${streamsApply(link.to.region)} --force changes interest → limits in place; otherwise (nats-server 2.9, or a work-queue stream) point links[${link.name}].to.stream at a new stream (${streamsApply(link.to.region)} creates it) or recreate ${link.to.stream} with limits retention`,
  };
}

// ---------------------------------------------------------------------------------------------
// 3. Duplicate window

export function checkDuplicateWindow(link: LinkConfig, dest: StreamFact, leaseMs?: number): CheckResult {
  const name = "duplicate window";
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const horizon = replayHorizonMs(link);
  const s = dest.stream;
  const why = `replay horizon ${formatDuration(horizon)} = max(2 × ackWait ${formatDuration(link.ackWaitMs)}, maxReplayAge ${link.maxReplayAgeMs === undefined ? "-" : formatDuration(link.maxReplayAgeMs)}, 2m)`;
  const guardNote = link.guard
    ? `the link's ${link.guard.store.kind} guard covers redeliveries the broker does not, but the window is the second line of defence`
    : "the link has no guard, so nothing else catches them";
  const problems: string[] = [];
  const fixes: string[] = [];
  if (s.duplicateWindowMs <= 0) {
    problems.push(
      `duplicate window is not set: the broker does not deduplicate relayed messages; ${guardNote}`,
    );
    fixes.push(`${streamsApply(link.to.region)} (raises ${s.name}'s duplicate window to ${formatDuration(horizon)})`);
  } else if (s.duplicateWindowMs < horizon) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} < ${why}: a redelivery or replay after the window is stored twice (broker dedup will not cover redeliveries); ${guardNote}`,
    );
    fixes.push(
      `${streamsApply(link.to.region)} (raises ${s.name}'s duplicate window to ${formatDuration(horizon)}), or shorten links[${link.name}].ackWait / maxReplayAge`,
    );
  }
  // A relay frozen past its lease, or one whose last bytes sit in a slow network, may land what it had
  // in flight after the next owner published the same messages: the window must outlast a few leases.
  if (leaseMs !== undefined && s.duplicateWindowMs > 0 && s.duplicateWindowMs < 3 * leaseMs) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} < 3 × group.lease ${formatDuration(leaseMs)}: what an owner paused past its lease had already sent can land after the next owner published the same messages, and is stored twice; ${guardNote}`,
    );
    fixes.push(`raise ${s.name}'s duplicate window to at least ${formatDuration(3 * leaseMs)}, or shorten group.lease`);
  }
  if (s.maxAgeMs > 0 && s.duplicateWindowMs > s.maxAgeMs) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} > max age ${formatDuration(s.maxAgeMs)}: ids are only remembered while their message is kept`,
    );
    fixes.push(
      `raise ${s.name}'s max age to at least its duplicate window, or lower the window to ${formatDuration(Math.min(horizon, s.maxAgeMs))}, with your stream tooling in region ${link.to.region} (jetstream-relay streams apply never lowers a window)`,
    );
  }
  if (problems.length > 0)
    return { name, level: "warning", detail: problems.join("; "), fix: fixes.join("; ") };
  const age = s.maxAgeMs > 0 ? `, <= max age ${formatDuration(s.maxAgeMs)}` : "";
  return { name, level: "ok", detail: `${formatDuration(s.duplicateWindowMs)} >= ${why}${age}` };
}

// ---------------------------------------------------------------------------------------------
// 4. Transformed subjects bound to the destination stream

/** Other streams in the destination region that overlap a transformed subject (by that subject). */
export type OtherStreams = ReadonlyMap<string, readonly string[]>;

export function checkSubjectsBound(
  link: LinkConfig,
  source: StreamFact,
  dest: StreamFact,
  others: OtherStreams = new Map(),
): CheckResult {
  const name = "subjects bound";
  const from = sourcePatterns(link, source);
  if (!from) {
    if (source.kind === "found") {
      return {
        name,
        level: "warning",
        detail: `${where(link.from.region, link.from.stream)} has no subjects of its own (a mirror or sourced stream), so what the link publishes cannot be worked out`,
        fix: `set links[${link.name}].from.filter so the subjects can be checked`,
      };
    }
    return skipped(name, "the source stream was not read and the link has no filter");
  }
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const d = dest.stream;
  const transform = link.to.transform;
  const mapping = from.map((s) => `${s} → ${transformPattern(s, transform).join(" | ")}`).join(", ");
  const invalid = destinationPatterns(link, from).filter((p) => patternProblem(p) !== undefined);
  if (invalid.length > 0) {
    return {
      name,
      level: "error",
      detail: `${mapping}: ${invalid.map((p) => `"${p}" ${patternProblem(p) ?? ""}`).join("; ")}: the transform produces subjects that cannot be published`,
      fix: `fix links[${link.name}].to.subject (stripPrefix / addPrefix)`,
    };
  }
  const unbound = unboundSubjects(link, source, dest);
  if (unbound.length === 0) {
    const identity = !transform.stripPrefix && !transform.addPrefix;
    return {
      name,
      level: "ok",
      detail: `${identity ? from.join(", ") : mapping}: covered by ${d.name} subjects ${list(d.subjects)}`,
    };
  }
  const elsewhere = unbound
    .map((p) => ({ p, streams: (others.get(p) ?? []).filter((n) => n !== d.name) }))
    .filter((x) => x.streams.length > 0)
    .map((x) => `${x.p} overlaps stream ${x.streams.join(", ")}, which would store those instead`);
  const newSubjects = unbound.filter((p) => !unbound.some((q) => q !== p && isSubsetOf(p, q)));
  return {
    name,
    level: "error",
    detail: `${mapping}: ${unbound.join(", ")} not bound to ${where(link.to.region, d.name)} (subjects ${list(d.subjects)}): publishes would get no responders${elsewhere.length > 0 ? ` (${elsewhere.join("; ")})` : ""}`,
    fix: `bind them: ${streamsApply(link.to.region)} (adds ${newSubjects.join(", ")} to ${d.name}), or change links[${link.name}].to.subject / from.filter`,
  };
}

// ---------------------------------------------------------------------------------------------
// 5. Overlapping links into one destination stream

/**
 * Two links into the same destination region+stream:
 * - from the same source region+stream, with source subjects that intersect: error. Both read the
 *   same messages and both publish them (with the same id), so everything is relayed twice and a
 *   copy that arrives after the duplicate window is stored twice.
 * - from the same source, disjoint source subjects, but transformed subjects that intersect:
 *   warning. No message is relayed twice, but different source subjects are merged into the same
 *   destination subjects. (Each link still finds its own progress there: every relayed message names
 *   its link in Relay-Link, and a cursor is placed from the markers naming it.)
 * - from different sources (A→C and B→C, an active-active mesh): ok. Ids and Relay-Origin differ.
 */
export function checkOverlaps(
  link: LinkConfig,
  links: readonly LinkConfig[],
  sourceOf: (l: LinkConfig) => StreamFact,
): CheckResult {
  const name = "overlapping links";
  const into = where(link.to.region, link.to.stream);
  const same = links.filter(
    (l) => l !== link && l.to.region === link.to.region && l.to.stream === link.to.stream,
  );
  if (same.length === 0) return { name, level: "ok", detail: `no other link writes into ${into}` };
  const mine = sourcePatterns(link, sourceOf(link)) ?? [">"];
  const errors: string[] = [];
  const warnings: string[] = [];
  const fine: string[] = [];
  for (const other of same) {
    if (other.from.region !== link.from.region || other.from.stream !== link.from.stream) {
      fine.push(other.name);
      continue;
    }
    const theirs = sourcePatterns(other, sourceOf(other)) ?? [">"];
    const both = firstIntersection(mine, theirs);
    if (both) {
      errors.push(
        `${other.name} also reads ${where(link.from.region, link.from.stream)} (${both.a} and ${both.b} overlap) into ${into}: those messages would be relayed twice`,
      );
      continue;
    }
    const out = firstIntersection(destinationPatterns(link, mine), destinationPatterns(other, theirs));
    if (out)
      warnings.push(
        `${other.name} reads other subjects of the same source but also writes ${out.b} (overlapping ${out.a}): distinct source subjects are merged in ${into}`,
      );
    else fine.push(other.name);
  }
  const mesh =
    fine.length > 0
      ? `; ${fine.join(", ")} also write into ${into} from other sources or subjects, which is fine (ids and Relay-Origin differ)`
      : "";
  if (errors.length > 0) {
    return {
      name,
      level: "error",
      detail: errors.join("; "),
      fix: "give the links disjoint from.filter subjects, or remove one of them",
    };
  }
  if (warnings.length > 0) {
    return {
      name,
      level: "warning",
      detail: `${warnings.join("; ")}${mesh}`,
      fix: "give the links distinct to.subject prefixes if consumers must tell them apart",
    };
  }
  return { name, level: "ok", detail: `no overlap${mesh}` };
}

// ---------------------------------------------------------------------------------------------
// 6. Loops

/** The shortest chain of links from `from` to `to` (region names), or undefined. */
function regionPath(links: readonly LinkConfig[], from: string, to: string): string[] | undefined {
  const prev = new Map<string, string>();
  const queue = [from];
  const seen = new Set([from]);
  while (queue.length > 0) {
    const r = queue.shift() as string;
    if (r === to) {
      const path = [r];
      for (let p = prev.get(r); p !== undefined; p = prev.get(p)) path.unshift(p);
      return path;
    }
    for (const l of links) {
      if (l.from.region === r && !seen.has(l.to.region)) {
        seen.add(l.to.region);
        prev.set(l.to.region, r);
        queue.push(l.to.region);
      }
    }
  }
  return undefined;
}

export function checkLoops(link: LinkConfig, links: readonly LinkConfig[]): CheckResult {
  const name = "loops";
  const back = regionPath(links, link.to.region, link.from.region);
  if (!back) return { name, level: "ok", detail: "no cycle through this link" };
  const cycle = [link.from.region, ...back].join(" → ");
  return {
    name,
    level: "ok",
    detail: `cycle ${cycle}: loop prevention stops messages returning to their origin (Relay-Origin / Relay-Path headers, maxHops ${link.maxHops})`,
  };
}

// ---------------------------------------------------------------------------------------------
// 7. Guard

export function checkGuard(link: LinkConfig, redis: RedisFact | undefined): CheckResult {
  const name = "guard";
  const guard = link.guard;
  if (!guard)
    return {
      name,
      level: "ok",
      detail: "no guard: broker dedup only (Nats-Msg-Id within the destination's duplicate window)",
    };
  if (guard.store.kind === "memory") {
    return {
      name,
      level: "warning",
      detail: "memory guard: tests and demos only; it forgets every id and version when the relay restarts",
      fix: `use guard.redis for links[${link.name}], or remove the guard`,
    };
  }
  if (!redis) return skipped(name, "redis was not probed");
  if (!redis.ok && redis.unsupported) {
    return { name, level: "error", detail: redis.reason, fix: "upgrade the guard's Redis to 6.2 or later" };
  }
  if (!redis.ok) {
    return {
      name,
      level: "error",
      detail: `${redis.target}: not reachable: ${redis.reason}; the link pauses while its guard is unavailable`,
      fix: "check the guard's redis address, password, TLS and network path",
    };
  }
  const fsync = redis.appendfsync ? ` (appendfsync ${redis.appendfsync})` : "";
  const target = redis.version ? `${redis.target} (Redis ${redis.version})` : redis.target;
  switch (redis.persistence) {
    case "aof":
      if (redis.appendfsync === "no") {
        return {
          name,
          level: "warning",
          detail: `${target}: AOF on but appendfsync no: a crash may lose recent commits`,
          fix: "set appendfsync everysec (or always)",
        };
      }
      return {
        name,
        level: "ok",
        detail: `${target}: AOF on${fsync}: versions survive a Redis restart`,
      };
    case "none":
      return {
        name,
        level: guard.strict ? "error" : "warning",
        detail: `${target}: appendonly no: versions would not survive a Redis restart${guard.strict ? "; guard.strict is set, so the relay refuses to start this link (GUARD_NOT_DURABLE)" : ""}`,
        fix: "enable appendonly: CONFIG SET appendonly yes, and appendonly yes in redis.conf",
      };
    case "unknown":
      return {
        name,
        level: "warning",
        detail: `${target}: cannot tell whether Redis persists (${redis.reason ?? "no answer"}); managed Redis often blocks CONFIG`,
        fix: "make sure the Redis service keeps an append-only file (AOF)",
      };
  }
}

/**
 * The guard Redis's `maxmemory-policy`: only `noeviction` keeps every guard key at the memory limit
 * (see src/guard/safety.ts for which keys each policy can take). No row without a Redis guard.
 */
export function checkGuardEviction(link: LinkConfig, redis: RedisFact | undefined): CheckResult | undefined {
  const name = "guard eviction";
  const guard = link.guard;
  if (guard?.store.kind !== "redis") return undefined;
  if (!redis || !redis.ok) return skipped(name, "the guard's Redis was not reached (see the guard row)");
  if (!redis.eviction) return skipped(name, "redis was not probed");
  const f = evictionFinding(redis.eviction);
  switch (f.level) {
    case "ok":
      return { name, level: "ok", detail: `${redis.target}: ${f.detail}` };
    case "unsafe":
      return {
        name,
        level: guard.strict ? "error" : "warning",
        detail: `${redis.target}: ${f.detail}${guard.strict ? "; guard.strict is set, so the relay refuses to start this link (GUARD_NOT_DURABLE)" : "; the relay warns and exports relay_guard_unsafe{reason=\"eviction\"}"}`,
        fix: "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (or size maxmemory for the guard: at the limit it then refuses writes and the link pauses)",
      };
    default:
      return {
        name,
        level: "warning",
        detail: `${redis.target}: ${f.detail}; managed Redis often blocks CONFIG`,
        fix: "make sure the Redis service's maxmemory-policy is noeviction",
      };
  }
}

/** With `guard.redis.waitReplicas`: the master the guard writes to has that many online replicas. */
export function checkGuardReplication(link: LinkConfig, redis: RedisFact | undefined): CheckResult | undefined {
  const name = "guard replication";
  const store = link.guard?.store;
  const wait = store?.kind === "redis" ? (store.waitReplicas ?? 0) : 0;
  if (wait <= 0) return undefined;
  if (!redis || !redis.ok) return skipped(name, "the guard's Redis was not reached (see the guard row)");
  if (!redis.replication) return skipped(name, "redis was not probed");
  const f = replicationFinding(redis.replication, wait);
  const strict = link.guard?.strict === true;
  switch (f.level) {
    case "ok":
      return { name, level: "ok", detail: `${redis.target}: ${f.detail}` };
    case "unsafe":
      return {
        name,
        level: strict ? "error" : "warning",
        detail: `${redis.target}: ${f.detail}${strict ? "; guard.strict is set, so the link waits (paused) until they are there" : ""}`,
        fix: `bring the replicas back (INFO replication on the master: connected_slaves, state=online), or lower links[${link.name}].guard.redis.waitReplicas`,
      };
    default:
      return { name, level: "warning", detail: `${redis.target}: ${f.detail}`, fix: "make sure the relay's Redis user may run INFO" };
  }
}

/**
 * Loss detection: the link's entry in its guard scope's marker. Missing with history (the durable
 * consumer has acked messages) is what the relay reports as GUARD_STATE_LOST and pauses on.
 */
export function checkGuardMarker(link: LinkConfig, marker: MarkerFact, consumer: ConsumerFact): CheckResult | undefined {
  if (link.guard?.store.kind !== "redis") return undefined;
  const name = "guard marker";
  // A partitioned link has a row per partition (each its own consumer and entry).
  const unit = link.partition ? `${link.name}: ` : "";
  const resume = `jetstream-relay guard resume --config FILE --link ${link.partition?.link ?? link.name}`;
  switch (marker.kind) {
    case "unreachable":
      return skipped(name, "the guard's Redis was not reached (see the guard row)");
    case "failed":
      return { name, level: "warning", detail: `${unit}cannot read the scope marker: ${marker.reason}`, fix: "make sure the relay's Redis user may run HGET on relay:{...}:marker" };
    case "found": {
      const e = marker.entry;
      if (e.mark === "resync") {
        return { name, level: "warning", detail: `${unit}a resync after a guard state loss was requested at ${e.at} and is not done yet: the relay that owns the link runs it` };
      }
      return { name, level: "ok", detail: `${unit}scope marker entry present (${e.mark} ${e.at}): the guard has not lost its memory since` };
    }
    case "earlier-relay":
      return { name, level: "ok", detail: `${unit}no scope marker entry yet, but the guard holds this link's state from a relay before scope markers (an upgrade): the relay writes the entry at start` };
    case "missing":
      break;
  }
  if (consumer.kind === "missing" || (consumer.kind === "found" && consumer.consumer.ackFloorStreamSeq === 0)) {
    return { name, level: "ok", detail: `${unit}no scope marker entry yet; the link has no history (its consumer has acked nothing), so the relay writes it at start` };
  }
  if (consumer.kind !== "found") return skipped(name, "the link's consumer was not read (see the durable consumer row)");
  return {
    name,
    level: "error",
    detail:
      `${unit}no scope marker entry, but the consumer has acked up to source seq ${consumer.consumer.ackFloorStreamSeq}: the guard's Redis lost what it remembered ` +
      "(flushed, restarted empty, failed over without the data); the relay pauses this link (GUARD_STATE_LOST)",
    fix: `${resume} (accept: until idTtl passes only the destination's duplicate window catches redeliveries), or add --resync for a full resync`,
  };
}

// ---------------------------------------------------------------------------------------------
// 8. Dead-letter subject

export function checkDeadLetter(link: LinkConfig, fact: DeadLetterFact | undefined): CheckResult {
  const name = "dead-letter subject";
  const policy = link.badMessage;
  if (policy.action === "halt")
    return { name, level: "ok", detail: "onBadMessage: halt (the link stops at a bad message)" };
  if (!fact || fact.kind === "unreachable") return skipped(name, `region ${link.to.region} is not reachable`);
  if (fact.kind === "failed") {
    return {
      name,
      level: "warning",
      detail: `${policy.subject}: cannot list the streams of ${link.to.region}: ${fact.reason}`,
      fix: "make sure the relay's user may use the JetStream API",
    };
  }
  if (fact.streams.length === 0) {
    return {
      name,
      level: "warning",
      detail: `${policy.subject} is captured by no stream in ${link.to.region}: dead-lettered messages would fail to park and the link would retry`,
      fix: `capture it: ${streamsApply(link.to.region)} (creates or extends RELAY_DLQ with ${policy.subject}), or set links[${link.name}].onBadMessage`,
    };
  }
  const own = fact.streams.includes(link.to.stream)
    ? ` (the link's own destination stream: dead letters mix with relayed data)`
    : "";
  return {
    name,
    level: "ok",
    detail: `${policy.subject} is captured by ${fact.streams.join(", ")} in ${link.to.region}${own}`,
  };
}

// ---------------------------------------------------------------------------------------------
// Durable consumer

/** Subjects of the source stream matching a partitioned link's filter, with their message counts. */
export type PartitionFact =
  | { readonly kind: "found"; readonly subjects: Readonly<Record<string, number>> }
  | { readonly kind: "failed"; readonly reason: string }
  | { readonly kind: "unreachable" };

/**
 * A partitioned link: every subject of the source matching its filter must carry a partition number
 * 0…count−1 at the partition token, or its messages are relayed by no partition. A partition without
 * messages is worth a look (is `count` what the publishers' mapping uses?), not an error.
 */
export function checkPartitions(link: LinkConfig, fact: PartitionFact): CheckResult | undefined {
  const partitions = link.partitions;
  if (!partitions) return undefined;
  const name = "partitions";
  const filter = link.from.filterSubject ?? "";
  if (fact.kind === "unreachable") return skipped(name, "the source stream was not read");
  if (fact.kind === "failed") return { name, level: "warning", detail: `cannot list the subjects of ${where(link.from.region, link.from.stream)}: ${fact.reason}` };
  const counts = new Array<number>(partitions.count).fill(0);
  const stray: string[] = [];
  let strayMessages = 0;
  for (const [subject, n] of Object.entries(fact.subjects)) {
    const token = subject.split(".")[partitions.token - 1] ?? "";
    const p = /^(0|[1-9]\d*)$/.test(token) ? Number(token) : NaN;
    if (Number.isInteger(p) && p < partitions.count) counts[p] = (counts[p] ?? 0) + n;
    else {
      stray.push(subject);
      strayMessages += n;
    }
  }
  const spread = counts.map((n, p) => `p${p}: ${n}`).join(", ");
  if (stray.length > 0) {
    return {
      name,
      level: "error",
      detail: `${strayMessages} messages on ${stray.length} subjects matching ${filter} have no partition number below ${partitions.count} at token ${partitions.token} (e.g. ${list(stray.slice(0, 5))}): no partition relays them`,
      fix: `make the publishers' mapping produce partition(${partitions.count}, …) at token ${partitions.token}, or set links[${link.name}].partitions.count to the mapping's count`,
    };
  }
  const empty = counts.flatMap((n, p) => (n === 0 ? [`p${p}`] : []));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total > 0 && empty.length > 0) {
    return { name, level: "warning", detail: `partitions ${empty.join(", ")} hold no messages (${spread}): is count ${partitions.count} what the mapping uses?` };
  }
  return {
    name,
    level: "ok",
    detail: `${partitions.count} partitions at token ${partitions.token} of ${filter} cover every subject of the filter (${spread})`,
  };
}

export function checkConsumer(link: LinkConfig, fact: ConsumerFact): CheckResult {
  const name = "durable consumer";
  const at = `${link.durableName} on ${where(link.from.region, link.from.stream)}`;
  switch (fact.kind) {
    case "unreachable":
      return skipped(name, "the source stream was not read");
    case "failed":
      return {
        name,
        level: "warning",
        detail: `${at}: cannot read it: ${fact.reason}`,
        fix: "make sure the relay's user may read consumer info",
      };
    case "missing":
      return {
        name,
        level: "ok",
        detail: `${at} does not exist yet: the relay creates it and starts from the first message in the stream`,
      };
    case "found": {
      const c = fact.consumer;
      const have = [...c.filterSubjects].sort().join(",");
      const want = link.from.filterSubject ?? "";
      if (have !== want) {
        return {
          name,
          level: "error",
          detail: `${at} exists with filter "${have}" but the link says "${want}": the relay refuses to start this link`,
          fix: `delete it (nats consumer rm ${link.from.stream} ${link.durableName}, in region ${link.from.region}; it then starts over) or set links[${link.name}].durable to another name`,
        };
      }
      return {
        name,
        level: "ok",
        detail: `${at} exists: ${c.numPending} pending, ${c.numAckPending} awaiting ack, ack floor stream seq ${c.ackFloorStreamSeq} (consumer seq ${c.ackFloorConsumerSeq})`,
      };
    }
  }
}
