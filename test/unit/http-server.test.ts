import { test } from "node:test";
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { HttpServer } from "../../src/observability/http-server.js";

const TOKEN = "0123456789abcdef-token";

async function serve(t: { after(fn: () => unknown): void }, opts: { token?: string; protectMetrics?: boolean }) {
  const http = new HttpServer({
    host: "127.0.0.1",
    port: 0,
    registry: new Registry(),
    status: () => ({ region: "b", links: [] }),
    ready: () => ({ ready: true, reasons: [] }),
    ...opts,
  });
  const port = await http.start();
  t.after(() => http.stop());
  const get = async (path: string, token?: string) =>
    (await fetch(`http://127.0.0.1:${port}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {})).status;
  return get;
}

test("with http.token, /status needs the bearer token; probes and metrics stay open", async (t) => {
  const get = await serve(t, { token: TOKEN });
  assert.equal(await get("/status"), 401);
  assert.equal(await get("/status", "wrong-token-of-some-length"), 401);
  assert.equal(await get("/status", TOKEN), 200);
  assert.equal(await get("/healthz"), 200);
  assert.equal(await get("/readyz"), 200);
  assert.equal(await get("/metrics"), 200);
});

test("protectMetrics puts /metrics behind the token too; without a token everything is open", async (t) => {
  const guarded = await serve(t, { token: TOKEN, protectMetrics: true });
  assert.equal(await guarded("/metrics"), 401);
  assert.equal(await guarded("/metrics", TOKEN), 200);
  const open = await serve(t, {});
  assert.equal(await open("/status"), 200);
});

test("an address in use is HTTP_LISTEN naming where the address came from", async (t) => {
  const first = new HttpServer({ host: "127.0.0.1", port: 0, registry: new Registry(), status: () => ({}), ready: () => ({ ready: true, reasons: [] }) });
  const port = await first.start();
  t.after(() => first.stop());
  const second = new HttpServer({ host: "127.0.0.1", port, registry: new Registry(), status: () => ({}), ready: () => ({ ready: true, reasons: [] }), source: "--http" });
  await assert.rejects(second.start(), (err: Error & { code?: string }) => err.code === "HTTP_LISTEN" && err.message === `--http 127.0.0.1:${port}: cannot listen: the address is already in use (another relay, or another program, listens there)`);
});
