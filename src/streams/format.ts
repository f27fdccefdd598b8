/**
 * Text and JSON output of `streams plan|apply`: per region, one entry per stream (status, kind, name,
 * links), what exists, and one line per change with what stops it.
 *
 *   region b: 127.0.0.1:4222 (nats-server 2.9.10, single server)
 *     update   destination   ORDERS  (links a-to-b)
 *              exists: subjects orders.>, limits retention, file, duplicate window 10s, ...
 *              subjects          orders.> → orders.>, us.> (+ us.>)
 *              duplicate window  10s → 2m, the replay horizon of link a-to-b
 */
import type {
  Change,
  ItemResult,
  ItemStatus,
  Outcome,
  PlanItem,
  RegionPlan,
  RegionResult,
  StreamsPlan,
} from "./types.js";

export interface HintContext {
  /** The config path, for the commands printed as hints. */
  readonly config: string;
  readonly region?: string;
}

const STATUS_WIDTH = 8;
const KIND_WIDTH = 13;
const FIELD_WIDTH = 17;
const INDENT = " ".repeat(2 + STATUS_WIDTH + 1);

function regionHeader(r: RegionPlan): string {
  if (r.error !== undefined) return `region ${r.region}: error: ${r.error}`;
  const version = r.serverVersion ? `nats-server ${r.serverVersion}` : "nats-server (version unknown)";
  return `region ${r.region}: ${r.server ?? "?"} (${version}, ${r.clustered ? "clustered" : "single server"})`;
}

function itemHeader(status: string, item: PlanItem): string {
  const links = item.links.length > 0 ? `  (links ${item.links.join(", ")})` : "";
  return `  ${status.padEnd(STATUS_WIDTH)} ${item.kind.padEnd(KIND_WIDTH)} ${item.name}${links}`;
}

/**
 * `[needs --force]`, `[blocked]`, `[kept: …]` for a change that is not made; for one that is, `madeMark`
 * (`[done]` after apply; in a plan, `[apply makes it]` when other changes of the stream are not made).
 */
function mark(c: Change, made: boolean, force: boolean, madeMark: string): string {
  if (made) return madeMark ? `  [${madeMark}]` : "";
  if (c.rule === "impossible") return "  [blocked]";
  if (c.rule === "force" && !c.required) return force ? "  [not made]" : "  [kept: --force to apply]";
  if (c.rule === "force") return force ? "  [not made]" : "  [needs --force]";
  return "  [not made]";
}

function changeLines(c: Change, made: boolean, force: boolean, madeMark = ""): string[] {
  // A create's "stream: create" says nothing the header does not.
  if (c.field === "stream" && c.to === "create" && c.rule === "safe") return [];
  const value = c.from !== undefined ? `${c.from} → ${c.to}` : c.to;
  const out = [`${INDENT}${c.field.padEnd(FIELD_WIDTH)} ${value}${mark(c, made, force, madeMark)}`];
  if (!made && c.reason) out.push(`${INDENT}${" ".repeat(FIELD_WIDTH)} ${c.reason}`);
  return out;
}

function planMade(c: Change, force: boolean): boolean {
  return c.rule === "safe" || (c.rule === "force" && force);
}

const PLAN_WORDS: Record<ItemStatus, string> = {
  create: "to create",
  update: "to update",
  ok: "ok",
  refused: "refused",
  blocked: "blocked",
  failed: "failed",
  note: "note",
};

function countBy<T extends string>(values: readonly T[]): Map<T, number> {
  const m = new Map<T, number>();
  for (const v of values) m.set(v, (m.get(v) ?? 0) + 1);
  return m;
}

function command(ctx: HintContext, force: boolean): string {
  const region = ctx.region !== undefined ? ` --region ${ctx.region}` : "";
  return `jetstream-relay streams apply --config ${ctx.config}${region}${force ? " --force" : ""}`;
}

export function planSummary(plan: StreamsPlan): Record<string, number> {
  const items = plan.regions.flatMap((r) => r.items.filter((i) => i.status !== "note"));
  const counts = countBy(items.map((i) => i.status));
  const out: Record<string, number> = {};
  for (const s of ["create", "update", "ok", "refused", "blocked", "failed"] as const)
    out[s] = counts.get(s) ?? 0;
  out["regionErrors"] = plan.regions.filter((r) => r.error !== undefined).length;
  return out;
}

