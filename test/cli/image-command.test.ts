import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { check } from "../helpers/check.js";
import { RelayProcess, REPO_ROOT, writeConfig } from "../helpers/relays.js";

/**
 * The Docker image's ENTRYPOINT + CMD, ENV and HEALTHCHECK, run with the CLI as the image would run
 * them (no container engine here: the CLI from source stands in for dist/cli.js). The user supplies the
 * config mount and RELAY_REGION, as the Dockerfile's header says.
 */

interface Image {
  cmd: string[];
  env: Record<string, string>;
  health: string[];
}

function image(): Image {
  const text = readFileSync(join(REPO_ROOT, "Dockerfile"), "utf8");
  const runtime = text.slice(text.lastIndexOf("\nFROM "));
  const json = (re: RegExp): string[] => {
    const m = re.exec(runtime);
    assert.ok(m?.[1], `Dockerfile runtime stage has ${String(re)}`);
    return JSON.parse(m[1]) as string[];
  };
  const entrypoint = json(/^ENTRYPOINT (\[.*\])$/m);
  assert.deepEqual(entrypoint, ["node", "dist/cli.js"]);
  const env: Record<string, string> = {};
  for (const m of runtime.matchAll(/^ENV (\w+)=(\S+)$/gm)) if (m[1] && m[2]) env[m[1]] = m[2];
  const health = json(/^\s+CMD (\[.*\])$/m);
  assert.deepEqual(health.slice(0, 2), ["node", "dist/cli.js"]);
  return { cmd: json(/^CMD (\[.*\])$/m), env, health: health.slice(2) };
}

test("the image's default command runs the relay from RELAY_CONFIG and RELAY_REGION, and its health check asks http.listen", async () => {
  const { cmd, env, health } = image();
  assert.equal(env["RELAY_CONFIG"], "/etc/jetstream-relay/relay.yaml");
  // The mounted config (here a temp file in its place): regions nobody serves, an HTTP port of its own.
  const config = await writeConfig(`
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:1"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
http: { listen: "127.0.0.1:0" }
`);
  const missingRegion = new RelayProcess(cmd, { ...env, RELAY_CONFIG: config });
  assert.equal(await missingRegion.exited, 2);
  assert.match(missingRegion.output(), /run: --region is required \(or set RELAY_REGION\)/);

  const relay = new RelayProcess(cmd, { ...env, RELAY_CONFIG: config, RELAY_REGION: "b" });
  try {
    const url = await relay.httpUrl();
    const port = new URL(url).port;
    // The health check reads the address from the config; port 0 was picked at start, so it gets it as
    // an operator overriding http.listen would (RELAY_HTTP).
    const healthy = new RelayProcess(health, { ...env, RELAY_CONFIG: config, RELAY_HTTP: `127.0.0.1:${port}` });
    assert.equal(await healthy.exited, 0, healthy.output());
    relay.signal("SIGTERM");
    assert.equal(await relay.exited, 0, relay.output().slice(-2_000));
    const down = new RelayProcess(health, { ...env, RELAY_CONFIG: config, RELAY_HTTP: `127.0.0.1:${port}` });
    assert.equal(await down.exited, 1, "unhealthy once the relay is gone");
    await check(() => /\/healthz: .*(ECONNREFUSED|refused)/i.test(down.output()), { name: "says why", timeoutMs: 1_000 });
  } finally {
    await relay.stop();
  }
});
