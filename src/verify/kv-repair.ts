/**
 * `jetstream-relay repair --kv`: compare the link's two buckets (kv-verify.ts), then put each
 * difference's winner (the newer write, or the only one) on the side that lacks it, as one
 * conditional write per key:
 * - `Nats-Expected-Last-Subject-Sequence` of the entry read on that side (0: none), so a write that
 *   landed since the read is never overwritten: the server refuses (10071), the key is reported
 *   `changed` and left to the next verify;
 * - the winner is re-read first, and when its side's latest entry is no longer the one compared, the
 *   key is `changed` too;
 * - `Relay-KV-Version` of the winner, so the copy has the winner's version wherever it is stored (a
 *   local write's version is its store time, which the copy would not share), `Relay-Origin` and
 *   `Relay-Path` as a relayed copy has them (the link back does not send it home again), and
 *   `Relay-Repair: true`;
 * - a tombstone winner keeps its `KV-Operation`; a `PURGE` carries `Nats-Rollup: sub`, as the KV
 *   client's purge does.
 * Copied from the winner: the value and every header except `Nats-*` (JetStream acts on those) and the
 * relay's per-hop markers (`Relay-Source`, `Relay-Source-Time`, `Relay-Link`, `Relay-Snapshot`: a
 * link's position in that stream, which a repaired copy must not move). Same-version conflicts and
 * unreadable versions have no winner: they are reported and left alone.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { headers as newHeaders } from "@nats-io/nats-core";
import type { MsgHdrs } from "@nats-io/nats-core";
import { pino } from "pino";
import type { Logger } from "pino";
import type { RelayConfig } from "../config/types.js";
import { toRelayError } from "../errors.js";
import { isApiCode } from "../nats/durable-consumer.js";
import { RelayHeaders } from "../protocol/headers.js";
import { KV_VERSION_HEADER } from "../protocol/kv-version.js";
import type { ProgressStream } from "../observability/progress.js";
import type { KvDifference, KvSideName } from "./kv-compare.js";
import { KV_OPERATION_HEADER } from "./kv-compare.js";
import type { KvRepairItem, KvRepairResult } from "./kv-repair-report.js";
import type { KvSide } from "./kv-verify.js";
import { findKvLink, kvPrefix, verifyKvSides, withKvSides } from "./kv-verify.js";

export type { KvRepairItem, KvRepairOutcome, KvRepairResult } from "./kv-repair-report.js";
export { formatKvRepair, kvRepairExitCode } from "./kv-repair-report.js";

/** JSStreamWrongLastSequenceErrF: the key's last sequence is not the one expected (a write landed). */
const WRONG_LAST_SEQUENCE = 10071;

/** Headers never copied from the winner: the relay's per-hop markers and what is set here. */
const NOT_COPIED = new Set(
  [
    RelayHeaders.MsgId,
    RelayHeaders.Source,
    RelayHeaders.SourceTime,
    RelayHeaders.Link,
    RelayHeaders.Snapshot,
    RelayHeaders.Repair,
    RelayHeaders.Origin,
    RelayHeaders.Path,
    KV_VERSION_HEADER,
    KV_OPERATION_HEADER,
  ].map((h) => h.toLowerCase()),
);

export interface KvRepairOptions {
  /** Compare and print the plan; write nothing. */
  readonly dryRun?: boolean;
  readonly logger?: Logger;
  readonly connectTimeoutMs?: number;
  /** Progress lines of the bucket reads (see VerifyOptions.progress). */
  readonly progress?: ProgressStream;
}

/** `repair --kv` of the link named `linkName`: connects, compares, puts the winners back, disconnects. */
export async function repairKvLink(config: RelayConfig, linkName: string, opts: KvRepairOptions = {}): Promise<KvRepairResult> {
  const started = Date.now();
  const link = findKvLink(config, linkName, "repair");
  const logger = opts.logger ?? pino({ level: "silent" });
  const connect = { logger, command: "repair", ...(opts.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: opts.connectTimeoutMs }) };
  return withKvSides(config, link, connect, async (sides) => {
    const { report, comparison } = await verifyKvSides(link.name, sides, {
      logger,
      ...(opts.progress ? { progress: opts.progress } : {}),
    });
    const items = opts.dryRun ? planKvRepair(comparison.differences) : await putBackKv(link.name, sides, comparison.differences, logger);
    return {
      link: link.name,
      from: { region: sides.from.region, bucket: sides.from.bucket },
      to: { region: sides.to.region, bucket: sides.to.bucket },
      keys: report.keys,
      differences: report.differences.count,
      dryRun: opts.dryRun === true,
      items,
      elapsedMs: Date.now() - started,
    };
  });
}

