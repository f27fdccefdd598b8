import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { CONFIG_DOC, configTables, renderConfigDoc } from "../../scripts/docs/config-doc.js";
import { configKeys } from "../../scripts/docs/config-keys.js";
import { replaceSections } from "../../scripts/docs/markdown.js";
import { METRICS_DOC, relayMetrics, renderMetricsDoc } from "../../scripts/docs/metrics-doc.js";
import { compileConfig } from "../../src/config/compile.js";
import { ConfigSchema, validateConfig } from "../../src/config/schema.js";
import { obj } from "../../src/config/schema-fields.js";
import { DEFAULT_EXPECTED_ENTITIES } from "../../src/guard/layout.js";

/**
 * The generated reference pages stay what `npm run docs` writes: docs/config.md's key tables from the
 * config schema, docs/metrics.md from the metrics a relay registers. Every key has a description and
 * every metric a help text, and a default the page shows is the one compileConfig applies.
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (file: string): string => readFileSync(join(ROOT, file), "utf8");

/** The anchors GitHub gives a page's headings (outside code blocks; a repeated one gets -1, -2, …). */
function anchors(page: string): Set<string> {
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of page.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (m === null) continue;
    const base = (m[1] ?? "")
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    if (n > 0) seen.set(`${base}-${n}`, 1);
  }
  return new Set(seen.keys());
}

/** The first line where two texts differ, to say where a page went stale. */
function firstDifference(actual: string, expected: string): string {
  const a = actual.split("\n");
  const e = expected.split("\n");
  for (let i = 0; i < Math.max(a.length, e.length); i++) {
    if (a[i] !== e[i])
      return `line ${i + 1}:\n  page:      ${a[i] ?? "(end)"}\n  generated: ${e[i] ?? "(end)"}`;
  }
  return "(none)";
}

