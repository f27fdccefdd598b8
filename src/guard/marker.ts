import { randomBytes } from "node:crypto";
import type { RedisGuardConnection } from "../config/types.js";
import { CLUSTER_GROUPS, groupTag } from "./layout.js";
import type { GuardRedisClient } from "./redis-connection.js";
import type { GuardMarkerEntry, GuardMarkerMark } from "./types.js";

/**
 * Loss detection: the scope marker. A Redis that was flushed, restarted without its data, or failed
 * over to a replica that never had it, answers every claim with "relay" and every version check with
 * "not stale": the guard would go on silently with no memory. So each scope has a hash that never
 * expires,
 *
 *   relay:{<scope>}:marker   created <ISO time>, id <random hex>, link:<lease key> "<mark> <ISO time>"
 *
 * with an entry per link (by its lease key: source region, stream and durable, i.e. the consumer whose
 * history is checked). A link finds its entry missing:
 *   - its durable consumer has acked nothing (or does not exist): a new link; it writes `joined`;
 *   - it has acked messages: the guard's memory is gone (GUARD_STATE_LOST): the link pauses until an
 *     operator writes `resumed` or `resync` (`jetstream-relay guard resume`).
 * An entry per link rather than one per scope: a new link joining a scope right after the loss must
 * not hide the loss from the links that relayed before it.
 *
 * On Redis Cluster a scope's keys are spread over slot groups (layout.ts), which may sit on different
 * shards, and one shard can lose its data alone. So there is a marker per group, in the group's slot
 * (`relay:{<scope>/<g>}:marker`, group 0 keeping `relay:{<scope>}:marker`), and an entry counts as
 * present only when every group has it. The name is apart from the guard's other keys (`meta`, `ids:`,
 * `id:`, `vers:`, `ver:`, `epoch:` (the lease-revision fence, by its name of older versions)).
 */

export const MARKER_MARKS: readonly GuardMarkerMark[] = ["joined", "resumed", "resync", "resynced"];

/** Group 0's marker (the one of a single Redis or Sentinel; the first of a Cluster's). */
export function markerKey(scope: string): string {
  return `relay:${groupTag(scope, 0)}:marker`;
}

/** Slot groups of a connection: one marker per group (see layout.ts). */
export function markerGroups(conn: Pick<RedisGuardConnection, "cluster">): number {
  return conn.cluster ? CLUSTER_GROUPS : 1;
}

export function markerKeys(scope: string, groups: number): string[] {
  return Array.from({ length: groups }, (_, g) => `relay:${groupTag(scope, g)}:marker`);
}

export function markerField(fence: string): string {
  return `link:${fence}`;
}

export function formatEntry(mark: GuardMarkerMark, at = new Date()): string {
  return `${mark} ${at.toISOString()}`;
}

/** An entry as stored; undefined for no value. Something unreadable counts as present (`joined`): it was written. */
export function parseEntry(value: string | null | undefined): GuardMarkerEntry | undefined {
  if (value === null || value === undefined) return undefined;
  const [mark, at = ""] = value.split(" ", 2);
  return MARKER_MARKS.includes(mark as GuardMarkerMark)
    ? { mark: mark as GuardMarkerMark, at }
    : { mark: "joined", at };
}

/** Creates the scope's fields when the hash is new, then writes the link's entry (or keeps one that is there). */
const WRITE_LUA = `
redis.call('HSETNX', KEYS[1], 'created', ARGV[1])
redis.call('HSETNX', KEYS[1], 'id', ARGV[2])
if ARGV[5] == '1' then return redis.call('HSETNX', KEYS[1], ARGV[3], ARGV[4]) end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return 1
`;

/**
 * The link's entry: present only when every group's marker has one (a `resync` in any of them wins,
 * else group 0's); undefined otherwise.
 */
export async function readMarker(
  client: GuardRedisClient,
  scope: string,
  fence: string,
  groups = 1,
): Promise<GuardMarkerEntry | undefined> {
  const field = markerField(fence);
  const values = await Promise.all(markerKeys(scope, groups).map((key) => client.hget(key, field)));
  const entries = values.map(parseEntry);
  if (entries.some((e) => e === undefined)) return undefined;
  return entries.find((e) => e?.mark === "resync") ?? entries[0];
}

/** Every field of the scope's marker in group 0 (empty: there is none). */
export async function readScopeMarker(
  client: GuardRedisClient,
  scope: string,
): Promise<Record<string, string>> {
  return client.hgetall(markerKey(scope));
}

export interface WriteResult {
  /** The entry was written in some group (false: `ifAbsent` and every group had one). */
  readonly written: boolean;
  /** The fewest replicas that acknowledged a group's write (when `waitReplicas` was asked for). */
  readonly replicas?: number;
}

/**
 * Writes the link's entry in every group's marker. With `waitReplicas`, WAITs for that many replicas
 * (up to `waitTimeoutMs`) in the same pipeline as each write, so the WAIT goes to the node that took it.
 */
export async function writeMarker(
  client: GuardRedisClient,
  scope: string,
  fence: string,
  mark: GuardMarkerMark,
  opts: { ifAbsent?: boolean; waitReplicas?: number; waitTimeoutMs?: number; groups?: number } = {},
): Promise<WriteResult> {
  const wait = opts.waitReplicas ?? 0;
  const results = await Promise.all(
    markerKeys(scope, opts.groups ?? 1).map(async (key) => {
      const args = [
        new Date().toISOString(),
        randomBytes(8).toString("hex"),
        markerField(fence),
        formatEntry(mark),
        opts.ifAbsent ? "1" : "0",
      ];
      const pipeline = client.pipeline().eval(WRITE_LUA, 1, key, ...args);
      if (wait > 0) pipeline.call("WAIT", String(wait), String(opts.waitTimeoutMs ?? 1_000));
      const replies = (await pipeline.exec()) ?? [];
      for (const [err] of replies) if (err) throw err;
      return { written: Number(replies[0]?.[1]) === 1, replicas: Number(replies[1]?.[1] ?? 0) };
    }),
  );
  return {
    written: results.some((r) => r.written),
    ...(wait > 0 ? { replicas: Math.min(...results.map((r) => r.replicas)) } : {}),
  };
}

/**
 * A Redis that relays from before scope markers wrote to: it holds the link's lease-revision fence key
 * (every claim and commit under a lease writes it; its name `epoch:<fence>` is the same in every
 * version, layout.ts) and no bucket directory (only the current layout writes one, so a flushed Redis
 * that took new commits before the loss was noticed does not count). Such a link's missing entry is
 * an upgrade, not a loss.
 */
export async function heldByEarlierRelay(client: GuardRedisClient, scope: string, fence: string): Promise<boolean> {
  const [fenced, meta] = await Promise.all([client.exists(`relay:${groupTag(scope, 0)}:epoch:${fence}`), client.exists(`relay:${groupTag(scope, 0)}:meta`)]);
  return fenced === 1 && meta === 0;
}
