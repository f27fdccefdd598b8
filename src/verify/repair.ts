import { randomUUID } from "node:crypto";
import { jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamManager, StoredMsg } from "@nats-io/jetstream";
import { pino } from "pino";
import type { Logger } from "pino";
import { leaseKey } from "../config/lease-key.js";
import { linkUnits } from "../config/partitions.js";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { toRelayError } from "../errors.js";
import { createGuard } from "../guard/create-guard.js";
import type { ClaimResult, Guard } from "../guard/types.js";
import { buildHeaders, entryContext } from "../link/entry.js";
import type { EntryContext } from "../link/entry.js";
import { identify, transformSubject } from "../link/identity.js";
import type { MessageIdentity } from "../link/identity.js";
import type { Delivery } from "../nats/delivery.js";
import type { HeaderBlock } from "../nats/header-block.js";
import { JetStreamPublisher } from "../nats/publisher.js";
import type { PubAck } from "../nats/publisher.js";
import type { ProgressStream } from "../observability/progress.js";
import { RelayHeaders, parseNanos } from "../protocol/headers.js";
import { incarnationOf } from "./derived-ids.js";
import type { RepairItem, RepairOutcome, RepairResult } from "./repair-report.js";
import { readStreamInfo } from "./stream-reader.js";
import type { StreamSide } from "./stream-reader.js";
import { findLink, verifySides, withLinkSides } from "./verify.js";

export type { RepairItem, RepairOutcome, RepairResult } from "./repair-report.js";
export { formatRepair, repairExitCode } from "./repair-report.js";

/**
 * `jetstream-relay repair`: verify the link (verify.ts, the same classification), then publish into the
 * destination exactly the source messages verify found missing, as the link would have written them
 * (identity and headers from link/identity.ts and link/entry.ts) plus `Relay-Repair: true`, through the
 * link's guard (claim → publish → commit, as the pipeline does, with the claim's repair rule: see
 * ClaimOptions.repair) and with `Nats-Msg-Id`, so broker dedup applies too. Appending cannot restore
 * source order: the repaired messages land after later ones.
 */
export interface RepairOptions {
  /** Only missing source messages at/after this source sequence. */
  readonly fromSeq?: number;
  /** Only missing source messages at/before this source sequence. */
  readonly toSeq?: number;
  /** Verify and print the plan; publish nothing and leave the guard alone. */
  readonly dryRun?: boolean;
  readonly logger?: Logger;
  readonly connectTimeoutMs?: number;
  /** Progress lines of the verify phases (see VerifyOptions.progress). */
  readonly progress?: ProgressStream;
  /** Messages fetched, claimed and published together (default: the link's batchSize, at most 256). */
  readonly batch?: number;
}

/** One missing message on its way: what the source holds and what goes to the destination. */
interface Candidate {
  readonly item: RepairItem;
  readonly identity: MessageIdentity;
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: HeaderBlock;
  token?: string | undefined;
}

export async function repairLink(
  config: RelayConfig,
  linkName: string,
  opts: RepairOptions = {},
): Promise<RepairResult> {
  const started = Date.now();
  const link = findLink(config, linkName, "repair");
  const logger = opts.logger ?? pino({ level: "silent" });
  return withLinkSides(
    config,
    link,
    { logger, command: "repair", ...connectTimeout(opts) },
    async (sides) => {
      const missing: RepairItem[] = [];
      const report = await verifySides(link, config.links, sides, {
        logger,
        ...(opts.progress ? { progress: opts.progress } : {}),
        onMissing: (m) => missing.push({ id: m.id, sourceSeq: m.sourceSeq }),
      });
      const inRange = (i: RepairItem) =>
        (opts.fromSeq === undefined || i.sourceSeq >= opts.fromSeq) &&
        (opts.toSeq === undefined || i.sourceSeq <= opts.toSeq);
      const planned = missing.filter(inRange);
      const store = link.guard?.store.kind;
      const result = (guardCommitError?: string): RepairResult => ({
        link: link.name,
        source: { region: link.from.region, stream: link.from.stream },
        destination: { region: link.to.region, stream: link.to.stream },
        guard: store === undefined ? "none" : store === "memory" ? "memory" : "redis",
        versions: link.guard?.versions !== undefined,
        ...(opts.fromSeq === undefined ? {} : { fromSeq: opts.fromSeq }),
        ...(opts.toSeq === undefined ? {} : { toSeq: opts.toSeq }),
        missing: report.missing.count,
        outsideRange: missing.length - planned.length,
        dryRun: opts.dryRun === true,
        items: planned,
        ...(guardCommitError === undefined ? {} : { guardCommitError }),
        elapsedMs: Date.now() - started,
      });
      if (opts.dryRun || planned.length === 0) return result();
      // The memory guard lives in the relay's own process: repair cannot ask it, so it goes without.
      const guard = store === "redis" ? await openGuard(link, logger) : undefined;
      try {
        const commitError = await repairMessages(link, sides, planned, guard, opts);
        return result(commitError);
      } finally {
        await guard?.stop().catch(() => undefined);
      }
    },
  );
}

