/**
 * The one interface the tests use to get real servers. Two backends implement it:
 * local processes (nats-server / redis-server from PATH; the default here) and Testcontainers
 * (picked when a Docker engine is reachable and RELAY_TEST_BACKEND=containers).
 */
export interface ManagedProcess {
  /** Graceful stop (SIGTERM), waits for exit. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL, waits for exit. */
  kill(): Promise<void>;
  /** Starts again on the same ports and data dir, waits until it accepts connections. */
  restart(): Promise<void>;
  /** SIGSTOP / SIGCONT. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  readonly running: boolean;
  /** OS process id while running (local backend only); lets tests prove cleanup left nothing behind. */
  readonly pid?: number;
}

export interface NatsNode extends ManagedProcess {
  readonly name: string;
  /** nats://127.0.0.1:PORT (or tls:// when TLS is on). */
  readonly url: string;
  readonly port: number;
  readonly monitorPort: number;
  readonly storeDir: string;
}

export interface NatsCluster {
  readonly name: string;
  readonly nodes: readonly NatsNode[];
  /** Client URLs of every node. */
  readonly urls: readonly string[];
  stop(): Promise<void>;
  /** Waits until every running node reports /healthz ok and a JetStream meta leader is elected. */
  waitHealthy?(timeoutMs?: number): Promise<void>;
}

export interface NatsOptions {
  /** Server name; unique per test by default. */
  name?: string;
  /** JetStream on (default true). */
  jetstream?: boolean;
  /** JetStream domain. */
  domain?: string;
  /** Leafnode listener on a free port (its port is `leafPort` on the node). */
  leafListen?: boolean;
  /** Connect as a leafnode to the hub at these URLs (nats-leaf://127.0.0.1:PORT; one remote, one connection). */
  leafRemotes?: string[];
  /**
   * Tell neither leafnodes nor clients about this server's other URLs (`no_advertise` on the leafnode
   * listener and the cluster). Without it a leafnode remote or a client that reached the cluster
   * through a proxy learns the direct URLs, and its next (re)connect goes around the proxy.
   */
  noAdvertise?: boolean;
  /** TLS for clients: PEM files. */
  tls?: { certFile: string; keyFile: string; caFile?: string };
  /** Require user/password. */
  user?: { user: string; password: string };
  /** Require a token. */
  token?: string;
  /** Extra lines appended to the generated config file. */
  extraConfig?: string;
}

export interface RedisNode extends ManagedProcess {
  readonly url: string;
  readonly port: number;
}

export interface RedisOptions {
  appendonly?: boolean;
  /** AOF fsync policy (Redis default everysec); `always` when a test kills Redis right after a write. */
  appendfsync?: "always" | "everysec";
  password?: string;
}

export interface ServerBackend {
  readonly name: "local" | "containers";
  startNats(opts?: NatsOptions): Promise<NatsNode & { readonly leafPort?: number }>;
  startNatsCluster(opts?: { size?: number; name?: string; domain?: string }): Promise<NatsCluster>;
  startRedis(opts?: RedisOptions): Promise<RedisNode>;
  /** Stops everything this backend started. Idempotent. */
  cleanup(): Promise<void>;
}
