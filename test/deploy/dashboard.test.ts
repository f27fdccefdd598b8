/**
 * deploy/grafana/relay-dashboard.json and the PromQL of deploy/prometheus/alerts.yml against the
 * metrics the relay really exports (createMetrics' registry): a renamed metric must break here,
 * not on an operator's empty panel. Dashboard queries are also parsed by promtool (CI installs
 * Debian's prometheus package; without promtool that test fails).
 */
import { promtool } from "../helpers/promtool.js";
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { LINK_STATES, createMetrics } from "../../src/observability/metrics.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const DASHBOARD = "deploy/grafana/relay-dashboard.json";
const ALERTS = "deploy/prometheus/alerts.yml";
const DS_UID = "${DS_PROMETHEUS}";

interface Target {
  expr?: string;
  refId?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: Target[];
  panels?: Panel[];
}
interface TemplateVar {
  name: string;
  type: string;
  query?: unknown;
  definition?: string;
  datasource?: { type?: string; uid?: string };
}
interface Dashboard {
  uid: string;
  title: string;
  panels: Panel[];
  templating: { list: TemplateVar[] };
}
interface Rule {
  record?: string;
  alert?: string;
  expr: string;
}

const dashboard = (): Dashboard => JSON.parse(readFileSync(join(ROOT, DASHBOARD), "utf8")) as Dashboard;
const rules = (): Rule[] =>
  (parse(readFileSync(join(ROOT, ALERTS), "utf8")) as { groups: { rules: Rule[] }[] }).groups.flatMap(
    (g) => g.rules,
  );

/** Every panel, rows' nested panels included. */
function allPanels(d: Dashboard): Panel[] {
  return d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
}

function queries(d: Dashboard): { panel: string; expr: string }[] {
  return allPanels(d).flatMap((p) =>
    (p.targets ?? []).flatMap((t) => (t.expr === undefined ? [] : [{ panel: p.title, expr: t.expr }])),
  );
}

/** Series names the relay exports, as Prometheus stores them, plus Prometheus's own `up`. */
async function exportedSeries(): Promise<Set<string>> {
  const { registry } = createMetrics();
  const names = new Set<string>(["up"]);
  for (const m of await registry.getMetricsAsJSON()) {
    const type = String(m.type);
    if (type === "histogram") {
      for (const suffix of ["_bucket", "_sum", "_count"]) names.add(m.name + suffix);
    } else if (type === "summary") {
      for (const suffix of ["", "_sum", "_count"]) names.add(m.name + suffix);
    } else {
      names.add(m.name);
    }
  }
  return names;
}

const NOT_METRICS = new Set([
  // aggregation operators (may be followed by `by (...)` rather than a parenthesis)
  "sum",
  "min",
  "max",
  "avg",
  "group",
  "stddev",
  "stdvar",
  "count",
  "count_values",
  "bottomk",
  "topk",
  "quantile",
  "limitk",
  "limit_ratio",
  // keywords and binary operators
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "offset",
  "and",
  "or",
  "unless",
  "atan2",
  "inf",
  "nan",
]);

/**
 * Metric names in a PromQL expression (Grafana variables allowed): strings, label matchers, ranges,
 * label lists and offsets are removed, numbers skipped, and a word followed by "(" is a function.
 */
function metricNames(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "$1 ")
    .replace(/\boffset\s+-?[0-9a-z$_]+/g, " ");
  const names = new Set<string>();
  for (const m of s.matchAll(/(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_:][A-Za-z0-9_:]*)/g)) {
    const word = m[2];
    if (word === undefined) continue;
    const after = s.slice((m.index ?? 0) + word.length);
    if (/^\s*\(/.test(after)) continue; // a function call, or an aggregation without `by`
    if (NOT_METRICS.has(word.toLowerCase())) continue;
    names.add(word);
  }
  return [...names];
}

/** Grafana variables replaced by values PromQL accepts. */
function withoutGrafanaVariables(expr: string): string {
  return expr
    .replace(/\$__rate_interval|\$__interval|\$__range/g, "5m")
    .replace(/\$\{?link\}?/g, ".*")
    .replace(/\$\{?DS_PROMETHEUS\}?/g, "prometheus");
}

