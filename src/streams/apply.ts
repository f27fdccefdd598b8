/**
 * `streams apply`: carries out a plan, region by region, item by item. Creates missing streams and the
 * group bucket, adds subjects and raises duplicate windows; makes `--force` changes only when asked;
 * never deletes a stream and never touches a source stream. Only fields nats-server 2.9 knows are sent.
 */
import { RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { StreamConfig } from "@nats-io/jetstream";
import { nanos } from "@nats-io/nats-core";
import { openGroupBucket } from "../group/bucket.js";
import { readExisting } from "./inspect.js";
import { createWithReplicas } from "../nats/replicas.js";
import type { RegionSession } from "../nats/region-session.js";
import { bucketStreamName } from "./types.js";
import type { Change, ItemResult, Outcome, PlanItem, RegionResult, StreamsPlan } from "./types.js";

export interface ApplyOptions {
  readonly force: boolean;
  /** Timeout of one JetStream request (ms). Default 5 s. */
  readonly timeoutMs?: number;
  /** Called after each item with the items done and the items there are. */
  readonly onProgress?: (done: number, total: number) => void;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function applicable(c: Change, force: boolean): boolean {
  return c.rule === "safe" || (c.rule === "force" && force);
}

/** What is left after `applied`: blocked, refused, or `done`. */
function remaining(skipped: readonly Change[], done: Outcome): Outcome {
  if (skipped.some((c) => c.required && c.rule === "impossible")) return "blocked";
  if (skipped.some((c) => c.required)) return "refused";
  return done;
}

/** The stream configuration an update sends: only the fields whose changes are made. */
export function updateConfig(
  item: PlanItem,
  force: boolean,
): { config: Partial<StreamConfig>; applied: Change[] } {
  const u = item.update ?? {};
  const applied = item.changes.filter((c) => applicable(c, force));
  const config: Partial<StreamConfig> = {};
  const subjectChanges = applied.filter((c) => c.field === "subjects");
  if (subjectChanges.some((c) => c.rule === "force") && u.forcedSubjects)
    config.subjects = [...u.forcedSubjects];
  else if (subjectChanges.length > 0 && u.subjects) config.subjects = [...u.subjects];
  if (applied.some((c) => c.field === "duplicate window") && u.duplicateWindowMs !== undefined)
    config.duplicate_window = nanos(u.duplicateWindowMs);
  if (applied.some((c) => c.field === "max age") && u.maxAgeMs !== undefined)
    config.max_age = nanos(u.maxAgeMs);
  if (applied.some((c) => c.field === "retention") && u.retention) config.retention = RetentionPolicy.Limits;
  return { config, applied };
}

async function applyItem(
  item: PlanItem,
  session: RegionSession | undefined,
  opts: ApplyOptions,
): Promise<ItemResult> {
  const timeoutMs = opts.timeoutMs ?? 5_000;
  const skippedAll = { applied: [], skipped: item.changes };
  if (item.status === "note" || item.status === "failed")
    return { item, outcome: item.status, ...skippedAll };
  if (!session?.ok)
    return { item, outcome: "failed", ...skippedAll, error: `region ${item.region} is not connected` };
  const { jsm } = session;
  try {
    if (item.kind === "lease bucket") {
      if (item.status !== "create") return { item, outcome: "ok", ...skippedAll };
      await openGroupBucket({ nc: session.nc, domain: session.region.domain, bucket: item.name, timeoutMs });
      const after = await readExisting(jsm, bucketStreamName(item.name));
      return {
        item,
        outcome: "created",
        applied: item.changes,
        skipped: [],
        ...(after.kind === "found" ? { replicas: after.stream.replicas } : {}),
      };
    }
    if (item.create) {
      const target = item.create;
      const { replicas } = await createWithReplicas(session.clustered, (num_replicas) =>
        jsm.streams.add({
          name: item.name,
          subjects: [...target.subjects],
          retention: RetentionPolicy.Limits,
          storage: StorageType.File,
          num_replicas,
          ...(target.duplicateWindowMs !== undefined
            ? { duplicate_window: nanos(target.duplicateWindowMs) }
            : {}),
        }),
      );
      const applied = item.changes.filter((c) => c.rule === "safe");
      const skipped = item.changes.filter((c) => c.rule !== "safe");
      return { item, outcome: remaining(skipped, "created"), applied, skipped, replicas };
    }
    const { config, applied } = updateConfig(item, opts.force);
    const skipped = item.changes.filter((c) => !applied.includes(c));
    if (Object.keys(config).length === 0)
      return { item, outcome: remaining(skipped, "ok"), applied: [], skipped };
    await jsm.streams.update(item.name, config);
    return { item, outcome: remaining(skipped, "updated"), applied, skipped };
  } catch (err) {
    return { item, outcome: "failed", ...skippedAll, error: message(err) };
  }
}

/** Applies every region's items in order; a failure of one item does not stop the others. */
export async function applyPlan(
  plan: StreamsPlan,
  sessions: ReadonlyMap<string, RegionSession>,
  opts: ApplyOptions,
): Promise<RegionResult[]> {
  const total = plan.regions.reduce((n, r) => n + r.items.filter((i) => i.status !== "note").length, 0);
  let done = 0;
  opts.onProgress?.(done, total);
  const out: RegionResult[] = [];
  for (const region of plan.regions) {
    const results: ItemResult[] = [];
    for (const item of region.items) {
      results.push(await applyItem(item, sessions.get(region.region), opts));
      if (item.status !== "note") opts.onProgress?.(++done, total);
    }
    out.push({ region, results });
  }
  return out;
}

/** 0 when everything the relay needs is in place after apply; 1 when a region failed or an item is refused, blocked or failed. */
export function applyExitCode(results: readonly RegionResult[]): number {
  for (const r of results) {
    if (r.region.error !== undefined) return 1;
    if (r.results.some((x) => x.outcome === "refused" || x.outcome === "blocked" || x.outcome === "failed"))
      return 1;
  }
  return 0;
}
