import { pino } from "pino";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { ErrorCodes, RelayError, toRelayError } from "../errors.js";
import { connectRegion } from "../nats/connect.js";
import { Progress } from "../observability/progress.js";
import type { VerifyReport } from "./report.js";
import { incarnationOf } from "../link/derived-ids.js";
import { readStream, readStreamInfo, startSeqOf, streamsCapturing } from "../nats/stream-reader.js";
import type { ReadOptions, ReadResult, StreamSide } from "../nats/stream-reader.js";
import type { JsMsg } from "@nats-io/jetstream";
import type { DeadLetterSource, VerifyOptions } from "./types.js";
import { Verifier } from "./verifier.js";

export { sourceSubject } from "../link/source-subject.js";
export type { VerifyOptions } from "./types.js";

/**
 * The link named `name`, or a USAGE error listing the links there are (`command` names the command,
 * `path` the config file, in the message).
 */
export function findLink(config: RelayConfig, name: string, command = "verify", path?: string): LinkConfig {
  const link = config.links.find((l) => l.name === name);
  if (link) return link;
  const known = config.links.map((l) => l.name).join(", ");
  const where = path === undefined ? "" : ` in ${path}`;
  throw new RelayError(ErrorCodes.USAGE, `${command}: unknown link "${name}"${where} (links in the config: ${known})`);
}

/** Connects to both regions of the link (auth, TLS and domain from the config), verifies, disconnects. */
export async function verifyLink(
  config: RelayConfig,
  linkName: string,
  opts: VerifyOptions = {},
): Promise<VerifyReport> {
  const link = findLink(config, linkName);
  return withLinkSides(config, link, opts, (sides) => verifySides(link, config.links, sides, opts));
}

/**
 * Connects to both regions of the link as the relay does (servers, auth, TLS, JetStream domain), runs
 * `fn` over the two stream sides, and disconnects.
 */
export async function withLinkSides<T>(
  config: RelayConfig,
  link: LinkConfig,
  opts: Pick<VerifyOptions, "logger" | "connectTimeoutMs"> & { readonly command?: string },
  fn: (sides: { readonly source: StreamSide; readonly dest: StreamSide }) => Promise<T>,
): Promise<T> {
  const command = opts.command ?? "verify";
  const from = config.regions.get(link.from.region);
  const to = config.regions.get(link.to.region);
  if (!from || !to) throw new RelayError(ErrorCodes.CONFIG_INVALID, `link ${link.name}: unknown region`);
  const logger = opts.logger ?? pino({ level: "silent" });
  const connect = { logger, firstConnectTimeoutMs: opts.connectTimeoutMs ?? 15_000 };
  const [source, dest] = await Promise.allSettled([
    connectRegion(from, { ...connect, name: `jetstream-relay/${command}/${link.name}/source` }),
    connectRegion(to, { ...connect, name: `jetstream-relay/${command}/${link.name}/destination` }),
  ]);
  try {
    if (source.status === "rejected") throw source.reason;
    if (dest.status === "rejected") throw dest.reason;
    return await fn({
      source: {
        nc: source.value,
        region: from.name,
        stream: link.from.stream,
        ...(from.domain ? { domain: from.domain } : {}),
      },
      dest: {
        nc: dest.value,
        region: to.name,
        stream: link.to.stream,
        ...(to.domain ? { domain: to.domain } : {}),
      },
    });
  } finally {
    await Promise.all([source, dest].map((s) => (s.status === "fulfilled" ? s.value.close() : undefined)));
  }
}

/**
 * The check itself over two open connections: the source's stream info (its incarnation, which
 * destination ids are read under, and where the examined range starts), the dead-letter stream, the
 * destination (ids, counts, versions, order), then the source (each message classified).
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
  const sinceMs = opts.since?.getTime();
  const sourceStartSeq = await startSeqOf(sides.source, sourceInfo, sinceMs);
  const presenceFromMs = sinceMs === undefined ? undefined : sinceMs - (opts.clockSlackMs ?? 60_000);
  const idle = opts.idleTimeoutMs ? { idleTimeoutMs: opts.idleTimeoutMs } : {};
  const deadLetter = await findDeadLetter(link, sides.dest);
  const v = new Verifier(link, links, opts, {
    incarnation: incarnationOf(sourceInfo),
    sourceStartSeq,
    presenceFromMs,
    deadLetter: deadLetter.source,
  });
  const phase = (what: string, side: StreamSide, read: ReadOptions, onMessage: (m: JsMsg) => void) =>
    withProgress(opts, `verify ${link.name}: ${what} ${side.region}/${side.stream}`, side, read, onMessage);

  if (deadLetter.side) {
    try {
      await phase(
        "dead letters",
        deadLetter.side,
        { filterSubject: deadLetter.source.subject, startMs: presenceFromMs, ...idle },
        (m) => v.onDeadLetter(m),
      );
    } catch (err) {
      // Records read before the failure still count; the rest cannot be confirmed.
      v.deadLetterUnreadable(toRelayError(err).message);
    }
  }
  // With guard.versions the destination is read from its start even with --since: the versions the guard
  // held before the window decide what is superseded (earlier messages only feed those).
  const destFromMs = link.guard?.versions ? undefined : presenceFromMs;
  const destRead = await phase("destination", sides.dest, { startMs: destFromMs, ...idle }, (m) =>
    v.onDest(m),
  );
  const sourceRead = await phase(
    "source",
    sides.source,
    {
      info: sourceInfo,
      startSeq: sourceStartSeq,
      ...(link.from.filterSubject ? { filterSubject: link.from.filterSubject } : {}),
      ...idle,
    },
    (m) => v.onSource(m),
  );
  return v.report(sourceRead, destRead, Date.now() - started);
}

/** One read, with a progress line (total: the read's pending count) when `opts.progress` is set. */
export async function withProgress(
  opts: Pick<VerifyOptions, "progress">,
  label: string,
  side: StreamSide,
  read: ReadOptions,
  onMessage: (m: JsMsg) => void,
): Promise<ReadResult> {
  if (!opts.progress) return readStream(side, read, onMessage);
  const progress = new Progress({ label, stream: opts.progress });
  let total: number | undefined;
  let done = 0;
  try {
    return await readStream(
      side,
      {
        ...read,
        onTotal: (n) => {
          total = n;
          progress.update(done, total);
        },
      },
      (m) => {
        onMessage(m);
        progress.update(++done, total);
      },
    );
  } finally {
    progress.finish();
  }
}

/**
 * Where the link's dead-letter records are: the stream of the destination region capturing the
 * dead-letter subject. `side` is set when it is to be read on its own (not when it is the
 * destination stream itself, whose read picks them up).
 */
async function findDeadLetter(
  link: LinkConfig,
  dest: StreamSide,
): Promise<{ readonly source: DeadLetterSource; readonly side?: StreamSide }> {
  const policy = link.badMessage;
  if (policy.action === "halt") return { source: { status: "halt" } };
  const subject = policy.subject;
  let names: string[];
  try {
    names = await streamsCapturing(dest, subject);
  } catch (err) {
    return { source: { status: "unreadable", subject, detail: toRelayError(err).message } };
  }
  const stream = names[0];
  if (stream === undefined) return { source: { status: "no-stream", subject } };
  const source: DeadLetterSource = { status: "read", subject, stream };
  return stream === dest.stream ? { source } : { source, side: { ...dest, stream } };
}