function connectTimeout(opts: RepairOptions): { connectTimeoutMs?: number } {
  return opts.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: opts.connectTimeoutMs };
}

/**
 * The link's Redis guard, as the relay builds it (same scope and fence), started, under a writer name
 * of its own (GuardDeps.writer): the link's live relay is then another writer of the scope, whose
 * claims repair sees and waits for (lua.ts WRITERS), and whose word repair leaves alone. Unique per
 * run, so two runs see each other too.
 */
async function openGuard(link: LinkConfig, logger: Logger): Promise<Guard> {
  const fence = leaseKey(link);
  const guard = await createGuard(link.guard, {
    logger: logger.child({ component: "guard", link: link.name }),
    scope: `${link.to.region}:${link.to.stream}`,
    linkName: link.name,
    fence,
    writer: `${fence} repair ${randomUUID()}`,
  });
  await guard.start();
  return guard;
}

/**
 * Batch by batch, in source order: fetch each message from the source, claim the batch in the guard,
 * publish what it lets through (pipelined, in order), then commit what the destination stored. Sets
 * each item's outcome; returns the error of a guard commit that failed (the messages are stored).
 */
async function repairMessages(
  link: LinkConfig,
  sides: { readonly source: StreamSide; readonly dest: StreamSide },
  items: readonly RepairItem[],
  guard: Guard | undefined,
  opts: RepairOptions,
): Promise<string | undefined> {
  const jsm = await managerOf(sides.source);
  const incarnation = incarnationOf(await readStreamInfo(sides.source));
  const contexts = new Map<string, EntryContext>();
  const units = link.partitions ? linkUnits(link) : [link];
  const contextOf = (subject: string): EntryContext => {
    // A partitioned link writes its partition's name into Relay-Link, as the partition's own link does.
    const token = link.partitions ? Number(subject.split(".")[link.partitions.token - 1]) : 0;
    const unit = units[token] ?? link;
    let ctx = contexts.get(unit.name);
    // Nats-TTL is not copied: a destination without allow_msg_ttl would refuse the message (10166).
    if (!ctx) contexts.set(unit.name, (ctx = entryContext(unit, { keepTtl: false })));
    return ctx;
  };
  const publisher = new JetStreamPublisher(sides.dest.nc, link.publishTimeoutMs);
  const size = opts.batch ?? Math.min(256, link.batchSize);
  let commitError: string | undefined;
  try {
    for (let i = 0; i < items.length; i += size) {
      const batch = items.slice(i, i + size);
      const fetched = await Promise.all(
        batch.map((item) => fetchCandidate(jsm, link, item, incarnation, contextOf)),
      );
      const candidates = fetched.filter((c): c is Candidate => c !== undefined);
      let claimed: Candidate[];
      try {
        claimed = guard ? await claim(guard, candidates) : candidates;
      } catch (err) {
        // Nothing of this batch was published; the rest is not tried (the guard is needed for it).
        const detail = `guard claim failed: ${toRelayError(err).message}`;
        for (const item of items.slice(i)) item.outcome ??= fail(item, detail);
        break;
      }
      const stored = await publishInOrder(publisher, link, claimed);
      if (guard) {
        const notStored = claimed.filter((c) => c.item.outcome !== "repaired" && c.token !== undefined);
        await guard.release(notStored.map(claimedOf)).catch(() => undefined); // else they expire
        try {
          await guard.commit(stored.map(claimedOf));
        } catch (err) {
          commitError ??= toRelayError(err).message;
        }
      }
    }
  } finally {
    publisher.close();
  }
  return commitError;
}

function fail(item: RepairItem, detail: string): RepairOutcome {
  item.detail = detail;
  return (item.outcome = "failed");
}

function managerOf(side: StreamSide): Promise<JetStreamManager> {
  return jetstreamManager(
    side.nc,
    side.domain ? { domain: side.domain, checkAPI: false } : { checkAPI: false },
  );
}

