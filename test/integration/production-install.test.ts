import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { copyFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { check } from "../helpers/check.js";
import { REPO_ROOT } from "../helpers/relays.js";
import { linkYaml } from "../helpers/scenario.js";
import { withServers } from "../helpers/servers.js";

const run = promisify(execFile);

/**
 * What the Docker image does: `npm ci --omit=dev` (no pino-pretty, no tsx) and `node dist/cli.js`. Run
 * under a pseudo-terminal (`script`), as `docker run -it` or `kubectl run -it` would, the relay must
 * start, not die looking for the pretty printer.
 */
test("a production install (--omit=dev) runs the built CLI under a terminal", { timeout: 300_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "relay-prod-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await run(process.execPath, [join(REPO_ROOT, "node_modules/typescript/bin/tsc"), "-p", join(REPO_ROOT, "tsconfig.build.json"), "--outDir", join(dir, "dist")], { cwd: REPO_ROOT });
  for (const f of ["package.json", "package-lock.json"]) await copyFile(join(REPO_ROOT, f), join(dir, f));
  await run("npm", ["ci", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund"], { cwd: dir, timeout: 240_000 });
  await assert.rejects(run(process.execPath, ["-e", "require.resolve('pino-pretty')"], { cwd: dir }), "pino-pretty is not installed");

  const servers = withServers(t);
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const config = join(dir, "relay.yaml");
  await writeFile(
    config,
    linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [{ name: "a-to-b", from: "a", fromStream: "S", to: "b", toStream: "S" }], extra: 'http: { listen: "127.0.0.1:0" }' }),
  );
  // `script` gives the relay a pseudo-terminal for stdout; its own output is the relay's.
  const child = spawn("script", ["-qefc", `${process.execPath} dist/cli.js run --config ${config} --region b`, "/dev/null"], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  t.after(() => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });
  await check(() => /relay running/.test(output) || child.exitCode !== null, { name: "the relay starts (or exits)", timeoutMs: 30_000 }).catch((err: unknown) => {
    throw new Error(`${String(err)}\n${output.slice(-2_000)}`, { cause: err });
  });
  assert.equal(child.exitCode, null, `the relay is running; output:\n${output.slice(-2_000)}`);
  assert.doesNotMatch(output, /unable to determine transport target|pino-pretty/);
  child.kill("SIGTERM");
  assert.equal(await exited, 0, `drains and exits 0 on SIGTERM; output:\n${output.slice(-2_000)}`);
});
