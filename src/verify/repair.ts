import { randomUUID } from "node:crypto";
import { pino } from "pino";
import type { Logger } from "pino";
import { putBack } from "../audit/put-back.js";
import { leaseKey } from "../config/lease-key.js";
import type { RelayConfig, LinkConfig } from "../config/types.js";
import { createGuard } from "../guard/create-guard.js";
import type { Guard } from "../guard/types.js";
import { incarnationOf } from "../link/derived-ids.js";
import { readStreamInfo } from "../nats/stream-reader.js";
import type { ProgressStream } from "../observability/progress.js";
import type { RepairItem, RepairResult } from "./repair-report.js";
import { findLink, verifySides, withLinkSides } from "./verify.js";

export type { RepairItem, RepairOutcome, RepairResult } from "./repair-report.js";
export { formatRepair, repairExitCode } from "./repair-report.js";

/**
 * `jetstream-relay repair`: verify the link (verify.ts, the same classification), then put back (audit/put-back.ts) into the
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
        const incarnation = incarnationOf(await readStreamInfo(sides.source));
        const commitError = await putBack(link, sides, planned, guard, { ...(opts.batch === undefined ? {} : { batch: opts.batch }), incarnation });
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

