/**
 * NATS_SERVER_BIN picks the nats-server the tests, the fault tests and the benches start (they all start
 * servers through LocalBackend): a copy of the binary outside PATH is what runs, its version is read
 * from it, and a path that is no executable fails at once with the variable's name.
 */
import assert from "node:assert/strict";
import { chmodSync, copyFileSync, mkdtempSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { LocalBackend } from "../helpers/local-backend.js";
import { compareVersions, natsServerBin, natsServerVersion, needsServer } from "../helpers/nats-version.js";
import { createBackend } from "../helpers/servers.js";

test("NATS_SERVER_BIN: the servers started are that binary", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "nats-bin-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const copy = join(dir, "nats-server-under-test");
  copyFileSync(natsServerBin(), copy); // the binary this run uses (the variable's, or PATH's)
  chmodSync(copy, 0o755);
  const before = process.env.NATS_SERVER_BIN;
  process.env.NATS_SERVER_BIN = copy;
  t.after(() => {
    if (before === undefined) delete process.env.NATS_SERVER_BIN;
    else process.env.NATS_SERVER_BIN = before;
  });
  assert.equal(natsServerBin(), copy);
  const servers = new LocalBackend();
  t.after(() => servers.cleanup());
  const node = await servers.startNats();
  assert.ok(node.pid !== undefined);
  assert.equal(readlinkSync(`/proc/${node.pid}/exe`), copy, "the process runs the binary NATS_SERVER_BIN names");
});

test("NATS_SERVER_BIN that is no executable fails with the variable's name", () => {
  assert.throws(() => natsServerBin({ NATS_SERVER_BIN: "/nonexistent/nats-server" }), /NATS_SERVER_BIN=\/nonexistent\/nats-server: not an executable file/);
  assert.throws(() => createBackend({ NATS_SERVER_BIN: "/nonexistent/nats-server" }), /NATS_SERVER_BIN/);
});

test("the binary's version, and what a test needing a newer one says", () => {
  const v = natsServerVersion();
  assert.match(v ?? "", /^\d+\.\d+\.\d+/);
  assert.equal(needsServer("2.0"), false);
  assert.equal(needsServer("99.0"), `skipped: needs 99.0+ (nats-server ${v} here)`);
  assert.ok(compareVersions("2.9.10", "2.10") < 0);
  assert.ok(compareVersions("2.11.0-RC.1", "2.11") === 0);
  assert.ok(compareVersions("2.14.5", "2.12.0") > 0);
});
