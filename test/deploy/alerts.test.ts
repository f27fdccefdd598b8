/**
 * deploy/prometheus/alerts.yml: promtool's own checks and unit tests (alerts.test.yml), the
 * annotations every alert must carry, and the Kubernetes PrometheusRule staying identical to it.
 * The group alerts are checked against the deployment files: RelayGroupDegraded's labels exist on
 * every relay target, and its member count is the number of relays each region runs.
 *
 * promtool comes from Debian's `prometheus` package; CI installs it. Without it these tests fail
 * (they do not skip): a rule file nobody evaluated is not a tested rule file.
 */
import { promtool } from "../helpers/promtool.js";
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, parseAllDocuments } from "yaml";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const ALERTS = "deploy/prometheus/alerts.yml";
const ALERT_TESTS = "deploy/prometheus/alerts.test.yml";
const PROMETHEUS_CONFIG = "deploy/prometheus/prometheus.yml";
const PROMETHEUS_RULE = "deploy/kubernetes/prometheusrule.yaml";
const SERVICE_MONITOR = "deploy/kubernetes/servicemonitor.yaml";
/** The relay Deployments, one per region. */
const DEPLOYMENTS = readdirSync(join(ROOT, "deploy/kubernetes"))
  .filter((f) => /^deployment-.*\.ya?ml$/.test(f))
  .map((f) => `deploy/kubernetes/${f}`);
const COMPOSE = "docker-compose.yml";

const REQUIRED_ALERTS = [
  "RelayCorrectionRateHigh",
  "RelayCorrectionRateRising",
  "RelayReplayAgeHigh",
  "RelayBacklogAgeHigh",
  "RelayLinkNotLive",
  "RelayLinkNoOwner",
  "RelayLinkStalled",
  "RelayGapDetected",
  "RelayAuditFoundLoss",
  "RelayGuardPaused",
  "RelayGuardUnsafe",
  "RelayGuardStateLost",
  "RelayConfigReloadFailed",
  "RelayDown",
  "RelayPublishErrors",
  "RelayGroupDegraded",
  "RelayLeaseFlapping",
  "RelayLinkPausedLong",
];
const SEVERITIES = ["critical", "warning", "info"];

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleGroup {
  name: string;
  interval?: string;
  rules: Rule[];
}
interface AlertRuleTest {
  alertname: string;
  eval_time: string;
  exp_alerts?: unknown[] | null;
}
interface UnitTests {
  rule_files: string[];
  tests: { name?: string; alert_rule_test?: AlertRuleTest[] }[];
}

function readYaml<T>(rel: string): T {
  return parse(readFileSync(join(ROOT, rel), "utf8")) as T;
}

const groups = (): RuleGroup[] => readYaml<{ groups: RuleGroup[] }>(ALERTS).groups;
const alerts = (): Rule[] => groups().flatMap((g) => g.rules.filter((r) => r.alert !== undefined));

test("promtool check rules accepts alerts.yml", () => {
  const out = promtool(["check", "rules", ALERTS], ROOT);
  assert.match(out, /SUCCESS/);
});

test("promtool test rules: every case in alerts.test.yml passes", () => {
  const out = promtool(["test", "rules", ALERT_TESTS], ROOT);
  assert.match(out, /SUCCESS/);
});

test("promtool check config accepts the example prometheus.yml, which scrapes job jetstream-relay", () => {
  promtool(["check", "config", PROMETHEUS_CONFIG], ROOT);
  const config = readYaml<{ rule_files: string[]; scrape_configs: { job_name: string }[] }>(
    PROMETHEUS_CONFIG,
  );
  assert.ok(config.rule_files.includes("alerts.yml"), "prometheus.yml must load alerts.yml");
  assert.ok(
    config.scrape_configs.some((s) => s.job_name === "jetstream-relay"),
    'RelayDown matches up{job="jetstream-relay"}: the scrape job must have that name',
  );
});

