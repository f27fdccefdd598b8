/**
 * docs/metrics.md, generated whole from the metrics a relay registers (src/observability/metrics.ts):
 * each metric's name, type, labels and help, grouped by area. The page's intro is written here.
 */
import { Registry } from "prom-client";
import { createMetrics } from "../../src/observability/metrics.js";
import { formatMarkdown, table } from "./markdown.js";

export const METRICS_DOC = "docs/metrics.md";

export interface MetricDoc {
  readonly name: string;
  readonly type: string;
  readonly labels: readonly string[];
  readonly help: string;
}

/** The areas of the page, in order; every metric must be in exactly one. */
export const METRIC_AREAS: readonly {
  readonly title: string;
  readonly about: string;
  readonly metrics: readonly string[];
}[] = [
  {
    title: "Messages",
    about: "What happened to each message a link took from its source.",
    metrics: [
      "relay_messages_total",
      "relay_corrections_total",
      "relay_stale_retries_total",
      "relay_replay_age_seconds",
      "relay_publish_duration_seconds",
      "relay_source_acks_total",
      "relay_reordered_total",
      "relay_headers_stripped_total",
      "relay_delete_markers_dropped_total",
      "relay_publish_backpressure_total",
      "relay_order_rejections_total",
      "relay_kv_conflicts_total",
      "relay_kv_superseded_total",
      "relay_id_collisions_total",
      "relay_gap_messages_total",
      "relay_source_skips_read_back_total",
      "relay_resyncs_total",
      "relay_resyncs_abandoned_total",
      "relay_errors_total",
    ],
  },
  {
    title: "Audit",
    about: "What each link's continuous audit of its own delivery found (docs/verify.md, The continuous audit).",
    metrics: [
      "relay_audit_checked_total",
      "relay_audit_missing_total",
      "relay_audit_extra_total",
      "relay_audit_reordered_total",
      "relay_audit_backwards_total",
      "relay_audit_expected_total",
      "relay_audit_repaired_total",
      "relay_audit_passes_total",
      "relay_audit_lag_seconds",
      "relay_audit_coverage_ratio",
    ],
  },
  {
    title: "Backlog, window and rate",
    about: "How far behind a link is, and what limits how fast it catches up.",
    metrics: [
      "relay_backlog_messages",
      "relay_backlog_age_seconds",
      "relay_source_clock_offset_seconds",
      "relay_pull_window_messages",
      "relay_pull_window_update_failures_total",
      "relay_pull_window_probes_total",
      "relay_link_checkpoints_total",
      "relay_cursor_placements_total",
      "relay_window_limit",
      "relay_source_rtt_seconds",
      "relay_inflight_bytes",
      "relay_link_max_rate",
      "relay_link_rate_capped_seconds_total",
    ],
  },
  {
    title: "Link state and health",
    about: "Each link's state, and the stalls, recoveries and destination changes it went through.",
    metrics: [
      "relay_link_state",
      "relay_link_up",
      "relay_link_paused",
      "relay_link_stalls_total",
      "relay_recoveries_total",
      "relay_recovery_seconds",
      "relay_destination_changes_total",
      "relay_lapsed_writes_discarded_total",
    ],
  },
  {
    title: "Guard",
    about: "The guard's store (Redis): its round trips, its claims and whether it can be relied on.",
    metrics: [
      "relay_guard_duration_seconds",
      "relay_claims_held_total",
      "relay_guard_buckets",
      "relay_guard_unsafe",
      "relay_guard_state_lost",
      "relay_guard_fenced",
    ],
  },
  {
    title: "Group and leases",
    about: "Which relay of a region's group owns each link, and the group's members.",
    metrics: [
      "relay_link_owner",
      "relay_lease_transitions_total",
      "relay_lease_holdoffs_total",
      "relay_group_members",
      "relay_group_evictions_total",
      "relay_group_session_ends_total",
      "relay_group_sessions_over_total",
      "relay_group_bucket_failures_total",
      "relay_group_settings_mismatch",
    ],
  },
  {
    title: "Connections and config",
    about: "The relay's NATS connections and the config it runs.",
    metrics: [
      "relay_connection_up",
      "relay_config_reloads_total",
      "relay_config_info",
      "relay_config_loaded_timestamp_seconds",
    ],
  },
];

interface RegisteredMetric {
  readonly labelNames?: readonly string[];
  get(): Promise<{ name: string; help: string; type: unknown }>;
}

/** Every metric createMetrics registers (without the process metrics), in registration order. */
export async function relayMetrics(): Promise<MetricDoc[]> {
  const registry = new Registry();
  createMetrics(registry, { defaultMetrics: false });
  return Promise.all(
    registry.getMetricsAsArray().map(async (metric) => {
      // prom-client's metrics and BucketHistogram both have these, though MetricObject types neither.
      const m = metric as unknown as RegisteredMetric;
      const { name, help, type } = await m.get();
      return { name, help, type: String(type), labels: [...(m.labelNames ?? [])] };
    }),
  );
}

const INTRO = `# Metrics reference

> Generated from the code (\`src/observability/metrics.ts\`) by \`npm run docs\`: do not edit this page
> by hand. A metric's help text is its meaning here; its area is set in \`scripts/docs/metrics-doc.ts\`.
> \`test/unit/docs-drift.test.ts\` fails when this page and the code differ.

Every relay serves its metrics at \`/metrics\` on [\`http.listen\`](config.md#http-log-shutdown), in the
Prometheus text format (with \`http.token\` and \`http.protectMetrics\`, only to requests that carry the
token). Each relay has a registry of its own. Every name starts with \`relay_\`, and labels are
low-cardinality only: a link's name (a partitioned link's partitions as \`<link>/p<i>\`), a region, and
a reason, kind or state from a fixed set, never a subject or a message id. A counter counts on the
relay that did the work: sum it over the relays of a group. Besides these, the relay exports Node.js's
process metrics (CPU, memory, event loop lag, garbage collection) under \`relay_process_\`.

The alerts and the dashboard built on them are in [operations.md](operations.md).`;

/** The page, from `metrics` (the relay's own by default). Throws when a metric is in no area or lacks help. */
export async function renderMetricsDoc(metrics?: readonly MetricDoc[]): Promise<string> {
  const all = metrics ?? (await relayMetrics());
  const byName = new Map(all.map((m) => [m.name, m]));
  const placed = new Set(METRIC_AREAS.flatMap((a) => a.metrics));
  const homeless = all.filter((m) => !placed.has(m.name)).map((m) => m.name);
  if (homeless.length > 0) {
    throw new Error(
      `metrics in no area of ${METRICS_DOC}: ${homeless.join(", ")} (add them to METRIC_AREAS in scripts/docs/metrics-doc.ts)`,
    );
  }
  const unknown = [...placed].filter((name) => !byName.has(name));
  if (unknown.length > 0) {
    throw new Error(
      `METRIC_AREAS in scripts/docs/metrics-doc.ts lists metrics that do not exist: ${unknown.join(", ")}`,
    );
  }
  const header = ["Metric", "Type", "Labels", "Meaning"];
  const sections = METRIC_AREAS.map((area) => {
    const rows = area.metrics.map((name) => {
      const m = byName.get(name);
      if (m === undefined) throw new Error(`no metric ${name}`);
      return [`\`${m.name}\``, m.type, m.labels.map((l) => `\`${l}\``).join(", "), m.help];
    });
    return `## ${area.title}\n\n${area.about}\n\n${table(header, rows)}`;
  });
  return formatMarkdown(`${INTRO}\n\n${sections.join("\n\n")}\n`, METRICS_DOC);
}
