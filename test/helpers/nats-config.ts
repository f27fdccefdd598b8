import type { NatsOptions } from "./types.js";

/** Everything a nats-server config needs beyond the user-facing NatsOptions. */
export interface NatsConfigInput {
  serverName: string;
  /** host:port for clients; port -1 = pick a free one (first start only). */
  listen: string;
  /** host:port for HTTP monitoring; port -1 = pick a free one. */
  http: string;
  /** JetStream store dir (as seen by the server process). */
  storeDir: string;
  /** host:port for the leafnode listener, when enabled. */
  leafListen?: string;
  /** Where nats-server writes `nats-server_<pid>.ports` (local backend only). */
  portsFileDir?: string;
  cluster?: { name: string; listen: string; routes: string[] };
  /** TLS file paths as seen by the server process (containers copy them in). */
  tls?: NatsOptions["tls"];
}

/** NATS config strings are JSON-compatible double-quoted strings, so JSON.stringify quotes safely. */
const q = (s: string): string => JSON.stringify(s);

/**
 * Renders a nats-server config file. Written as a file rather than CLI flags because several
 * settings (domain, leafnodes, authorization blocks) have no flag in nats-server 2.9.
 */
export function renderNatsConfig(input: NatsConfigInput, opts: NatsOptions = {}): string {
  const lines: string[] = [
    `server_name: ${q(input.serverName)}`,
    `listen: ${q(input.listen)}`,
    `http: ${q(input.http)}`,
  ];
  if (input.portsFileDir) lines.push(`ports_file_dir: ${q(input.portsFileDir)}`);

  if (opts.jetstream !== false) {
    const domain = opts.domain ? `, domain: ${q(opts.domain)}` : "";
    lines.push(`jetstream { store_dir: ${q(input.storeDir)}${domain} }`);
  }

  const tls = input.tls;
  if (tls) {
    const ca = tls.caFile ? `\n  ca_file: ${q(tls.caFile)}` : "";
    lines.push(`tls {\n  cert_file: ${q(tls.certFile)}\n  key_file: ${q(tls.keyFile)}${ca}\n  timeout: 5\n}`);
  }

  if (opts.user && opts.token) throw new Error("NatsOptions: user and token are mutually exclusive");
  if (opts.user) {
    lines.push(`authorization { user: ${q(opts.user.user)}, password: ${q(opts.user.password)} }`);
  } else if (opts.token) {
    lines.push(`authorization { token: ${q(opts.token)} }`);
  }

  const leaf: string[] = [];
  if (input.leafListen) leaf.push(`  listen: ${q(input.leafListen)}`);
  if (input.leafListen && opts.noAdvertise) leaf.push("  no_advertise: true");
  if (opts.leafRemotes?.length) {
    // One remote with every URL: the URLs are one hub (its cluster's nodes). A remote per URL would
    // connect to the same hub several times, which the hub refuses as a loop (and retries after 30 s).
    leaf.push(`  remotes: [ { urls: [ ${opts.leafRemotes.map(q).join(", ")} ] } ]`);
  }
  if (leaf.length) lines.push(`leafnodes {\n${leaf.join("\n")}\n}`);

  if (input.cluster) {
    const routes = input.cluster.routes.map(q).join(", ");
    lines.push(
      `cluster {\n  name: ${q(input.cluster.name)}\n  listen: ${q(input.cluster.listen)}\n  routes: [ ${routes} ]${opts.noAdvertise ? "\n  no_advertise: true" : ""}\n}`,
    );
  }

  if (opts.extraConfig) lines.push(opts.extraConfig);
  return lines.join("\n") + "\n";
}
