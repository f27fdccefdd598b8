import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { withServers } from "../helpers/servers.js";
import { uniqueName } from "../helpers/check.js";
import { makeTlsCerts } from "../helpers/tls.js";
import { connectTo, createStream } from "../helpers/streams.js";
import { spawnRelay, writeConfig } from "../helpers/relays.js";
import { assertExactlyOnce, publishIds, TEST_GROUP, waitForCount } from "../helpers/scenario.js";

test("a region over TLS with user/password from ${ENV}: the link works and the password appears nowhere", async (t) => {
  const password = `pw-${uniqueName("secret")}`;
  const certs = await makeTlsCerts(await mkdtemp(join(tmpdir(), "relay-tls-")));
  const servers = withServers(t);
  const [a, b] = await Promise.all([
    servers.startNats({ tls: { certFile: certs.certFile, keyFile: certs.keyFile }, user: { user: "relay", password } }),
    servers.startNats(),
  ]);
  const src = uniqueName("SRC");
  const dst = uniqueName("DST");
  const nca = await connectTo(t, a.url, { tls: { caFile: certs.caFile }, user: "relay", pass: password });
  const ncb = await connectTo(t, b.url);
  await createStream(nca, { name: src, subjects: [`${src}.>`] });
  await createStream(ncb, { name: dst, subjects: [`${src}.>`] });
  const ids = await publishIds(nca, src, "m", 1_000);
  const config = await writeConfig(`
regions:
  a:
    servers: ["${a.url}"]
    auth: { user: relay, password: "\${A_PASSWORD}" }
    tls: { ca: "${certs.caFile}" }
  b: { servers: ["${b.url}"] }
links:
  - { name: a-to-b, from: { region: a, stream: ${src} }, to: { region: b, stream: ${dst} } }
  - { name: broken, from: { region: a, stream: NO_SUCH_STREAM }, to: { region: b, stream: ${dst} } }
http: { listen: "127.0.0.1:0" }
log: { level: debug }
${TEST_GROUP}
`);
  const relay = spawnRelay(t, ["run", "--config", config, "--region", "b"], { A_PASSWORD: password });
  await waitForCount(ncb, dst, ids.length, 30_000);
  await assertExactlyOnce(ncb, dst, ids);
  const url = await relay.httpUrl();
  const status = await (await fetch(`${url}/status`)).text();
  const metrics = await (await fetch(`${url}/metrics`)).text();
  assert.match(status, /NO_SUCH_STREAM|STREAM_NOT_FOUND/, "the broken link reports its error in /status");
  relay.signal("SIGTERM");
  await relay.exited;
  for (const [where, text] of [["logs", relay.output()], ["/status", status], ["/metrics", metrics]] as const) {
    assert.ok(text.length > 0, `${where} is not empty`);
    assert.ok(!text.includes(password), `the password does not appear in ${where}`);
  }

  // A wrong password: the error names the region, not the secret.
  const wrong = `wrong-${password}`;
  const bad = spawnRelay(t, ["run", "--config", config, "--region", "b"], { A_PASSWORD: wrong });
  const code = await bad.exited;
  assert.equal(code, 1, "auth failure is a runtime failure");
  assert.match(bad.output(), /NATS_AUTH/);
  assert.ok(!bad.output().includes(wrong), "the wrong password does not appear in the error");
});
