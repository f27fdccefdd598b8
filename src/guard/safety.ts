import type { PersistenceReport } from "./redis-connection.js";
import type { GuardFinding, GuardSafety } from "./types.js";

/**
 * The guard's settings checks beyond the Redis version: persistence (AOF), eviction policy and
 * replication. Run at guard start, after every reconnect and every minute by the link, and by
 * `check --live`. The verdicts here are pure (the rules are tested without a server); safety-probe.ts
 * reads what they judge from Redis.
 *
 * Which keys an eviction policy can take (the guard's key layout, lua.ts):
 *   - ids and claims carry a TTL (idTtl, claimTtl): `volatile-*` and `allkeys-*` evict them. An evicted
 *     done-id lets a redelivery be published again (a duplicate past the broker's window); an evicted
 *     claim lets a second relay publish a message the first is publishing.
 *   - versions, lease revision fences and the scope marker have no TTL: only `allkeys-*` evicts them.
 *     An evicted version lets an older version be relayed again; an evicted marker shows as a lost
 *     guard state.
 * So no policy but `noeviction` keeps every guard key once `maxmemory` is reached; with `noeviction`
 * Redis refuses writes instead (OOM), claims fail with GUARD_UNAVAILABLE and the link pauses: nothing is
 * lost, and it resumes once memory is freed. With `maxmemory 0` (no limit) no policy ever evicts.
 */

/** Redis's eviction policies and what they can take from the guard. */
const VOLATILE = new Set(["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"]);
const ALLKEYS = new Set(["allkeys-lru", "allkeys-lfu", "allkeys-random"]);

export function persistenceFinding(report: PersistenceReport): GuardFinding {
  const check = "persistence";
  switch (report.persistence) {
    case "none":
      return {
        check,
        level: "unsafe",
        reason: "no_aof",
        detail: "appendonly no: versions and ids are lost when Redis restarts",
      };
    case "unknown":
      return {
        check,
        level: "unknown",
        detail: `cannot tell whether Redis keeps an AOF (${report.reason ?? "no answer"})`,
      };
    case "aof":
      if (report.appendfsync === "no") {
        return {
          check,
          level: "warning",
          detail: "AOF on but appendfsync no: a crash of the host may lose recent commits",
        };
      }
      return {
        check,
        level: "ok",
        detail: `AOF on${report.appendfsync ? ` (appendfsync ${report.appendfsync})` : ""}`,
      };
  }
}

export interface EvictionReport {
  /** `maxmemory-policy` (undefined when CONFIG GET was refused or did not answer). */
  readonly policy?: string;
  /** `maxmemory` in bytes (0: no limit). */
  readonly maxmemory?: number;
  /** Why it is not known (the server's error text). */
  readonly reason?: string;
}

/** The verdict on an eviction policy (see the file comment for which keys each policy can take). */
export function evictionFinding(report: EvictionReport): GuardFinding {
  const check = "eviction";
  const { policy, maxmemory } = report;
  if (policy === undefined || maxmemory === undefined) {
    return {
      check,
      level: "unknown",
      detail: `cannot read maxmemory-policy (${report.reason ?? "no answer"}); make sure it is noeviction`,
    };
  }
  if (policy === "noeviction") {
    return {
      check,
      level: "ok",
      detail: `maxmemory-policy noeviction: Redis refuses writes at its memory limit (the link pauses) rather than evict guard keys`,
    };
  }
  const what = VOLATILE.has(policy)
    ? "keys with a TTL: committed ids and claims (a redelivered message could be published again; two relays could publish the same one)"
    : ALLKEYS.has(policy)
      ? "any key: committed ids, claims, and versions (an older version could be relayed again) and the scope marker"
      : `keys (unknown policy ${policy})`;
  if (maxmemory === 0) {
    return {
      check,
      level: "ok",
      detail: `maxmemory-policy ${policy}, but maxmemory 0 (no limit): nothing is ever evicted. Setting a limit would make Redis evict ${what}: set noeviction`,
    };
  }
  return {
    check,
    level: "unsafe",
    reason: "eviction",
    detail: `maxmemory-policy ${policy} with maxmemory ${maxmemory}: at the limit Redis evicts ${what}`,
  };
}

export interface ReplicationReport {
  /** `role` of the node the guard writes to (`master` expected). */
  readonly role?: string;
  /** Replicas in state online. */
  readonly replicas?: number;
  readonly reason?: string;
}

/** The verdict on replication for `waitReplicas` (0: not checked, always ok). */
export function replicationFinding(report: ReplicationReport, waitReplicas: number): GuardFinding {
  const check = "replication";
  if (waitReplicas <= 0)
    return { check, level: "ok", detail: "waitReplicas 0: commits do not wait for replicas" };
  if (report.role === undefined || report.replicas === undefined) {
    return {
      check,
      level: "unknown",
      detail: `cannot read INFO replication (${report.reason ?? "no answer"})`,
    };
  }
  if (report.role !== "master") {
    return {
      check,
      level: "unsafe",
      reason: "replication",
      detail: `the guard writes to a node whose role is ${report.role}, not master`,
    };
  }
  if (report.replicas < waitReplicas) {
    return {
      check,
      level: "unsafe",
      reason: "replication",
      detail: `${report.replicas} online replica(s), fewer than waitReplicas ${waitReplicas}: commits wait for waitTimeout and fail, and the link pauses`,
    };
  }
  return {
    check,
    level: "ok",
    detail: `${report.replicas} online replica(s) for waitReplicas ${waitReplicas}`,
  };
}

/** The unsafe reasons of a set of findings. */
export function summarize(findings: readonly GuardFinding[]): GuardSafety {
  const unsafe = [...new Set(findings.flatMap((f) => (f.level === "unsafe" && f.reason ? [f.reason] : [])))];
  return { findings, unsafe };
}