test("metricNames finds metrics and only metrics", () => {
  assert.deepEqual(
    metricNames(
      'histogram_quantile(0.99, sum by (link, le) (rate(relay_replay_age_seconds_bucket{link=~"$link"}[$__rate_interval]))) > 1e3',
    ),
    ["relay_replay_age_seconds_bucket"],
  );
  assert.deepEqual(
    metricNames(
      "(sum by (link) (rate(relay_corrections_total[1d] offset 1h)) or 0 * sum(rate(relay_messages_total[5m]))) / on (link) group_left () relay:x:y",
    ),
    ["relay_corrections_total", "relay_messages_total", "relay:x:y"],
  );
  assert.deepEqual(metricNames('up{job="jetstream-relay"} == 0 or absent(up{job="jetstream-relay"})'), [
    "up",
  ]);
});

test("every metric in every dashboard query and alert rule is one the relay exports", async () => {
  const exported = await exportedSeries();
  const recorded = new Set(rules().flatMap((r) => (r.record === undefined ? [] : [r.record])));
  const uses = [
    ...queries(dashboard()).map((q) => ({ where: `dashboard panel "${q.panel}"`, expr: q.expr })),
    ...rules().map((r) => ({ where: `${ALERTS} ${r.alert ?? r.record}`, expr: r.expr })),
  ];
  assert.ok(uses.length > 20, "found suspiciously few queries");
  const unknown: string[] = [];
  for (const { where, expr } of uses) {
    const names = metricNames(expr);
    assert.ok(names.length > 0, `${where}: no metric found in ${expr}`);
    for (const name of names) {
      const ok = name.includes(":") ? recorded.has(name) : exported.has(name);
      if (!ok) unknown.push(`${where}: ${name}`);
    }
  }
  assert.deepEqual(unknown, [], `unknown metrics (exported: ${[...exported].sort().join(", ")})`);
});

test("the link variable lists links from relay_messages_total; the datasource is the DS_PROMETHEUS variable", async () => {
  const d = dashboard();
  const vars = new Map(d.templating.list.map((v) => [v.name, v]));
  const ds = vars.get("DS_PROMETHEUS");
  assert.equal(ds?.type, "datasource");
  assert.equal(ds?.query, "prometheus");
  const link = vars.get("link");
  assert.equal(link?.type, "query");
  const q =
    typeof link?.query === "string" ? link.query : (link?.query as { query?: string } | undefined)?.query;
  assert.equal(q, "label_values(relay_messages_total, link)");
  assert.equal(link?.definition, "label_values(relay_messages_total, link)");
  assert.deepEqual(link?.datasource, { type: "prometheus", uid: DS_UID });
  assert.ok((await exportedSeries()).has("relay_messages_total"));

  for (const p of allPanels(d).filter((p) => p.type !== "row")) {
    assert.deepEqual(p.datasource, { type: "prometheus", uid: DS_UID }, `panel "${p.title}": datasource`);
    assert.ok((p.targets ?? []).length > 0, `panel "${p.title}" has no query`);
    for (const t of p.targets ?? []) {
      assert.deepEqual(
        t.datasource,
        { type: "prometheus", uid: DS_UID },
        `panel "${p.title}" ${t.refId}: datasource`,
      );
      assert.ok(
        t.expr?.includes("relay_") || t.expr?.includes("up"),
        `panel "${p.title}" ${t.refId}: no relay metric`,
      );
    }
  }
});

