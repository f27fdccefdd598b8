/**
 * deploy/kubernetes: every manifest validated against the Kubernetes OpenAPI schemas bundled in
 * kubernetes-models (and @kubernetes-models/prometheus-operator for ServiceMonitor and
 * PrometheusRule), offline; then the things a schema cannot see: probes, non-root, label
 * selectors that really select, port names that really match, secrets the config really needs.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, parseAllDocuments } from "yaml";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import type { IDeployment } from "kubernetes-models/apps/v1/Deployment";
import type { IService } from "kubernetes-models/v1/Service";
import type { IPodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import type { IServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import type { IConfigMap } from "kubernetes-models/v1/ConfigMap";
import type { ISecret } from "kubernetes-models/v1/Secret";
import type { IContainer } from "kubernetes-models/v1/Container";
import { parseConfigText } from "../../src/config/load.js";
import type { RelayConfig } from "../../src/config/types.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const DIR = "deploy/kubernetes";
const NAMESPACE = "jetstream-relay";
const EXAMPLE_SECRET = "secret.example.yaml";
/** Kept in step with the relay's shutdown watchdog (src/lifecycle/shutdown.ts): grace + 5s. */
const SHUTDOWN_MARGIN_S = 5;
/** Relays per region: a group sharing the region's links (RelayGroupDegraded expects as many). */
const REPLICAS = 2;

interface Manifest {
  file: string;
  doc: {
    apiVersion: string;
    kind: string;
    metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  };
}

/** Model class per apiVersion/kind: construction + validate() checks against the OpenAPI schema. */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/Namespace": Namespace,
  "v1/ConfigMap": ConfigMap,
  "v1/Secret": Secret,
  "v1/Service": Service,
  "apps/v1/Deployment": Deployment,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
};

function manifests(): Manifest[] {
  return readdirSync(join(ROOT, DIR))
    .filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml")
    .sort()
    .flatMap((file) =>
      parseAllDocuments(readFileSync(join(ROOT, DIR, file), "utf8"))
        .map((d) => {
          assert.deepEqual(d.errors, [], `${file}: YAML errors`);
          return d.toJS() as Manifest["doc"] | null;
        })
        .filter((doc): doc is Manifest["doc"] => doc !== null)
        .map((doc) => ({ file, doc })),
    );
}

function ofKind<T>(kind: string): (T & { file: string })[] {
  return manifests()
    .filter((m) => m.doc.kind === kind)
    .map((m) => ({ ...(m.doc as T), file: m.file }));
}

const deployments = () => ofKind<IDeployment>("Deployment");

function relayContainer(d: IDeployment): IContainer {
  const c = d.spec?.template.spec?.containers.find((x) => x.name === "relay");
  assert.ok(c, `${d.metadata?.name}: no container named relay`);
  return c;
}

/** Every label of `selector` is on `labels` with the same value. */
function selects(
  selector: Record<string, string> | undefined,
  labels: Record<string, string> | undefined,
): boolean {
  return (
    Object.entries(selector ?? {}).length > 0 &&
    Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v)
  );
}

function configMap(): IConfigMap & { file: string } {
  const cms = ofKind<IConfigMap>("ConfigMap");
  assert.equal(cms.length, 1);
  const cm = cms[0];
  assert.ok(cm);
  return cm;
}

/** `${VAR}` references (without a default) in the relay config: what the pods must provide. */
function requiredEnv(configText: string): string[] {
  return [
    ...new Set([...configText.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1] ?? "")),
  ].sort();
}

function relayConfig(): { text: string; config: RelayConfig } {
  const text = configMap().data?.["relay.yaml"] ?? "";
  const env = Object.fromEntries(requiredEnv(text).map((v) => [v, `test-${v}`]));
  return { text, config: parseConfigText(text, `${DIR}/configmap.yaml relay.yaml`, env) };
}

