/**
 * `jetstream-relay verify --kv`: reads both buckets of a KV link (each key's latest entry: the
 * bucket stream's last message per subject) and compares them key by key (kv-compare.ts). Read-only:
 * one short-lived in-memory ordered consumer per bucket, deleted at the end.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { readStreamInfo } from "../nats/stream-reader.js";
import type { StreamSide } from "../nats/stream-reader.js";
import type { ProgressStream } from "../observability/progress.js";
import type { KvEntry } from "./kv-compare.js";
import { compareKvBuckets, kvEntryOf } from "./kv-compare.js";
import type { KvComparison } from "./kv-compare.js";
import type { KvBucketSide, KvVerifyReport } from "./kv-report.js";
import { kvDifferenceCounts } from "./kv-report.js";
import type { VerifyOptions } from "./types.js";
import { findLink, withLinkSides, withProgress } from "./verify.js";

/** One bucket of a KV link, on an open connection: its region, stream (`KV_<bucket>`) and bucket name. */
export interface KvSide extends StreamSide {
  readonly bucket: string;
}

export interface KvVerifyOptions extends Pick<VerifyOptions, "logger" | "connectTimeoutMs" | "idleTimeoutMs" | "progress"> {
  /** Differences kept in the report as examples (default 20). */
  readonly examples?: number;
}

/** What a comparison read and found: the report, and every difference for repair. */
export interface KvVerification {
  readonly report: KvVerifyReport;
  readonly comparison: KvComparison;
}

/** The subject prefix of a bucket's keys (`$KV.<bucket>.`). */
export function kvPrefix(bucket: string): string {
  return `$KV.${bucket}.`;
}

/**
 * The KV link named `name`: USAGE when there is none (listing the links), or when it is not a KV link
 * (no `from.bucket`/`to.bucket`); `command` and `path` name the command and config file in the message.
 */
export function findKvLink(config: RelayConfig, name: string, command = "verify", path?: string): LinkConfig & {
  readonly from: { readonly bucket: string };
  readonly to: { readonly bucket: string };
} {
  const link = findLink(config, name, command, path);
  const { bucket: fromBucket } = link.from;
  const { bucket: toBucket } = link.to;
  if (fromBucket === undefined || toBucket === undefined) {
    const where = path === undefined ? "" : ` in ${path}`;
    throw new RelayError(
      ErrorCodes.USAGE,
      `${command} --kv: link "${name}"${where} is not a KV link (it has no from.bucket and to.bucket; see docs/kv.md); ` +
        `leave out --kv to compare its streams by message id`,
    );
  }
  return { ...link, from: { ...link.from, bucket: fromBucket }, to: { ...link.to, bucket: toBucket } };
}

/** Connects to both regions of the KV link (as the relay does), runs `fn` over its two buckets, disconnects. */
export async function withKvSides<T>(
  config: RelayConfig,
  link: ReturnType<typeof findKvLink>,
  opts: Pick<VerifyOptions, "logger" | "connectTimeoutMs"> & { readonly command?: string },
  fn: (sides: { readonly from: KvSide; readonly to: KvSide }) => Promise<T>,
): Promise<T> {
  return withLinkSides(config, link, opts, (sides) =>
    fn({ from: { ...sides.source, bucket: link.from.bucket }, to: { ...sides.dest, bucket: link.to.bucket } }),
  );
}

/** `verify --kv` of the link named `linkName`: connects, compares, disconnects. */
export async function verifyKvLink(config: RelayConfig, linkName: string, opts: KvVerifyOptions = {}): Promise<KvVerifyReport> {
  const link = findKvLink(config, linkName);
  return withKvSides(config, link, opts, async (sides) => (await verifyKvSides(link.name, sides, opts)).report);
}

/** The comparison itself over two open buckets: both read (one after the other), then compared. */
export async function verifyKvSides(
  linkName: string,
  sides: { readonly from: KvSide; readonly to: KvSide },
  opts: KvVerifyOptions = {},
): Promise<KvVerification> {
  const started = Date.now();
  const from = await readBucket(linkName, sides.from, opts);
  const to = await readBucket(linkName, sides.to, opts);
  const comparison = compareKvBuckets(from.entries, to.entries);
  const counts = kvDifferenceCounts(comparison.differences);
  const report: KvVerifyReport = {
    link: linkName,
    from: from.side,
    to: to.side,
    keys: comparison.keys,
    same: comparison.same,
    differences: { ...counts, examples: comparison.differences.slice(0, opts.examples ?? 20) },
    agree: counts.count === 0,
    elapsedMs: Date.now() - started,
  };
  opts.logger?.info(
    { link: linkName, keys: report.keys, differences: counts.count, byKind: counts.byKind, agree: report.agree },
    "verify --kv: compared",
  );
  return { report, comparison };
}

/**
 * Every key's latest entry in the bucket: its stream's last message per subject under `$KV.<bucket>.>`,
 * payloads included (hashed as they arrive, never kept). A consumer reset re-reads from the next
 * sequence with every message, so the highest sequence per key is kept.
 */
export async function readBucket(
  linkName: string,
  side: KvSide,
  opts: { readonly idleTimeoutMs?: number; readonly progress?: ProgressStream } = {},
): Promise<{ readonly entries: Map<string, KvEntry>; readonly side: KvBucketSide }> {
  const prefix = kvPrefix(side.bucket);
  const info = await readStreamInfo(side);
  const entries = new Map<string, KvEntry>();
  const onMessage = (m: JsMsg) => {
    if (!m.subject.startsWith(prefix)) return;
    const key = m.subject.slice(prefix.length);
    const seq = m.seq;
    if ((entries.get(key)?.seq ?? 0) > seq) return;
    entries.set(key, kvEntryOf(m.headers, m.data, seq, m.timestampNanos, side.region));
  };
  await withProgress(
    opts,
    `verify ${linkName}: bucket ${side.region}/${side.bucket}`,
    side,
    {
      info,
      filterSubject: `${prefix}>`,
      lastPerSubject: true,
      payloads: true,
      ...(opts.idleTimeoutMs ? { idleTimeoutMs: opts.idleTimeoutMs } : {}),
    },
    onMessage,
  );
  let tombstones = 0;
  for (const e of entries.values()) if (e.op !== "PUT") tombstones++;
  return {
    entries,
    side: {
      region: side.region,
      bucket: side.bucket,
      stream: side.stream,
      values: entries.size - tombstones,
      tombstones,
      streamLastSeq: info.state.last_seq,
    },
  };
}
