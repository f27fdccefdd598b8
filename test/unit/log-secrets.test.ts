import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { parseConfigText } from "../../src/config/load.js";
import { secretsOf } from "../../src/config/redact.js";
import { ConfigReloader } from "../../src/config/reloader.js";
import type { Reloadable } from "../../src/config/reloader.js";
import type { RelayConfig } from "../../src/config/types.js";
import { createLogger, LogSecrets } from "../../src/observability/logger.js";

function capture() {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString().split("\n").filter((l) => l !== ""));
      done();
    },
  });
  return { lines, destination };
}

const configText = (password: string, token: string) => `
regions:
  a: { servers: ["nats://relay:${password}@127.0.0.1:1"] }
  b:
    servers: ["nats://127.0.0.1:2"]
    auth: { user: relay, password: "${password}" }
links:
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: S } }
http: { listen: "127.0.0.1:0", token: "${token}" }
`;

test("LogSecrets: values added after the logger was made are scrubbed from then on", () => {
  const { lines, destination } = capture();
  const secrets = new LogSecrets(["first-secret"]);
  const logger = createLogger({ level: "info", secrets, destination }).child({ component: "x" });
  logger.info({ url: "nats://u:later-secret@h" }, "before: first-secret");
  secrets.add(["later-secret", "abc"]);
  logger.info({ url: "nats://u:later-secret@h", err: new Error("auth later-secret") }, "after: first-secret");
  assert.match(lines[0]!, /later-secret/, "not a secret yet");
  assert.doesNotMatch(lines[0]!, /first-secret/);
  assert.doesNotMatch(lines[1]!, /later-secret|first-secret/, lines[1]);
  assert.match(lines[1]!, /nats:\/\/u:\[redacted\]@h/);
  assert.deepEqual(secrets.values, ["first-secret", "later-secret"], "short values are left out, longest first");
  // A plain array still works as before.
  const plain = capture();
  createLogger({ level: "info", secrets: ["static-secret"], destination: plain.destination }).info("x static-secret");
  assert.doesNotMatch(plain.lines[0]!, /static-secret/);
});

test("a secret introduced by a config reload is redacted in the log lines written after it", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "relay-log-secrets-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, "relay.yaml");
  await writeFile(path, configText("old-password-1", "old-http-token-1"));
  const config = parseConfigText(configText("old-password-1", "old-http-token-1"), path);

  // Wired as src/cli/run-command.ts wires it.
  const { lines, destination } = capture();
  const secrets = new LogSecrets(secretsOf(config));
  const logger = createLogger({ level: "info", secrets, destination });
  const applied: RelayConfig[] = [];
  const target: Reloadable = {
    reload(next) {
      // What applying it may log: a connection error quoting the new URL, the new password.
      logger.warn({ url: next.regions.get("a")!.servers[0], err: new Error("authorization violation for new-password-2") }, "reconnecting");
      applied.push(next);
      return Promise.resolve();
    },
    reloadFailed: (err) => assert.fail(String(err)),
  };
  const reloader = new ConfigReloader({ path, target, logger, onLoaded: (next) => secrets.add(secretsOf(next)) });
  t.after(() => reloader.stop());
  reloader.start(config);

  logger.info("not yet a secret: new-password-2");
  await writeFile(path, configText("new-password-2", "new-http-token-2"));
  await reloader.request("SIGHUP");
  assert.equal(applied.length, 1);
  logger.info({ token: "x", note: "new-http-token-2 and new-password-2, and the old old-password-1" }, "after the reload");

  assert.match(lines[0]!, /new-password-2/, "before the reload it was no secret");
  const after = lines.slice(1).join("\n");
  assert.match(after, /reconnecting/);
  assert.match(after, /after the reload/);
  assert.doesNotMatch(after, /new-password-2|new-http-token-2|old-password-1/, after);
  assert.match(after, /nats:\/\/relay:\[redacted\]@127\.0\.0\.1:1/);
});