test("the dashboard has the panels operators need, laid out without overlaps", () => {
  const d = dashboard();
  assert.equal(d.uid, "jetstream-relay");
  const panels = allPanels(d);
  const ids = panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, "panel ids must be unique");

  const byMetric = (metric: string, type?: string) =>
    panels.filter(
      (p) =>
        (type === undefined || p.type === type) && (p.targets ?? []).some((t) => t.expr?.includes(metric)),
    );
  const need: [string, string, string?][] = [
    ["throughput by outcome", "relay_messages_total", "timeseries"],
    ["correction rate", "relay_corrections_total", "timeseries"],
    ["replay-age heatmap", "relay_replay_age_seconds_bucket", "heatmap"],
    ["replay-age quantiles", "relay_replay_age_seconds_bucket", "timeseries"],
    ["backlog age", "relay_backlog_age_seconds", "timeseries"],
    ["backlog messages", "relay_backlog_messages", "timeseries"],
    ["link state timeline", "relay_link_state", "state-timeline"],
    ["guard latency", "relay_guard_duration_seconds_bucket", "timeseries"],
    ["errors by code", "relay_errors_total", "timeseries"],
    ["recoveries", "relay_recoveries_total", "timeseries"],
    ["link owner per relay", "relay_link_owner", "state-timeline"],
    ["group members", "relay_group_members", "timeseries"],
    ["lease transitions", "relay_lease_transitions_total", "timeseries"],
  ];
  for (const [what, metric, type] of need) {
    assert.ok(byMetric(metric, type).length > 0, `no ${type} panel for ${what} (${metric})`);
  }
  const outcome = byMetric("relay_messages_total", "timeseries").some((p) =>
    (p.targets ?? []).some((t) => /by \(link, outcome\)/.test(t.expr ?? "")),
  );
  assert.ok(outcome, "throughput must be broken down by link and outcome");
  const quantiles = byMetric("relay_replay_age_seconds_bucket", "timeseries").flatMap((p) => p.targets ?? []);
  assert.ok(
    quantiles.some((t) => t.expr?.includes("histogram_quantile(0.5,")),
    "replay age p50",
  );
  assert.ok(
    quantiles.some((t) => t.expr?.includes("histogram_quantile(0.99,")),
    "replay age p99",
  );
  const errors = byMetric("relay_errors_total", "timeseries").flatMap((p) => p.targets ?? []);
  assert.ok(
    errors.some((t) => /by \(link, code\)/.test(t.expr ?? "")),
    "errors must be broken down by code",
  );

  // The group row: owners per link and relay, transitions by reason.
  const owner = byMetric("relay_link_owner", "state-timeline").flatMap((p) => p.targets ?? []);
  assert.ok(
    owner.some((t) => /by \(link, instance\)/.test(t.expr ?? "")),
    "link owner must be broken down by link and instance",
  );
  const transitions = byMetric("relay_lease_transitions_total", "timeseries").flatMap((p) => p.targets ?? []);
  assert.ok(
    transitions.some((t) => /by \([^)]*\breason\b[^)]*\)/.test(t.expr ?? "")),
    "lease transitions must be broken down by reason",
  );
  const group = d.panels.find((p) => p.type === "row" && p.title === "Group");
  assert.ok(group, 'a row "Group"');

  // Every link state has a value mapping on the state timeline.
  const timeline = byMetric("relay_link_state", "state-timeline")[0] as unknown as {
    fieldConfig: { defaults: { mappings: { options: Record<string, { text: string }> }[] } };
  };
  const texts = timeline.fieldConfig.defaults.mappings.flatMap((m) =>
    Object.values(m.options).map((o) => o.text),
  );
  for (const state of LINK_STATES) {
    assert.ok(texts.includes(state), `state timeline: no mapping for ${state}`);
  }

  // Grid: inside 24 columns, no two panels overlapping.
  const top = d.panels;
  for (const p of top)
    assert.ok(p.gridPos.x >= 0 && p.gridPos.x + p.gridPos.w <= 24, `panel "${p.title}" is outside the grid`);
  for (let i = 0; i < top.length; i++) {
    for (let j = i + 1; j < top.length; j++) {
      const a = top[i]?.gridPos;
      const b = top[j]?.gridPos;
      if (!a || !b) continue;
      const overlap = a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
      assert.ok(!overlap, `panels "${top[i]?.title}" and "${top[j]?.title}" overlap`);
    }
  }
});

test("promtool parses every dashboard query", () => {
  const dir = mkdtempSync(join(tmpdir(), "relay-dashboard-"));
  try {
    const qs = queries(dashboard());
    const file = {
      groups: [
        {
          name: "dashboard-queries",
          rules: qs.map((q, i) => ({
            record: `dashboard:query_${i}:check`,
            expr: withoutGrafanaVariables(q.expr),
          })),
        },
      ],
    };
    writeFileSync(join(dir, "queries.yml"), stringify(file));
    const out = promtool(["check", "rules", "queries.yml"], dir);
    assert.match(out, new RegExp(`SUCCESS: ${qs.length} rules found`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