export function formatPlan(plan: StreamsPlan, ctx: HintContext): string {
  const out: string[] = [];
  for (const r of plan.regions) {
    out.push(regionHeader(r));
    if (r.error === undefined && r.items.length === 0)
      out.push(`  no link has its destination in ${r.region}: nothing to provision`);
    for (const item of r.items) {
      out.push(itemHeader(item.status, item), `${INDENT}${item.detail}`, ...(item.notes ?? []).map((n) => `${INDENT}${n}`));
      const partial = item.status === "refused" || item.status === "blocked";
      for (const c of item.changes)
        out.push(...changeLines(c, planMade(c, plan.force), plan.force, partial ? "apply makes it" : ""));
    }
    out.push("");
  }
  const s = planSummary(plan);
  const parts = (["create", "update", "refused", "blocked", "failed", "ok"] as const).map(
    (k) => `${s[k] ?? 0} ${PLAN_WORDS[k]}`,
  );
  const errors = s["regionErrors"] ? `, ${s["regionErrors"]} region(s) not reachable` : "";
  out.push(`plan: ${parts.join(", ")}${errors}${plan.force ? " (with --force)" : ""}`);
  // Refused and blocked streams may still have changes apply makes.
  const work = plan.regions.some((r) =>
    r.items.some((i) => i.status !== "failed" && i.changes.some((c) => planMade(c, plan.force))),
  );
  if (work) out.push(`apply it: ${command(ctx, plan.force)}`);
  else if ((s["refused"] ?? 0) + (s["blocked"] ?? 0) + (s["failed"] ?? 0) + (s["regionErrors"] ?? 0) === 0)
    out.push("nothing to do: every stream the relay needs is in place");
  if ((s["refused"] ?? 0) > 0 && !plan.force)
    out.push(`refused changes are made only with --force (read each reason first): ${command(ctx, true)}`);
  return out.join("\n");
}

export function applySummary(results: readonly RegionResult[]): Record<string, number> {
  const counts = countBy(
    results.flatMap((r) => r.results.filter((x) => x.outcome !== "note").map((x) => x.outcome)),
  );
  const out: Record<string, number> = {};
  for (const o of ["created", "updated", "ok", "refused", "blocked", "failed"] as const)
    out[o] = counts.get(o) ?? 0;
  out["regionErrors"] = results.filter((r) => r.region.error !== undefined).length;
  return out;
}

function resultLines(x: ItemResult, force: boolean): string[] {
  const out = [itemHeader(x.outcome, x.item), `${INDENT}${x.item.detail}`];
  for (const c of x.item.changes) out.push(...changeLines(c, x.applied.includes(c), force, "done"));
  if (x.replicas !== undefined) out.push(`${INDENT}${"replicas".padEnd(FIELD_WIDTH)} ${x.replicas}`);
  if (x.error !== undefined) {
    const links = x.item.links.length > 0 ? ` (links ${x.item.links.join(", ")})` : "";
    out.push(`${INDENT}error: region ${x.item.region}, ${x.item.kind} ${x.item.name}${links}: ${x.error}`);
  }
  return out;
}

export function formatApply(results: readonly RegionResult[], force: boolean, ctx: HintContext): string {
  const out: string[] = [];
  for (const r of results) {
    out.push(regionHeader(r.region));
    if (r.region.error === undefined && r.results.length === 0)
      out.push(`  no link has its destination in ${r.region.region}: nothing to provision`);
    for (const x of r.results) out.push(...resultLines(x, force));
    out.push("");
  }
  const s = applySummary(results);
  const words: [Outcome, string][] = [
    ["created", "created"],
    ["updated", "updated"],
    ["refused", "refused"],
    ["blocked", "blocked"],
    ["failed", "failed"],
    ["ok", "already in place"],
  ];
  const errors = s["regionErrors"] ? `, ${s["regionErrors"]} region(s) not reachable` : "";
  out.push(
    `apply: ${words.map(([k, w]) => `${s[k] ?? 0} ${w}`).join(", ")}${errors}${force ? " (with --force)" : ""}`,
  );
  if ((s["refused"] ?? 0) > 0 && !force)
    out.push(`refused changes are made only with --force (read each reason first): ${command(ctx, true)}`);
  if ((s["blocked"] ?? 0) > 0)
    out.push("blocked changes cannot be made by jetstream-relay: each says what to do instead");
  return out.join("\n");
}

/** The plan as JSON: every region with its items, and the counts. */
export function planJson(plan: StreamsPlan): unknown {
  return { command: "plan", force: plan.force, regions: plan.regions, summary: planSummary(plan) };
}

export function applyJson(results: readonly RegionResult[], force: boolean, exitCode: number): unknown {
  return {
    command: "apply",
    force,
    regions: results.map((r) => ({
      ...r.region,
      items: r.results.map((x) => ({
        ...x.item,
        outcome: x.outcome,
        applied: x.applied,
        skipped: x.skipped,
        ...(x.error !== undefined ? { error: x.error } : {}),
        ...(x.replicas !== undefined ? { replicas: x.replicas } : {}),
      })),
    })),
    summary: applySummary(results),
    exitCode,
  };
}
