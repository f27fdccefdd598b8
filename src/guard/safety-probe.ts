import { Cluster } from "ioredis";
import type { Redis } from "ioredis";
import type { GuardRedisClient } from "./redis-connection.js";
import { evictionFinding } from "./safety.js";
import type { EvictionReport, ReplicationReport } from "./safety.js";

/** The Redis readers behind the verdicts of safety.ts (kept apart so the verdicts load without ioredis). */

function masters(client: GuardRedisClient): Redis[] {
  return client instanceof Cluster ? client.nodes("master") : [client];
}

/** A CONFIG or INFO refused by the server (ACL, renamed command), as opposed to a connection failure. */
function refused(err: unknown): string | undefined {
  return (err as Error | null)?.name === "ReplyError" ? (err as Error).message : undefined;
}

/** The pairs of a CONFIG GET reply as a map. */
function configMap(reply: unknown): Map<string, string> {
  const flat = Array.isArray(reply) ? (reply as unknown[]).map(String) : [];
  const map = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) map.set(flat[i] as string, flat[i + 1] as string);
  return map;
}

/** CONFIG GET maxmemory* on every master: the first one that is unsafe (or unknown) speaks for all. */
export async function readEviction(client: GuardRedisClient): Promise<EvictionReport> {
  const reports: EvictionReport[] = [];
  for (const node of masters(client)) {
    let reply: unknown;
    try {
      // One pattern: CONFIG GET takes a single parameter before Redis 7.
      reply = await node.call("CONFIG", "GET", "maxmemory*");
    } catch (err) {
      const why = refused(err);
      if (why === undefined) throw err;
      reports.push({ reason: why });
      continue;
    }
    const map = configMap(reply);
    const policy = map.get("maxmemory-policy");
    const maxmemory = map.has("maxmemory") ? Number(map.get("maxmemory")) : undefined;
    reports.push(
      policy === undefined || maxmemory === undefined || Number.isNaN(maxmemory)
        ? { reason: "CONFIG GET returned no maxmemory-policy" }
        : { policy, maxmemory },
    );
  }
  return (
    reports.find((r) => evictionFinding(r).level === "unsafe") ??
    reports.find((r) => r.policy === undefined) ??
    reports[0] ?? { reason: "no master node" }
  );
}

/** INFO replication on every master: the one with the fewest online replicas speaks for all. */
export async function readReplication(client: GuardRedisClient): Promise<ReplicationReport> {
  const reports: ReplicationReport[] = [];
  for (const node of masters(client)) {
    let info: string;
    try {
      info = String(await node.call("INFO", "replication"));
    } catch (err) {
      const why = refused(err);
      if (why === undefined) throw err;
      reports.push({ reason: why });
      continue;
    }
    const role = /^role:(\S+)/m.exec(info)?.[1];
    // slave0:ip=...,port=...,state=online,offset=...,lag=0 — only online ones acknowledge WAIT.
    const replicas = [...info.matchAll(/^slave\d+:(.*)$/gm)].filter((m) =>
      /(^|,)state=online(,|$)/.test(m[1] ?? ""),
    ).length;
    reports.push(role === undefined ? { reason: "INFO replication has no role" } : { role, replicas });
  }
  const known = reports.filter((r) => r.role !== undefined);
  if (known.length === 0) return reports[0] ?? { reason: "no master node" };
  return (
    known.find((r) => r.role !== "master") ??
    known.reduce((a, b) => ((b.replicas ?? 0) < (a.replicas ?? 0) ? b : a))
  );
}
