/**
 * The guard rows: the guard's store and whether its Redis persists, the Redis's eviction policy and
 * replicas, and the link's entry in its guard scope's marker (loss detection).
 */
import type { LinkConfig } from "../config/types.js";
import { evictionFinding, replicationFinding } from "../guard/safety.js";
import { skipped } from "./check-helpers.js";
import type { CheckResult, ConsumerFact, MarkerFact, RedisFact } from "./facts.js";

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
