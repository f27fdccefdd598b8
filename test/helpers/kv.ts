/**
 * KV link tests (docs/kv.md): buckets in several regions, the config of links between them, and what
 * each bucket holds last for a key, with the version the relay judges it by.
 */
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import { TEST_GROUP } from "./scenario.js";
import { withServers } from "./servers.js";
import type { HasAfter } from "./servers.js";
import { connectTo } from "./streams.js";
import { parseNanos } from "../../src/protocol/headers.js";
import { compareKvVersions, formatKvVersion, kvVersionOf } from "../../src/protocol/kv-version.js";

export interface Region {
  readonly name: string;
  readonly url: string;
  readonly port: number;
  readonly nc: NatsConnection;
  readonly kv: KV;
}

/** What a bucket holds last for a key: operation, value and version (as the relay judges it). */
export interface Latest {
  readonly op: string;
  readonly value: string;
  readonly version: string;
  readonly seq: number;
}

export function kvYaml(regions: readonly { name: string; url: string }[], links: readonly [string, string][], bucket: string, extra = ""): string {
  const r = regions.map((x) => `  ${x.name}: { servers: ["${x.url}"] }`).join("\n");
  const l = links
    .map(
      ([from, to]) => `  - name: ${from}-to-${to}
    from: { region: ${from}, bucket: ${bucket} }
    to: { region: ${to}, bucket: ${bucket} }
    ackWait: 5s
    publishTimeout: 2s`,
    )
    .join("\n");
  return `regions:\n${r}\nlinks:\n${l}\n${extra}\nlog: { level: info }\n${TEST_GROUP}\nshutdown: { grace: 10s }\n`;
}

export async function kvRegions(t: HasAfter, names: readonly string[], bucket: string, history: number): Promise<Region[]> {
  const servers = withServers(t);
  const nodes = await Promise.all(names.map(() => servers.startNats()));
  return Promise.all(
    names.map(async (name, i) => {
      const node = nodes[i];
      assert.ok(node);
      const nc = await connectTo(t, node.url);
      const kv = await new Kvm(nc).create(bucket, { history });
      return { name, url: node.url, port: node.port, nc, kv };
    }),
  );
}

export async function latest(r: Region, bucket: string, key: string): Promise<Latest | undefined> {
  const jsm = await jetstreamManager(r.nc);
  const m = await jsm.streams.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${key}` });
  if (!m) return undefined;
  const ns = parseNanos(m.timestamp) ?? 0n;
  const version = kvVersionOf({ get: (n: string) => m.header?.get(n) ?? "" }, ns, r.name);
  return { op: m.header?.get("KV-Operation") || "PUT", value: new TextDecoder().decode(m.data), version: formatKvVersion(version), seq: m.seq };
}

/** Every message of a bucket's stream: its subject, headers and version. */
export async function history(r: Region, bucket: string): Promise<{ subject: string; origin: string; version: string; op: string }[]> {
  const jsm = await jetstreamManager(r.nc);
  const info = await jsm.streams.info(`KV_${bucket}`);
  const out: { subject: string; origin: string; version: string; op: string }[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(`KV_${bucket}`, { seq });
    if (!m) continue;
    const ns = parseNanos(m.timestamp) ?? 0n;
    out.push({ subject: m.subject, origin: m.header?.get("Relay-Origin") ?? "", version: formatKvVersion(kvVersionOf({ get: (n: string) => m.header?.get(n) ?? "" }, ns, r.name)), op: m.header?.get("KV-Operation") || "PUT" });
  }
  return out;
}

/** The keys whose latest write differs between the regions (empty: converged). */
export async function differences(all: readonly Region[], bucket: string, keys: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const key of keys) {
    const seen = await Promise.all(all.map((r) => latest(r, bucket, key)));
    const first = seen[0];
    for (const s of seen.slice(1)) {
      if (s?.op !== first?.op || s?.value !== first?.value || s?.version !== first?.version) {
        out.push(`${key}: ${seen.map((x, i) => `${all[i]?.name}=${x ? `${x.op} ${JSON.stringify(x.value)} @${x.version}` : "none"}`).join(", ")}`);
        break;
      }
    }
  }
  return out;
}

/** True once every key's latest write is the same in every region; else throws what differs (check reports it). */
export async function converged(all: readonly Region[], bucket: string, keys: readonly string[]): Promise<boolean> {
  const d = await differences(all, bucket, keys);
  if (d.length > 0) throw new Error(d.join("; "));
  return true;
}

/** The newest version of `key` among every message either bucket stored (what last writer wins must keep). */
export function newestOf(histories: readonly { subject: string; version: string }[][], subject: string): string | undefined {
  let best: string | undefined;
  for (const h of histories) {
    for (const m of h) {
      if (m.subject !== subject) continue;
      if (best === undefined) best = m.version;
      else {
        const [a, b] = [m.version, best].map((v) => {
          const [ns, region] = v.split(" ");
          return { ns: BigInt(ns ?? "0"), region: region ?? "" };
        }) as [{ ns: bigint; region: string }, { ns: bigint; region: string }];
        if (compareKvVersions(a, b) > 0) best = m.version;
      }
    }
  }
  return best;
}

