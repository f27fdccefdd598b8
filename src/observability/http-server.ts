import { timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";
import { ErrorCodes, RelayError } from "../errors.js";

export interface HttpDeps {
  readonly host: string;
  readonly port: number;
  readonly registry: Registry;
  /** JSON-safe status of the relay: must never contain a secret. */
  readonly status: () => unknown;
  /** Ready when every link is `live`, `catching-up` or `standby`. */
  readonly ready: () => { ready: boolean; reasons: string[] };
  /** Where the address came from, for errors (default `http.listen`). */
  readonly source?: string;
  /** Bearer token `/status` requires (and `/metrics` when `protectMetrics`). */
  readonly token?: string;
  readonly protectMetrics?: boolean;
}

const LISTEN_PROBLEMS: Readonly<Record<string, string>> = {
  EADDRINUSE: "the address is already in use (another relay, or another program, listens there)",
  EADDRNOTAVAIL: "the address is not one of this host's",
  EACCES: "not permitted (a port below 1024 needs privileges)",
  ENOTFOUND: "the host name does not resolve",
};

/** A listen failure as the operator can act on it: which setting, which address, what is wrong. */
function listenError(err: NodeJS.ErrnoException, host: string, port: number, source = "http.listen"): RelayError {
  const why = LISTEN_PROBLEMS[err.code ?? ""] ?? err.message;
  return new RelayError(ErrorCodes.HTTP_LISTEN, `${source} ${host}:${port}: cannot listen: ${why}`, { cause: err });
}

/**
 * `/metrics` (Prometheus text), `/healthz` (process liveness), `/readyz` (503 until every link moves
 * messages), `/status` (JSON per link). Lifecycle: `start()` resolves with the bound port, `stop()` is
 * idempotent.
 */
export class HttpServer {
  private server: Server | undefined;
  private stopping: Promise<void> | undefined;

  constructor(private readonly deps: HttpDeps) {}

  async start(): Promise<number> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        res.statusCode = 500;
        res.end(err instanceof Error ? err.message : "internal error");
      });
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once("error", (err: NodeJS.ErrnoException) => reject(listenError(err, this.deps.host, this.deps.port, this.deps.source)));
      server.listen(this.deps.port, this.deps.host, () => resolve());
    });
    return (server.address() as AddressInfo).port;
  }

  private authorized(req: IncomingMessage): boolean {
    const token = this.deps.token;
    if (token === undefined) return true;
    const header = req.headers.authorization ?? "";
    return header.startsWith("Bearer ") && tokensEqual(header.slice("Bearer ".length), token);
  }

  stop(): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      if (!this.server) return resolve();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    return this.stopping;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const protectedPath = path === "/status" || (path === "/metrics" && this.deps.protectMetrics === true);
    if (protectedPath && !this.authorized(req)) {
      res.writeHead(401, { "content-type": "application/json", "www-authenticate": 'Bearer realm="jetstream-relay"' });
      res.end(JSON.stringify({ error: `${path} needs the bearer token of http.token (Authorization: Bearer <token>)` }));
      return;
    }
    switch (path) {
      case "/metrics": {
        const body = await this.deps.registry.metrics();
        res.writeHead(200, { "content-type": this.deps.registry.contentType });
        res.end(body);
        return;
      }
      case "/healthz":
        return json(res, 200, { ok: true });
      case "/readyz": {
        const r = this.deps.ready();
        return json(res, r.ready ? 200 : 503, r);
      }
      case "/status":
        return json(res, 200, this.deps.status());
      default:
        return json(res, 404, { error: `no such endpoint ${path}; try /metrics /healthz /readyz /status` });
    }
  }
}

function tokensEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function json(res: ServerResponse, code: number, body: unknown): void {
  res.writeHead(code, { "content-type": "application/json" });
  res.end(JSON.stringify(body, null, 2));
}
