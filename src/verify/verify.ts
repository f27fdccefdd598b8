import { pino } from "pino";
import type { Logger } from "pino";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { connectRegion } from "../nats/connect.js";
import type { VerifyReport } from "./report.js";
import { incarnationOf } from "./derived-ids.js";
import { readStream, readStreamInfo } from "./stream-reader.js";
import type { StreamSide } from "./stream-reader.js";
import { Verifier } from "./verifier.js";

export { sourceSubject } from "./verifier.js";

export interface VerifyOptions {
  /** Only source messages stored at/after this time, and destination messages at/after it. */
  readonly since?: Date;
  /** Example ids kept per kind (default 20). */
  readonly examples?: number;
  /**
   * With `since`, destination messages up to this much earlier still count as present (not as examined):
   * the regions' clocks differ, and a copy can carry an earlier time than its source. Default 60 s.
   */
  readonly clockSlackMs?: number;
  readonly logger?: Logger;
  /** Give up connecting to a region after this long (default 15 s). */
  readonly connectTimeoutMs?: number;
  /** Passed to the stream reader: fail when a read makes no progress for this long (default 30 s). */
  readonly idleTimeoutMs?: number;
}

/** The link named `name`, or a USAGE error listing the links there are. */
export function findLink(config: RelayConfig, name: string): LinkConfig {
  const link = config.links.find((l) => l.name === name);
  if (link) return link;
  const known = config.links.map((l) => l.name).join(", ");
  throw new RelayError(ErrorCodes.USAGE, `verify: unknown link "${name}" (links in the config: ${known})`);
}

/** Connects to both regions of the link (auth, TLS and domain from the config), verifies, disconnects. */
export async function verifyLink(config: RelayConfig, linkName: string, opts: VerifyOptions = {}): Promise<VerifyReport> {
  const link = findLink(config, linkName);
  const from = config.regions.get(link.from.region);
  const to = config.regions.get(link.to.region);
  if (!from || !to) throw new RelayError(ErrorCodes.CONFIG_INVALID, `link ${link.name}: unknown region`);
  const logger = opts.logger ?? pino({ level: "silent" });
  const connect = { logger, firstConnectTimeoutMs: opts.connectTimeoutMs ?? 15_000 };
  const [source, dest] = await Promise.allSettled([
    connectRegion(from, { ...connect, name: `jetstream-relay/verify/${link.name}/source` }),
    connectRegion(to, { ...connect, name: `jetstream-relay/verify/${link.name}/destination` }),
  ]);
  try {
    if (source.status === "rejected") throw source.reason;
    if (dest.status === "rejected") throw dest.reason;
    return await verifySides(link, config.links, {
      source: { nc: source.value, region: from.name, stream: link.from.stream, ...(from.domain ? { domain: from.domain } : {}) },
      dest: { nc: dest.value, region: to.name, stream: link.to.stream, ...(to.domain ? { domain: to.domain } : {}) },
    }, opts);
  } finally {
    await Promise.all([source, dest].map((s) => (s.status === "fulfilled" ? s.value.close() : undefined)));
  }
}

/**
 * The check itself over two open connections: the source's stream info (its incarnation, which
 * destination ids are read under), the destination (ids, counts, versions), then the source.
 */
export async function verifySides(
  link: LinkConfig,
  links: readonly LinkConfig[],
  sides: { readonly source: StreamSide; readonly dest: StreamSide },
  opts: VerifyOptions = {},
): Promise<VerifyReport> {
  const started = Date.now();
  // Read once: its creation time is needed before the destination, and its state ends the source read.
  const sourceInfo = await readStreamInfo(sides.source);
  const v = new Verifier(link, links, opts, incarnationOf(sourceInfo));
  const sinceMs = opts.since?.getTime();
  const destRead = await readStream(
    sides.dest,
    { ...(sinceMs === undefined ? {} : { startMs: sinceMs - (opts.clockSlackMs ?? 60_000) }), ...(opts.idleTimeoutMs ? { idleTimeoutMs: opts.idleTimeoutMs } : {}) },
    (m) => v.onDest(m),
  );
  const sourceRead = await readStream(
    sides.source,
    {
      info: sourceInfo,
      ...(link.from.filterSubject ? { filterSubject: link.from.filterSubject } : {}),
      ...(sinceMs === undefined ? {} : { startMs: sinceMs }),
      ...(opts.idleTimeoutMs ? { idleTimeoutMs: opts.idleTimeoutMs } : {}),
    },
    (m) => v.onSource(m),
  );
  return v.report(sourceRead, destRead, Date.now() - started);
}