void describe("docs drift", () => {
  void it("docs/config.md's key tables are those the schema generates", async () => {
    const page = read(CONFIG_DOC);
    const generated = await renderConfigDoc(page);
    assert.ok(
      page === generated,
      `${CONFIG_DOC} differs from the schema: run npm run docs\nfirst difference at ${firstDifference(page, generated)}`,
    );
  });

  void it("docs/metrics.md is the page the metrics generate", async () => {
    const page = read(METRICS_DOC);
    const generated = await renderMetricsDoc();
    assert.ok(
      page === generated,
      `${METRICS_DOC} differs from src/observability/metrics.ts: run npm run docs\nfirst difference at ${firstDifference(page, generated)}`,
    );
  });

  void it("every key of the config schema has a description", () => {
    const bare = configKeys(ConfigSchema)
      .filter((k) => (k.description ?? "").trim() === "")
      .map((k) => k.path);
    assert.deepEqual(
      bare,
      [],
      `config keys without a description (give them .meta({ description }) in src/config/schema-*.ts): ${bare.join(", ")}`,
    );
  });

  void it("every metric has a help text", async () => {
    const bare = (await relayMetrics()).filter((m) => m.help.trim() === "").map((m) => m.name);
    assert.deepEqual(bare, [], `metrics without help (src/observability/metrics.ts): ${bare.join(", ")}`);
  });

  void it("a key without a description is found, and a changed description makes the page differ", () => {
    const schema = obj({ a: z.string().meta({ description: "described" }), b: z.string().optional() });
    const keys = configKeys(schema);
    assert.deepEqual(
      keys.map((k) => [k.path, k.description]),
      [
        ["a", "described"],
        ["b", undefined],
      ],
    );
    const page = read(CONFIG_DOC);
    const changed = configKeys(ConfigSchema).map((k) =>
      k.path === "links[].batchSize" ? { ...k, description: `${k.description} Changed.` } : k,
    );
    assert.notEqual(
      replaceSections(page, configTables(changed), CONFIG_DOC),
      replaceSections(page, configTables(), CONFIG_DOC),
    );
  });

  void it("every link to an anchor of config.md or metrics.md lands on a heading", () => {
    const docs = ["README.md", ...readdirSync(join(ROOT, "docs")).map((f) => `docs/${f}`)].filter((f) =>
      f.endsWith(".md"),
    );
    const targets = new Map([CONFIG_DOC, METRICS_DOC].map((f) => [f, anchors(read(f))] as const));
    const broken: string[] = [];
    for (const file of docs) {
      const text = read(file);
      for (const [target, known] of targets) {
        const base = target.slice("docs/".length);
        const links = [...text.matchAll(new RegExp(`${base.replace(".", "\\.")}#([\\w-]+)`, "g"))].map(
          (m) => m[1] ?? "",
        );
        if (file === target) links.push(...[...text.matchAll(/\]\(#([\w-]+)\)/g)].map((m) => m[1] ?? ""));
        for (const anchor of links) if (!known.has(anchor)) broken.push(`${file}: ${base}#${anchor}`);
      }
    }
    assert.deepEqual(broken, [], `links to anchors that no heading has:\n${broken.join("\n")}`);
  });

  void it("the defaults the page shows are the ones compileConfig applies", () => {
    const parsed = validateConfig({
      regions: { a: { servers: ["nats://localhost:4222"] }, b: { servers: ["nats://localhost:4223"] } },
      links: [
        {
          name: "l",
          from: { region: "a", stream: "S" },
          to: { region: "b", stream: "S" },
          guard: {
            redis: { url: "redis://localhost:6379" },
            versions: { entity: "header:E", version: "header:V" },
          },
        },
      ],
    });
    assert.ok(parsed.ok);
    const c = compileConfig(parsed.config);
    const link = c.links[0];
    const guard = link?.guard;
    assert.ok(link !== undefined && guard !== undefined && guard.store.kind === "redis");
    // What compileConfig made of each key the file left out (undefined: not applied by compileConfig).
    const compiled: Record<string, unknown> = {
      "links[].to.expectStream": link.to.expectStream ?? false,
      "links[].to.deleteMarkers": link.to.deleteMarkers ?? "relay",
      "links[].to.order": link.to.order ?? "default",
      "links[].batchSize": link.batchSize,
      "links[].inFlightBytes": link.inFlightBytes,
      "links[].ackWait": link.ackWaitMs,
      "links[].sourceAcks": link.sourceAcks,
      "links[].publishTimeout": link.publishTimeoutMs,
      "links[].maxHops": link.maxHops,
      "links[].onGap": link.onGap,
      "links[].stallAfter": link.stallAfterMs,
      "links[].startAt": link.startAt,
      "links[].audit.enabled": link.audit.enabled,
      "links[].audit.after": link.audit.afterMs,
      "links[].audit.sweepEvery": link.audit.sweepEveryMs,
      "links[].audit.repair": link.audit.repair,
      "links[].audit.maxReadRate": link.audit.maxReadRate,
      "links[].guard.redis.waitReplicas": guard.store.waitReplicas,
      "links[].guard.redis.waitTimeout": guard.store.waitTimeoutMs,
      "links[].guard.idTtl": guard.idTtlMs,
      "links[].guard.versions.expectedEntities":
        guard.versions?.expectedEntities ?? DEFAULT_EXPECTED_ENTITIES,
      "links[].guard.strict": guard.strict,
      "http.listen": `${c.http.host}:${c.http.port}`,
      "http.protectMetrics": c.http.protectMetrics,
      "log.level": c.log.level,
      "log.progressInterval": c.log.progressIntervalMs,
      "shutdown.grace": c.shutdownGraceMs,
      "group.bucket": c.group.bucket,
      "group.lease": c.group.leaseMs,
      "group.renew": c.group.renewMs,
      "reload.watch": c.reload.watch,
    };
    const shown = configKeys(ConfigSchema).filter((k) => k.defaultValue !== undefined);
    assert.deepEqual(
      shown.map((k) => k.path).sort(),
      Object.keys(compiled).sort(),
      "a key with a default on the page needs its compiled value here",
    );
    for (const k of shown) assert.equal(k.defaultValue, compiled[k.path], k.path);
  });
});