test("every manifest is valid against its Kubernetes schema", () => {
  const all = manifests();
  assert.ok(all.length >= 10, `only ${all.length} manifests found`);
  for (const { file, doc } of all) {
    const Model = MODELS[`${doc.apiVersion}/${doc.kind}`];
    assert.ok(Model, `${file}: no schema for ${doc.apiVersion} ${doc.kind}`);
    try {
      new Model(doc as never).validate();
    } catch (err) {
      assert.fail(
        `${file} (${doc.kind} ${doc.metadata.name}): ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    assert.ok(
      doc.metadata.labels?.["app.kubernetes.io/name"] === "jetstream-relay",
      `${file}: app.kubernetes.io/name label`,
    );
    if (doc.kind !== "Namespace" && doc.metadata.namespace !== undefined)
      assert.equal(doc.metadata.namespace, NAMESPACE);
  }
  // The validation is real: a wrong type is rejected.
  const bad = structuredClone(deployments()[0]) as unknown as { spec: { replicas: unknown } };
  bad.spec.replicas = "one";
  assert.throws(() => new Deployment(bad as never).validate());
});

test("kustomization.yaml lists every manifest but the example Secret, in the jetstream-relay namespace", () => {
  const k = parse(readFileSync(join(ROOT, DIR, "kustomization.yaml"), "utf8")) as {
    apiVersion: string;
    kind: string;
    namespace: string;
    resources: string[];
    images?: { name: string }[];
  };
  assert.equal(k.kind, "Kustomization");
  assert.equal(k.namespace, NAMESPACE);
  for (const r of k.resources)
    assert.ok(existsSync(join(ROOT, DIR, r)), `kustomization: ${r} does not exist`);
  const files = [...new Set(manifests().map((m) => m.file))];
  assert.deepEqual(
    [...k.resources].sort(),
    files.filter((f) => f !== EXAMPLE_SECRET).sort(),
    "every manifest but the example Secret is a resource",
  );
  assert.ok(
    !k.resources.includes(EXAMPLE_SECRET),
    "applying the example Secret would overwrite the real one",
  );
  const ns = ofKind<{ metadata: { name: string } }>("Namespace");
  assert.deepEqual(
    ns.map((n) => n.metadata.name),
    [NAMESPACE],
  );
  // The image kustomize rewrites is the one the Deployments use.
  for (const d of deployments()) {
    const image = relayContainer(d).image ?? "";
    assert.ok(
      k.images?.some((i) => image.startsWith(`${i.name}:`)),
      `${d.metadata?.name}: image ${image} is not in kustomization images`,
    );
  }
});

test("one Deployment per region of the config, replicas 2, running that region's links", () => {
  const { config } = relayConfig();
  const ds = deployments();
  const regions = ds.map((d) => {
    const args = relayContainer(d).args ?? [];
    assert.equal(args[0], "run", `${d.metadata?.name}: args start with run`);
    assert.equal(args[args.indexOf("--config") + 1], "/etc/jetstream-relay/relay.yaml");
    const region = args[args.indexOf("--region") + 1] ?? "";
    assert.ok(config.regions.has(region), `${d.metadata?.name}: region ${region} is not in the config`);
    assert.ok(
      config.links.some((l) => l.to.region === region),
      `${d.metadata?.name}: no link ends in ${region}`,
    );
    assert.equal(d.spec?.replicas, REPLICAS, `${d.metadata?.name}: replicas`);
    assert.equal(d.spec?.template.metadata?.labels?.region, region, `${d.metadata?.name}: region label`);
    assert.ok(
      selects(d.spec?.selector.matchLabels, d.spec?.template.metadata?.labels),
      `${d.metadata?.name}: selector must match the pod labels`,
    );
    return region;
  });
  assert.deepEqual(regions.sort(), [...config.regions.keys()].sort());
  for (const d of ds) {
    const others = ds.filter((o) => o !== d);
    for (const o of others) {
      assert.ok(
        !selects(d.spec?.selector.matchLabels, o.spec?.template.metadata?.labels),
        `${d.metadata?.name} selects ${o.metadata?.name}'s pods`,
      );
    }
    const text = readFileSync(join(ROOT, DIR, d.file), "utf8");
    assert.match(text, /#.*replicas: 2/, `${d.file}: explain replicas: 2`);
    assert.match(text, /#.*lease/i, `${d.file}: explain the group (one owner per link, by lease)`);
    assert.match(text, /#.*standby/i, `${d.file}: explain standby (the other relay's state for a link)`);
    assert.match(text, /#.*handover/i, `${d.file}: explain why a rolling update is safe (handover)`);
    assert.doesNotMatch(text, /#.*(replicas: 1\b|single relay|hot standby)/i, `${d.file}: stale comment`);
  }
});

test("rolling updates start the new pod first and never drop below the replicas", () => {
  for (const d of deployments()) {
    const name = d.metadata?.name;
    assert.equal(d.spec?.strategy?.type, "RollingUpdate", `${name}: strategy`);
    assert.equal(d.spec?.strategy?.rollingUpdate?.maxSurge, 1, `${name}: maxSurge`);
    assert.equal(d.spec?.strategy?.rollingUpdate?.maxUnavailable, 0, `${name}: maxUnavailable`);
  }
});

test("pod anti-affinity (preferred, by hostname) spreads a region's relays over nodes", () => {
  const ds = deployments();
  for (const d of ds) {
    const name = d.metadata?.name;
    const anti = d.spec?.template.spec?.affinity?.podAntiAffinity;
    assert.ok(anti, `${name}: podAntiAffinity`);
    assert.equal(
      anti.requiredDuringSchedulingIgnoredDuringExecution,
      undefined,
      `${name}: required anti-affinity would leave a replica Pending on a single-node cluster`,
    );
    const terms = anti.preferredDuringSchedulingIgnoredDuringExecution ?? [];
    const own = d.spec?.template.metadata?.labels;
    const byHost = terms.filter(
      (t) =>
        t.podAffinityTerm.topologyKey === "kubernetes.io/hostname" &&
        selects(t.podAffinityTerm.labelSelector?.matchLabels, own),
    );
    assert.equal(byHost.length, 1, `${name}: one preferred term by kubernetes.io/hostname over its own pods`);
    const term = byHost[0];
    assert.ok(term && term.weight >= 1 && term.weight <= 100, `${name}: weight in 1..100`);
    for (const other of ds.filter((o) => o !== d)) {
      assert.ok(
        !selects(term.podAffinityTerm.labelSelector?.matchLabels, other.spec?.template.metadata?.labels),
        `${name}: the anti-affinity must not also repel ${other.metadata?.name}'s pods`,
      );
    }
  }
});

test("probes: readiness /readyz, liveness /healthz, on the relay's HTTP port", () => {
  const { config } = relayConfig();
  for (const d of deployments()) {
    const c = relayContainer(d);
    const http = c.ports?.find((p) => p.name === "http");
    assert.equal(http?.containerPort, config.http.port, `${d.metadata?.name}: container port http`);
    assert.equal(c.readinessProbe?.httpGet?.path, "/readyz", `${d.metadata?.name}: readiness`);
    assert.equal(c.livenessProbe?.httpGet?.path, "/healthz", `${d.metadata?.name}: liveness`);
    for (const probe of [c.readinessProbe, c.livenessProbe]) {
      const port = probe?.httpGet?.port;
      assert.ok(
        port === "http" || port === config.http.port,
        `${d.metadata?.name}: probe port ${String(port)}`,
      );
    }
  }
});

test("non-root, read-only root filesystem, no privilege escalation, resources, a grace period longer than the relay's", () => {
  const { config } = relayConfig();
  for (const d of deployments()) {
    const name = d.metadata?.name;
    const pod = d.spec?.template.spec;
    const c = relayContainer(d);
    const runAsNonRoot = c.securityContext?.runAsNonRoot ?? pod?.securityContext?.runAsNonRoot;
    const runAsUser = c.securityContext?.runAsUser ?? pod?.securityContext?.runAsUser;
    assert.equal(runAsNonRoot, true, `${name}: runAsNonRoot`);
    assert.ok(runAsUser !== undefined && runAsUser !== 0, `${name}: runAsUser must be a non-root uid`);
    assert.equal(c.securityContext?.readOnlyRootFilesystem, true, `${name}: readOnlyRootFilesystem`);
    assert.equal(c.securityContext?.allowPrivilegeEscalation, false, `${name}: allowPrivilegeEscalation`);
    assert.deepEqual(c.securityContext?.capabilities?.drop, ["ALL"], `${name}: drop all capabilities`);
    assert.equal(pod?.securityContext?.seccompProfile?.type, "RuntimeDefault", `${name}: seccomp`);
    assert.ok(c.resources?.requests?.cpu && c.resources.requests.memory, `${name}: resource requests`);
    assert.ok(c.resources?.limits?.memory, `${name}: memory limit`);
    const grace = pod?.terminationGracePeriodSeconds ?? 30;
    assert.ok(
      grace > config.shutdownGraceMs / 1000 + SHUTDOWN_MARGIN_S,
      `${name}: terminationGracePeriodSeconds ${grace} must exceed shutdown grace ${config.shutdownGraceMs / 1000}s + ${SHUTDOWN_MARGIN_S}s`,
    );
    // Writable paths are explicit volumes, the config comes from the ConfigMap.
    const mounts = new Map((c.volumeMounts ?? []).map((m) => [m.mountPath, m]));
    assert.ok(mounts.has("/tmp"), `${name}: /tmp is an emptyDir on a read-only root`);
    const cfg = mounts.get("/etc/jetstream-relay");
    assert.ok(cfg?.readOnly, `${name}: config mount`);
    const vol = pod?.volumes?.find((v) => v.name === cfg.name);
    assert.equal(vol?.configMap?.name, configMap().metadata?.name, `${name}: config volume is the ConfigMap`);
    assert.ok(configMap().data?.["relay.yaml"], "the ConfigMap has relay.yaml");
  }
});

test("the pods get every secret the config reads, from the Secret the example describes", () => {
  const { text } = relayConfig();
  const needed = requiredEnv(text);
  assert.ok(needed.length > 0, "the config reads its passwords from the environment");
  const secrets = ofKind<ISecret>("Secret");
  assert.equal(secrets.length, 1);
  const secret = secrets[0];
  assert.ok(secret);
  assert.equal(secret.file, EXAMPLE_SECRET);
  for (const v of Object.values(secret.stringData ?? {}))
    assert.match(v, /REPLACE-ME/, "example Secret values are placeholders");
  for (const d of deployments()) {
    const env = relayContainer(d).env ?? [];
    for (const v of needed) {
      const e = env.find((x) => x.name === v);
      if (v === "POD_IP") {
        // Not a secret: http.listen binds the pod's own address.
        assert.equal(e?.valueFrom?.fieldRef?.fieldPath, "status.podIP", `${d.metadata?.name}: POD_IP from the downward API`);
        continue;
      }
      const ref = e?.valueFrom?.secretKeyRef;
      assert.ok(ref, `${d.metadata?.name}: ${v} must come from a secretKeyRef`);
      assert.equal(ref.name, secret.metadata?.name, `${d.metadata?.name}: ${v} secret name`);
      assert.ok(
        ref.key in (secret.stringData ?? {}),
        `${d.metadata?.name}: ${v} reads key ${ref.key}, which the example Secret lacks`,
      );
    }
  }
  assert.match(text, /http: \{ listen: "\$\{POD_IP\}:9464" \}/, "the HTTP server binds the pod IP, not every interface");
  // And no secret sits in the ConfigMap itself: every credential is a ${VAR} reference.
  const raw = parse(text) as { regions: Record<string, { auth?: Record<string, string> }> };
  for (const [region, r] of Object.entries(raw.regions)) {
    for (const key of ["password", "token"]) {
      const v = r.auth?.[key];
      if (v !== undefined)
        assert.match(
          v,
          /^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/,
          `ConfigMap: regions.${region}.auth.${key} must be a \${VAR} reference`,
        );
    }
  }
});

test("the Service selects every relay pod; the ServiceMonitor port name matches the Service port name", () => {
  const services = ofKind<IService>("Service");
  assert.equal(services.length, 1);
  const svc = services[0];
  assert.ok(svc);
  assert.equal(
    svc.metadata?.name,
    "jetstream-relay",
    'the Service name is the job label RelayDown matches (job="jetstream-relay")',
  );
  for (const d of deployments()) {
    assert.ok(
      selects(svc.spec?.selector, d.spec?.template.metadata?.labels),
      `the Service does not select ${d.metadata?.name}`,
    );
    const c = relayContainer(d);
    for (const p of svc.spec?.ports ?? []) {
      const target = p.targetPort;
      assert.ok(
        typeof target === "string"
          ? c.ports?.some((cp) => cp.name === target)
          : c.ports?.some((cp) => cp.containerPort === (target ?? p.port)),
        `Service port ${p.name}: target ${String(target)} is not a port of ${d.metadata?.name}`,
      );
    }
  }
  const monitors = ofKind<IServiceMonitor>("ServiceMonitor");
  assert.equal(monitors.length, 1);
  const sm = monitors[0];
  assert.ok(sm);
  assert.ok(
    selects(sm.spec.selector.matchLabels, svc.metadata?.labels),
    "the ServiceMonitor does not select the Service",
  );
  const portNames = (svc.spec?.ports ?? []).map((p) => p.name);
  assert.ok(sm.spec.endpoints && sm.spec.endpoints.length > 0);
  for (const e of sm.spec.endpoints) {
    assert.ok(
      e.port !== undefined && portNames.includes(e.port),
      `ServiceMonitor endpoint port ${e.port} is not a Service port (${portNames.join(", ")})`,
    );
    assert.equal(e.path ?? "/metrics", "/metrics");
  }
  for (const l of sm.spec.podTargetLabels ?? []) {
    for (const d of deployments())
      assert.ok(
        d.spec?.template.metadata?.labels?.[l],
        `podTargetLabels ${l} is not a pod label of ${d.metadata?.name}`,
      );
  }
});

test("a PodDisruptionBudget per Deployment, selecting exactly its pods and keeping one", () => {
  const pdbs = ofKind<IPodDisruptionBudget>("PodDisruptionBudget");
  const ds = deployments();
  assert.equal(pdbs.length, ds.length);
  for (const d of ds) {
    const mine = pdbs.filter((p) =>
      selects(p.spec?.selector?.matchLabels, d.spec?.template.metadata?.labels),
    );
    assert.equal(
      mine.length,
      1,
      `${d.metadata?.name}: expected one PDB selecting its pods, found ${mine.length}`,
    );
    const pdb = mine[0];
    assert.ok(pdb);
    assert.equal(pdb.spec?.minAvailable, 1, `${pdb.metadata?.name}: minAvailable`);
    assert.ok(
      (d.spec?.replicas ?? 1) > 1,
      `${pdb.metadata?.name}: with minAvailable 1, a single replica could never be evicted by a drain`,
    );
    const text = readFileSync(join(ROOT, DIR, pdb.file), "utf8");
    assert.doesNotMatch(text, /#.*(single|only) .*relay/i, `${pdb.file}: stale comment (two replicas now)`);
    for (const other of ds.filter((o) => o !== d)) {
      assert.ok(
        !selects(pdb.spec?.selector?.matchLabels, other.spec?.template.metadata?.labels),
        `${pdb.metadata?.name} also selects ${other.metadata?.name}`,
      );
    }
  }
});