/**
 * The source message of `item`, with the identity, subject and headers the link gives it, and
 * `Relay-Repair: true`. Undefined (with the item's outcome set) when it is gone or no longer missing.
 */
async function fetchCandidate(
  jsm: JetStreamManager,
  link: LinkConfig,
  item: RepairItem,
  incarnation: number | undefined,
  contextOf: (subject: string) => EntryContext,
): Promise<Candidate | undefined> {
  let sm: StoredMsg | null;
  try {
    sm = await jsm.streams.getMessage(link.from.stream, { seq: item.sourceSeq });
  } catch (err) {
    fail(item, `reading source seq ${item.sourceSeq}: ${toRelayError(err).message}`);
    return undefined;
  }
  if (!sm) {
    item.outcome = "gone";
    return undefined;
  }
  const delivery: Delivery = {
    subject: sm.subject,
    reply: "",
    streamSequence: sm.seq,
    deliveryCount: 1,
    consumerSequence: 0,
    pending: 0,
    timestampNanos: (parseNanos(sm.timestamp) ?? 0n).toString(),
    headers: sm.header,
    data: sm.data,
  };
  const r = identify({ subject: sm.subject, headers: sm.header, streamSequence: sm.seq }, link, incarnation);
  if (!r.ok) {
    fail(item, `bad under the current config: ${r.reason}`);
    return undefined;
  }
  if (r.identity.id !== item.id) {
    fail(item, `source seq ${item.sourceSeq} now has id ${r.identity.id}`);
    return undefined;
  }
  const { entity, version } = r.identity;
  if (entity !== undefined) item.entity = entity;
  if (version !== undefined) item.version = version;
  const headers = buildHeaders(delivery, r.identity, contextOf(sm.subject));
  headers.set(RelayHeaders.Repair, "true");
  return { item, identity: r.identity, subject: transformSubject(sm.subject, link), data: sm.data, headers };
}

/** One claim call for the batch, repair rule on; returns what the guard lets through, in order. */
async function claim(guard: Guard, candidates: readonly Candidate[]): Promise<Candidate[]> {
  if (candidates.length === 0) return [];
  const results = await guard.claim(
    candidates.map((c) => c.identity),
    undefined,
    { repair: true },
  );
  const through: Candidate[] = [];
  candidates.forEach((c, i) => {
    const r: ClaimResult = results[i] ?? { decision: "in-flight" };
    if (r.storedVersion !== undefined) c.item.storedVersion = r.storedVersion;
    switch (r.decision) {
      case "relay":
        c.token = r.token;
        through.push(c);
        return;
      case "stale":
        c.item.outcome = "stale";
        return;
      case "duplicate":
        c.item.outcome = "duplicate";
        c.item.detail = "the guard holds it as applied";
        return;
      case "in-flight":
        c.item.outcome = "in-flight";
        return;
    }
  });
  return through;
}

/**
 * Publishes the candidates in order on one connection (JetStream stores them in that order) and waits
 * for every PubAck. Returns those the destination stored.
 */
async function publishInOrder(
  publisher: JetStreamPublisher,
  link: LinkConfig,
  candidates: readonly Candidate[],
): Promise<Candidate[]> {
  const acks = await Promise.all(
    candidates.map(
      (c) =>
        new Promise<{ err: string | undefined; ack: PubAck | null }>((resolve) => {
          publisher.publish(c.subject, c.data, c.headers.asMsgHdrs(), (err, ack) =>
            resolve({ err: err?.message, ack }),
          );
        }),
    ),
  );
  const stored: Candidate[] = [];
  candidates.forEach((c, i) => {
    const { err, ack } = acks[i] ?? { err: "no PubAck", ack: null };
    if (!ack) {
      fail(c.item, `publish failed: ${err ?? "no PubAck"}`);
    } else if (ack.stream !== link.to.stream) {
      fail(c.item, `stored by stream ${ack.stream} (seq ${ack.seq}), not by the link's ${link.to.stream}`);
    } else if (ack.duplicate) {
      c.item.outcome = "duplicate";
      c.item.detail = `the destination's duplicate window still holds the id (as seq ${ack.seq})`;
    } else {
      c.item.outcome = "repaired";
      c.item.destSeq = ack.seq;
      stored.push(c);
    }
  });
  return stored;
}

function claimedOf(c: Candidate) {
  const { id, entity, version } = c.identity;
  return {
    id,
    token: c.token ?? "",
    ...(entity !== undefined ? { entity } : {}),
    ...(version !== undefined ? { version } : {}),
  };
}