test("one group jetstream-relay with every required alert, each with severity, summary and a one-line runbook", () => {
  const gs = groups();
  assert.deepEqual(
    gs.map((g) => g.name),
    ["jetstream-relay"],
  );
  const names = alerts().map((a) => a.alert);
  assert.deepEqual([...names].sort(), [...REQUIRED_ALERTS].sort());
  for (const a of alerts()) {
    const where = `alert ${a.alert}`;
    assert.ok(
      SEVERITIES.includes(a.labels?.severity ?? ""),
      `${where}: labels.severity must be one of ${SEVERITIES.join(", ")}`,
    );
    const summary = a.annotations?.summary ?? "";
    const runbook = a.annotations?.runbook ?? "";
    assert.ok(summary.trim().length > 10, `${where}: annotations.summary is missing`);
    assert.ok(runbook.trim().length > 20, `${where}: annotations.runbook is missing`);
    assert.ok(!runbook.trim().includes("\n"), `${where}: annotations.runbook must be one line`);
  }
});

test("the recording rule relay:correction_ratio:rate10m exists and every relay:* series an alert reads is recorded", () => {
  const rules = groups().flatMap((g) => g.rules);
  const recorded = new Set(rules.flatMap((r) => (r.record === undefined ? [] : [r.record])));
  assert.ok(recorded.has("relay:correction_ratio:rate10m"));
  const rulesBefore = new Set<string>();
  for (const r of rules) {
    // Rules of a group run in order: a rule reading a recorded series must come after its rule.
    for (const used of r.expr.match(/\b[a-z_]+:[a-z0-9_:]+/g) ?? []) {
      assert.ok(recorded.has(used), `${r.alert ?? r.record}: reads ${used}, which no rule records`);
      assert.ok(
        rulesBefore.has(used),
        `${r.alert ?? r.record}: reads ${used} before the rule that records it`,
      );
    }
    if (r.record !== undefined) rulesBefore.add(r.record);
  }
  const high = alerts().find((a) => a.alert === "RelayCorrectionRateHigh");
  assert.match(high?.expr ?? "", /relay:correction_ratio:rate10m/);
});

test("alerts.test.yml has, for every alert, a case where it fires and one where it must not", () => {
  const unit = readYaml<UnitTests>(ALERT_TESTS);
  assert.deepEqual(unit.rule_files, ["alerts.yml"]);
  const cases = unit.tests.flatMap((t) => t.alert_rule_test ?? []);
  for (const name of REQUIRED_ALERTS) {
    const mine = cases.filter((c) => c.alertname === name);
    assert.ok(
      mine.some((c) => (c.exp_alerts ?? []).length > 0),
      `alerts.test.yml: no case where ${name} fires`,
    );
    assert.ok(
      mine.some((c) => (c.exp_alerts ?? []).length === 0),
      `alerts.test.yml: no case where ${name} must stay silent`,
    );
  }
});

test("the Kubernetes PrometheusRule carries exactly the groups of alerts.yml", () => {
  const docs = parseAllDocuments(readFileSync(join(ROOT, PROMETHEUS_RULE), "utf8")).map(
    (d) => d.toJS() as unknown,
  );
  const rules = docs.filter(
    (d): d is { kind: string; apiVersion: string; spec: { groups: RuleGroup[] } } =>
      typeof d === "object" && d !== null && (d as { kind?: unknown }).kind === "PrometheusRule",
  );
  assert.equal(rules.length, 1, `${PROMETHEUS_RULE} must hold one PrometheusRule`);
  const rule = rules[0];
  assert.ok(rule);
  assert.equal(rule.apiVersion, "monitoring.coreos.com/v1");
  assert.deepEqual(
    rule.spec.groups,
    groups(),
    `${PROMETHEUS_RULE} differs from ${ALERTS}: run \`node deploy/kubernetes/sync-prometheus-rule.mjs\``,
  );
});

const alert = (name: string): Rule => {
  const a = alerts().find((r) => r.alert === name);
  assert.ok(a, `${ALERTS}: no alert ${name}`);
  return a;
};