/** What repair would do for each difference: put the winner on the other side, or nothing (no winner). */
export function planKvRepair(differences: readonly KvDifference[]): KvRepairItem[] {
  return differences.map((d) => {
    const base = { key: d.key, kind: d.kind };
    if (d.winner === undefined) return { ...base };
    const entry = d[d.winner];
    return {
      ...base,
      winner: d.winner,
      target: other(d.winner),
      ...(entry?.version !== undefined ? { version: entry.version } : {}),
      ...(entry ? { op: entry.op } : {}),
    };
  });
}

/**
 * Puts each difference's winner on the other side, one key at a time (each a conditional write on
 * what was read there: see the file's comment). Returns every difference as an item with its outcome.
 */
export async function putBackKv(
  linkName: string,
  sides: { readonly from: KvSide; readonly to: KvSide },
  differences: readonly KvDifference[],
  logger: Logger = pino({ level: "silent" }),
): Promise<KvRepairItem[]> {
  const items = planKvRepair(differences);
  const managers = { from: await managerOf(sides.from), to: await managerOf(sides.to) };
  for (const [i, item] of items.entries()) {
    const d = differences[i] as KvDifference;
    if (d.winner === undefined) {
      item.outcome = "undecided";
      item.detail =
        d.kind === "conflict"
          ? "the same version with different content on the two sides: no winner by version; write the key anew to settle it"
          : "a version header is malformed: nothing to compare by; write the key anew to settle it";
    } else {
      await putOne(sides, managers, d, d.winner, item);
    }
    logger.info(
      { link: linkName, key: item.key, kind: item.kind, winner: item.winner, version: item.version, outcome: item.outcome, detail: item.detail },
      "repair --kv: key",
    );
  }
  return items;
}

async function putOne(
  sides: { readonly from: KvSide; readonly to: KvSide },
  managers: Record<KvSideName, JetStreamManager>,
  d: KvDifference,
  winner: KvSideName,
  item: KvRepairItem,
): Promise<void> {
  const target = other(winner);
  const from = sides[winner];
  const into = sides[target];
  const read = d[winner];
  const version = read?.version;
  if (!read || version === undefined) {
    item.outcome = "failed";
    item.detail = "the winner has no version";
    return;
  }
  try {
    const sm = await managers[winner].streams.getMessage(from.stream, { last_by_subj: `${kvPrefix(from.bucket)}${d.key}` });
    if (!sm || sm.seq !== read.seq) {
      item.outcome = "changed";
      item.detail = `${from.region}/${from.bucket} holds ${sm ? `seq ${sm.seq}` : "no entry"} for the key now, not the compared seq ${read.seq}: left alone`;
      return;
    }
    const h = copiedHeaders(sm.header, from.region);
    h.set(KV_VERSION_HEADER, version);
    h.set(RelayHeaders.Repair, "true");
    if (read.op !== "PUT") h.set(KV_OPERATION_HEADER, read.op);
    if (read.op === "PURGE") h.set("Nats-Rollup", "sub");
    const expected = d[target]?.seq ?? 0;
    h.set("Nats-Expected-Last-Subject-Sequence", String(expected));
    const js = jetstream(into.nc, into.domain ? { domain: into.domain } : {});
    const ack = await js.publish(`${kvPrefix(into.bucket)}${d.key}`, sm.data, { headers: h });
    item.outcome = "repaired";
    item.seq = ack.seq;
  } catch (err) {
    if (isApiCode(err, WRONG_LAST_SEQUENCE)) {
      item.outcome = "changed";
      item.detail = `a write landed on the key in ${into.region}/${into.bucket} since the read (its last seq is no longer ${d[target]?.seq ?? "none"}): not overwritten`;
      return;
    }
    item.outcome = "failed";
    item.detail = toRelayError(err).message;
  }
}

/**
 * The winner's headers to copy (see the file's comment), with `Relay-Origin` and `Relay-Path` as a
 * relayed copy carries them: the write's origin (its own, else `region`, where the winner is stored),
 * and the regions it passed through, ending with `region`.
 */
function copiedHeaders(src: MsgHdrs | undefined, region: string): MsgHdrs {
  const h = newHeaders();
  for (const name of src?.keys() ?? []) {
    const lower = name.toLowerCase();
    if (lower.startsWith("nats-") || NOT_COPIED.has(lower)) continue;
    for (const value of src?.values(name) ?? []) h.append(name, value);
  }
  const origin = src?.get(RelayHeaders.Origin) || region;
  const path = (src?.get(RelayHeaders.Path) ?? "").split(",").filter((r) => r !== "");
  if (path[path.length - 1] !== region) path.push(region);
  h.set(RelayHeaders.Origin, origin);
  h.set(RelayHeaders.Path, path.join(","));
  return h;
}

function other(side: KvSideName): KvSideName {
  return side === "from" ? "to" : "from";
}

function managerOf(side: KvSide): Promise<JetStreamManager> {
  return jetstreamManager(side.nc, side.domain ? { domain: side.domain, checkAPI: false } : { checkAPI: false });
}

