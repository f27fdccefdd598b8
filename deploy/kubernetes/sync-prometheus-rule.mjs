#!/usr/bin/env node
// Regenerates prometheusrule.yaml (Prometheus Operator) from deploy/prometheus/alerts.yml, the one
// source of the relay's recording and alerting rules:
//   node deploy/kubernetes/sync-prometheus-rule.mjs
// test/deploy/alerts.test.ts fails while the two files' groups differ.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const rules = parse(readFileSync(join(here, "..", "prometheus", "alerts.yml"), "utf8"));
const resource = {
  apiVersion: "monitoring.coreos.com/v1",
  kind: "PrometheusRule",
  metadata: {
    name: "jetstream-relay",
    labels: { "app.kubernetes.io/name": "jetstream-relay" },
  },
  spec: { groups: rules.groups },
};
const header = [
  "# GENERATED from deploy/prometheus/alerts.yml by deploy/kubernetes/sync-prometheus-rule.mjs: edit",
  "# alerts.yml, then run `node deploy/kubernetes/sync-prometheus-rule.mjs`.",
  "# Your Prometheus must select it (kube-prometheus-stack: label `release: <its release name>`, or",
  "# ruleSelectorNilUsesHelmValues: false).",
  "",
].join("\n");
writeFileSync(join(here, "prometheusrule.yaml"), header + stringify(resource, { lineWidth: 0 }));
console.log("wrote", join(here, "prometheusrule.yaml"));