test("RelayLinkNoOwner reads relay_link_owner: a link no relay owns, for 1m", () => {
  const a = alert("RelayLinkNoOwner");
  assert.match(a.expr, /^\s*max by \(link\) \(relay_link_owner\) == 0\s*$/);
  assert.equal(a.for, "1m");
  assert.equal(a.labels?.severity, "critical");
  // Standby is still not "not live" on a relay.
  assert.match(alert("RelayLinkNotLive").expr, /state=~"live\|standby"/);
});

test("RelayGroupDegraded groups by labels every relay target carries, and expects as many members as relays run", () => {
  const a = alert("RelayGroupDegraded");
  assert.equal(a.labels?.severity, "warning");
  assert.equal(a.for, "5m");
  const m = /^\s*max by \(([^)]*)\) \(relay_group_members\) < (\d+)\s*$/.exec(a.expr);
  assert.ok(m, `RelayGroupDegraded: expected "max by (...) (relay_group_members) < N", got ${a.expr}`);
  const by = (m[1] ?? "").split(",").map((l) => l.trim());
  const expected = Number(m[2]);
  assert.ok(by.includes("region"), "RelayGroupDegraded must tell the regions apart");

  // Where the labels come from: the example scrape config (static labels) and the ServiceMonitor
  // (job = the Service name, podTargetLabels copies pod labels).
  const prom = readYaml<{
    scrape_configs: {
      job_name: string;
      static_configs?: { targets: string[]; labels?: Record<string, string> }[];
    }[];
  }>(PROMETHEUS_CONFIG);
  const job = prom.scrape_configs.find((s) => s.job_name === "jetstream-relay");
  assert.ok(job?.static_configs?.length);
  const sm = readYaml<{ spec: { podTargetLabels?: string[] } }>(SERVICE_MONITOR);
  const deployments = DEPLOYMENTS.map(
    (f) =>
      readYaml<{ spec: { replicas: number; template: { metadata: { labels: Record<string, string> } } } }>(f)
        .spec,
  );
  assert.ok(deployments.length > 0, "no relay Deployment found");
  for (const label of by) {
    if (label === "job" || label === "instance") continue;
    for (const sc of job.static_configs)
      assert.ok(sc.labels?.[label], `prometheus.yml: targets ${sc.targets.join(", ")} lack label ${label}`);
    assert.ok(
      sm.spec.podTargetLabels?.includes(label),
      `servicemonitor.yaml: podTargetLabels lacks ${label}`,
    );
    for (const d of deployments)
      assert.ok(d.template.metadata.labels[label], `a Deployment's pods lack label ${label}`);
  }

  // The threshold is the number of relays each region runs: the Deployments' replicas, the
  // compose relays per region, the targets per region in prometheus.yml.
  for (const [i, d] of deployments.entries())
    assert.equal(d.replicas, expected, `${DEPLOYMENTS[i]}: replicas vs RelayGroupDegraded's < ${expected}`);
  const compose = parse(readFileSync(join(ROOT, COMPOSE), "utf8"), { merge: true }) as {
    services: Record<string, { build?: unknown; command?: string[] }>;
  };
  const perRegion = new Map<string, number>();
  for (const s of Object.values(compose.services)) {
    if (s.build === undefined) continue;
    const args = s.command ?? [];
    const region = args[args.indexOf("--region") + 1] ?? "";
    perRegion.set(region, (perRegion.get(region) ?? 0) + 1);
  }
  assert.ok(perRegion.size > 0);
  for (const [region, n] of perRegion)
    assert.equal(n, expected, `${COMPOSE}: ${n} relays in ${region} vs RelayGroupDegraded's < ${expected}`);
  for (const sc of job.static_configs)
    assert.equal(sc.targets.length, expected, `prometheus.yml: targets of region ${sc.labels?.region}`);
});

test("RelayLeaseFlapping counts lost and acquired leases per link over 15 minutes", () => {
  const a = alert("RelayLeaseFlapping");
  assert.equal(a.labels?.severity, "warning");
  assert.match(
    a.expr,
    /sum by \(link\) \(increase\(relay_lease_transitions_total\{reason=~"lost\|acquired"\}\[15m\]\)\) > 6/,
  );
});
