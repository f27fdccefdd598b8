import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { RelayProcess, REPO_ROOT, writeConfig } from "../helpers/relays.js";

const FIXTURES = join(REPO_ROOT, "test/fixtures/config");
const expected = JSON.parse(readFileSync(join(FIXTURES, "expected-errors.json"), "utf8")) as Record<string, string>;

async function cli(args: string[], env: Record<string, string> = {}) {
  const p = new RelayProcess(args, env);
  const code = await p.exited;
  return { code, out: p.stdout.join(""), err: p.stderr.join("") };
}

test("every bad config fixture: check exits 2 with the path-naming error", async () => {
  const files = readdirSync(FIXTURES).filter((f) => f.startsWith("bad-") && f.endsWith(".yaml"));
  assert.ok(files.length >= 10, "at least 10 bad fixtures");
  // Spawning is the slow part: run them concurrently, a few at a time.
  const results = await Promise.all(files.map((f) => cli(["check", "--config", join(FIXTURES, f)], { RELAY_FIXTURE_PASSWORD: "s3cret-fixture-pw" })));
  files.forEach((f, i) => {
    const r = results[i];
    const want = expected[f];
    assert.ok(want, `expected-errors.json has an entry for ${f}`);
    assert.equal(r?.code, 2, `${f}: exit code 2 (stderr: ${r?.err})`);
    assert.ok(r?.err.includes(want), `${f}: stderr names the problem\n  want: ${want}\n  got:  ${r?.err}`);
    assert.ok(!r?.err.includes("s3cret-fixture-pw"), `${f}: no secret in the error`);
  });
});

test("run with a bad config also exits 2; a missing file names the path", async () => {
  const r = await cli(["run", "--config", join(FIXTURES, "bad-unknown-region.yaml"), "--region", "eu-west"]);
  assert.equal(r.code, 2);
  assert.match(r.err, /links\[1\]\.to\.region: unknown region "eu-wst"/);
  const missing = await cli(["check", "--config", "/nonexistent/relay.yaml"]);
  assert.equal(missing.code, 2);
  assert.match(missing.err, /\/nonexistent\/relay\.yaml/);
});

test("usage errors exit 2; --help exits 0 for every command", async () => {
  assert.equal((await cli(["frobnicate"])).code, 2);
  assert.equal((await cli(["run", "--config"])).code, 2);
  const noRegion = await cli(["run", "--config", "x.yaml"]);
  assert.equal(noRegion.code, 2);
  assert.match(noRegion.err, /--region is required/);
  for (const c of ["run", "check", "status", "verify", "streams", "guard", "health", "demo"]) {
    const r = await cli([c, "--help"]);
    assert.equal(r.code, 0, `${c} --help`);
    assert.match(r.out, new RegExp(`jetstream-relay ${c}`));
    assert.match(r.out, /^ {2}-h, --help/m, `${c} --help lists -h`);
  }
  // The short flags the docs use are listed next to their long form.
  const run = await cli(["run", "--help"]);
  assert.match(run.out, /^ {2}-c, --config VALUE/m);
  assert.match(run.out, /^ {2}-r, --region VALUE/m);
  const { version } = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string };
  for (const flag of ["--version", "-V"]) {
    const v = await cli([flag]);
    assert.equal(v.code, 0);
    assert.equal(v.out.trim(), `jetstream-relay ${version}`);
  }
});

test("check prints, per region, the links a relay there would run", async () => {
  const path = await writeConfig(`
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:2"] }
  c: { servers: ["nats://127.0.0.1:3"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
  - { name: c-to-b, from: { region: c, stream: S, filter: "x.>" }, to: { region: b, stream: S } }
  - { name: b-to-a, from: { region: b, stream: S }, to: { region: a, stream: S } }
`);
  const r = await cli(["check", "--config", path]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /region a: .* runs 1 link$/m);
  assert.match(r.out, /region b: .* runs 2 link/);
  assert.match(r.out, /region c: .* runs 0 links$/m);
  assert.match(r.out, /c-to-b: c\/S filter x\.> -> b\/S/);
});

test("usage and runtime errors of run and status: their own codes, the flag or config path named, exit 2 for usage and 1 for runtime", async () => {
  const { createServer } = await import("node:net");
  const busy = createServer();
  await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
  const busyPort = (busy.address() as { port: number }).port;
  try {
    // A region nobody listens on: the relay never gets past its HTTP server, which is what is tested.
    const path = await writeConfig(`
regions:
  a: { servers: ["nats://127.0.0.1:1"] }
  b: { servers: ["nats://127.0.0.1:1"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
http: { listen: "127.0.0.1:${busyPort}" }
`);
    const inUse = await cli(["run", "--config", path, "--region", "b"]);
    assert.equal(inUse.code, 1, inUse.err);
    assert.match(inUse.err, new RegExp(`\\[HTTP_LISTEN\\]: http\\.listen \\(${path.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}\\) 127\\.0\\.0\\.1:${busyPort}: cannot listen: the address is already in use`));
    const flagInUse = await cli(["run", "--config", path, "--region", "b", "--http", `127.0.0.1:${busyPort}`]);
    assert.match(flagInUse.err, /\[HTTP_LISTEN\]: --http 127\.0\.0\.1:\d+: cannot listen/);
    const badFlag = await cli(["run", "--config", path, "--region", "b", "--http", "foo"]);
    assert.equal(badFlag.code, 2, badFlag.err);
    assert.match(badFlag.err, /^--http "foo": expected HOST:PORT with a port from 0 to 65535/m);
  } finally {
    await new Promise((resolve) => busy.close(resolve));
  }
  const notUrl = await cli(["status", "--url", "notaurl"]);
  assert.equal(notUrl.code, 2, notUrl.err);
  assert.match(notUrl.err, /^--url "notaurl": not a URL/m);
  const refused = await cli(["status", "--url", `http://127.0.0.1:${busyPort}`]); // closed now
  assert.equal(refused.code, 1, refused.err);
  assert.match(refused.err, /\[RELAY_UNREACHABLE\]: cannot read http:\/\/127\.0\.0\.1:\d+\/status: connection refused/);
});

test("check warns when the config or a credentials file it names is readable by group or others (exit 1 under --strict)", async () => {
  const { chmod, writeFile: write } = await import("node:fs/promises");
  const { dirname } = await import("node:path");
  const path = await writeConfig("placeholder");
  const seed = join(dirname(path), "relay.nk");
  await write(seed, "SUAEXAMPLESEED");
  await write(
    path,
    `
regions:
  a: { servers: ["nats://127.0.0.1:4222"], auth: { nkey: "${seed}" } }
  b: { servers: ["nats://127.0.0.1:4223"] }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
`,
  );
  await chmod(path, 0o644);
  await chmod(seed, 0o640);
  const loose = await cli(["check", "--config", path]);
  assert.equal(loose.code, 0, loose.err);
  assert.match(loose.out, new RegExp(`warning: config file ${path} is readable by its group or by everyone \\(mode 0644\\); it holds secrets: chmod 600`));
  assert.match(loose.out, /warning: region a nkey seed file .*relay\.nk is readable by its group or by everyone \(mode 0640\)/);
  assert.equal((await cli(["check", "--config", path, "--strict"])).code, 1);
  await chmod(path, 0o600);
  await chmod(seed, 0o600);
  const tight = await cli(["check", "--config", path, "--strict"]);
  assert.equal(tight.code, 0, tight.out + tight.err);
  assert.doesNotMatch(tight.out, /warning:/);
});
