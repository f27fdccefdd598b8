import type { KvVersion } from "../../../src/protocol/kv-version.js";
import { compareKvVersions, formatKvVersion, parseKvVersion } from "../../../src/protocol/kv-version.js";
import type { Observed } from "./watcher.js";
import type { LoggedWrite } from "./writers.js";

/**
 * The KV soak's own verdict, independent of the relay's code and of `verify --kv`: from the writers'
 * log and what each bucket stored (in stream order, as the test's watchers saw it, plus what was left
 * at the end), on one machine where every server shares one clock.
 *
 * - Every write's version is its store time in its region (no `KV-Version`), read from its region's
 *   bucket; every relayed copy carries exactly that version (`Relay-KV-Version`), and its value and
 *   operation; no write comes back to its region; no region stores a write twice.
 * - Last writer wins, as it happens: in every bucket, a key's versions rise with the stream sequence
 *   (a local write is stored later, so newer, on the shared clock; a relayed one only when newer). A
 *   remote write stored over a newer one breaks it.
 * - At the end, every bucket's latest entry of every key is the write with the newest version of all
 *   the writes logged for it: same id, value, operation and version. A write whose version was never
 *   seen (removed from its bucket before the watcher read it) has a later write of its key in its
 *   region's bucket, so it is not the newest.
 * - The conflicts each link should have counted: the writes of its source region stored there and never
 *   stored in its destination (less what its relay counted as superseded, the test's part).
 */

export interface LinkPrediction {
  readonly from: string;
  readonly to: string;
  /** Writes of `from` stored there and never seen in `to`'s bucket. */
  readonly notApplied: number;
  /** Of those, at most this many may be in `to`'s holes (messages removed before anyone saw them). */
  readonly holes: number;
  /** Writes of `from` whose publish timed out, never seen anywhere: stored (and removed) or not. */
  readonly unresolved: number;
}

export interface SoakVerdict {
  /** Everything that breaks a guarantee; empty when the soak passed. */
  readonly problems: string[];
  readonly links: LinkPrediction[];
  /** Keys whose winner is a tombstone. */
  readonly tombstones: number;
  /** Writes whose version was read back, and those whose version no bucket kept (dominated). */
  readonly versioned: number;
  readonly dominated: number;
  /** Writes that timed out (region stopped): found stored later, or never seen. */
  readonly uncertainStored: number;
  readonly uncertainUnseen: number;
  /** Writes with a write of the same key from another region sent within 50 ms: they race. */
  readonly raced: number;
}

const v = (x: KvVersion | undefined) => (x === undefined ? "none" : formatKvVersion(x));

export function judgeSoak(input: {
  readonly regions: readonly string[];
  readonly writes: readonly LoggedWrite[];
  /** Per region: what its bucket stored, in sequence order (watched, and left at the end). */
  readonly stored: ReadonlyMap<string, readonly Observed[]>;
  /** Per region: sequences no one saw (removed before the watcher read them). */
  readonly holes: ReadonlyMap<string, number>;
  /** Per region: each key's latest entry at the end, read on its own. */
  readonly final: ReadonlyMap<string, ReadonlyMap<string, Observed>>;
  readonly keys: readonly string[];
}): SoakVerdict {
  const problems: string[] = [];
  const problem = (p: string) => {
    if (problems.length < 50) problems.push(p);
    else if (problems.length === 50) problems.push("(more not listed)");
  };
  const byId = new Map(input.writes.map((w) => [w.id, w]));
  /** The version of each write, from its region's bucket (its own store time). */
  const own = new Map<string, KvVersion>();
  /** The versions its relayed copies carry. */
  const carried = new Map<string, KvVersion[]>();
  /** Per region, the ids stored there. */
  const copies = new Map<string, Set<string>>();
  for (const region of input.regions) {
    const ids = new Set<string>();
    copies.set(region, ids);
    const latest = new Map<string, { version: KvVersion; seq: number }>();
    for (const o of input.stored.get(region) ?? []) {
      const w = byId.get(o.id);
      if (!w) {
        problem(`${region} seq ${o.seq}: a message no writer wrote (Test-Write "${o.id}")`);
        continue;
      }
      if (ids.has(o.id)) problem(`${region}: write ${o.id} stored twice (seq ${o.seq})`);
      ids.add(o.id);
      if (o.key !== w.key || o.op !== w.op || o.value !== w.value) problem(`${region} seq ${o.seq}: write ${o.id} stored as ${o.op} ${o.key} "${o.value}", written as ${w.op} ${w.key} "${w.value}"`);
      let version: KvVersion;
      if (o.carried === "") {
        if (w.region !== region) problem(`${region} seq ${o.seq}: write ${o.id} of region ${w.region} stored without its Relay-KV-Version`);
        if (w.seq !== undefined && w.seq !== o.seq) problem(`${region}: write ${o.id} acked at seq ${w.seq}, stored at ${o.seq}`);
        version = { ns: o.storedNs, region };
        own.set(o.id, version);
      } else {
        const parsed = parseKvVersion(o.carried);
        if (!parsed) {
          problem(`${region} seq ${o.seq}: write ${o.id} carries an unreadable Relay-KV-Version "${o.carried}"`);
          continue;
        }
        if (w.region === region) problem(`${region} seq ${o.seq}: write ${o.id} came back to its own region (a loop)`);
        if (o.origin !== "" && o.origin !== w.region) problem(`${region} seq ${o.seq}: write ${o.id} of ${w.region} has Relay-Origin ${o.origin}`);
        version = parsed;
        carried.set(o.id, [...(carried.get(o.id) ?? []), parsed]);
      }
      const before = latest.get(o.key);
      if (before && compareKvVersions(version, before.version) <= 0) {
        problem(`${region} key ${o.key}: seq ${o.seq} (write ${o.id}, version ${v(version)}) stored after seq ${before.seq} (version ${v(before.version)}): not newer`);
      }
      if (!before || compareKvVersions(version, before.version) > 0) latest.set(o.key, { version, seq: o.seq });
    }
  }
  // One version per write, wherever it is stored.
  const versionOf = new Map<string, KvVersion>();
  for (const w of input.writes) {
    const mine = own.get(w.id);
    const copiesOf = carried.get(w.id) ?? [];
    const first = mine ?? copiesOf[0];
    for (const c of copiesOf) {
      if (first && compareKvVersions(c, first) !== 0) problem(`write ${w.id}: a copy carries version ${v(c)}, its region stored it at ${v(first)}`);
      if (c.region !== w.region) problem(`write ${w.id} of ${w.region}: a copy names region ${c.region}`);
    }
    if (first) versionOf.set(w.id, first);
  }
  // The winner of each key: the newest version logged.
  const winners = new Map<string, LoggedWrite>();
  for (const w of input.writes) {
    const ver = versionOf.get(w.id);
    if (!ver) continue;
    const best = winners.get(w.key);
    if (!best || compareKvVersions(ver, versionOf.get(best.id) as KvVersion) > 0) winners.set(w.key, w);
  }
  let dominated = 0;
  let uncertainStored = 0;
  let uncertainUnseen = 0;
  for (const w of input.writes) {
    const seen = versionOf.has(w.id);
    if (w.outcome === "uncertain") {
      if (seen) uncertainStored++;
      else uncertainUnseen++;
      continue;
    }
    if (w.outcome !== "acked" || seen) continue;
    // Acked, and no bucket kept it long enough to be seen: a later write of its key in its own bucket
    // removed it (history, a purge's rollup), and versions there rise with the sequence.
    dominated++;
    const later = (input.stored.get(w.region) ?? []).some((o) => o.key === w.key && o.seq > (w.seq ?? Infinity));
    if (!later) problem(`write ${w.id} (acked at ${w.region} seq ${w.seq}) is in no bucket, and nothing later of key ${w.key} is in ${w.region}'s`);
  }
  let tombstones = 0;
  for (const key of input.keys) {
    const winner = winners.get(key);
    if (winner && winner.op !== "PUT") tombstones++;
    for (const region of input.regions) {
      const got = input.final.get(region)?.get(key);
      if (!winner) {
        if (got) problem(`${region} key ${key}: holds write ${got.id}, and no write of the key was seen stored`);
        continue;
      }
      const want = `${winner.id} ${winner.op} "${winner.value}" @${v(versionOf.get(winner.id))}`;
      const has = got ? `${got.id} ${got.op} "${got.value}" @${v(got.carried !== "" ? parseKvVersion(got.carried) : { ns: got.storedNs, region })}` : "nothing";
      if (want !== has) problem(`${region} key ${key}: holds ${has}, the newest write is ${want}`);
    }
  }
  const links: LinkPrediction[] = [];
  for (const from of input.regions) {
    for (const to of input.regions) {
      if (from === to) continue;
      const there = copies.get(to) ?? new Set<string>();
      let notApplied = 0;
      let unresolved = 0;
      for (const w of input.writes) {
        if (w.region !== from) continue;
        const stored = w.outcome === "acked" || versionOf.has(w.id);
        if (!stored) {
          if (w.outcome === "uncertain") unresolved++;
          continue;
        }
        if (!there.has(w.id)) notApplied++;
      }
      links.push({ from, to, notApplied, holes: input.holes.get(to) ?? 0, unresolved });
    }
  }
  return { problems, links, tombstones, versioned: versionOf.size, dominated, uncertainStored, uncertainUnseen, raced: countRaced(input.writes) };
}

/** Writes with a write of the same key from another region sent within 50 ms of it. */
function countRaced(writes: readonly LoggedWrite[]): number {
  const byKey = new Map<string, LoggedWrite[]>();
  for (const w of writes) {
    const list = byKey.get(w.key);
    if (list) list.push(w);
    else byKey.set(w.key, [w]);
  }
  let raced = 0;
  for (const ws of byKey.values()) {
    const sorted = [...ws].sort((x, y) => x.sentMs - y.sentMs);
    sorted.forEach((w, i) => {
      const near = (j: number) => {
        const o = sorted[j];
        return o !== undefined && o.region !== w.region && Math.abs(o.sentMs - w.sentMs) <= 50;
      };
      let hit = false;
      for (let j = i - 1; j >= 0 && !hit && (sorted[j]?.sentMs ?? 0) >= w.sentMs - 50; j--) hit = near(j);
      for (let j = i + 1; j < sorted.length && !hit && (sorted[j]?.sentMs ?? Infinity) <= w.sentMs + 50; j++) hit = near(j);
      if (hit) raced++;
    });
  }
  return raced;
}
