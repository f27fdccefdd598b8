import { stat } from "node:fs/promises";
import type { RelayConfig } from "./types.js";

/** A file holding secrets that users other than its owner can read. */
export interface LooseFile {
  readonly what: string;
  readonly path: string;
  /** Permission bits, e.g. 0o644. */
  readonly mode: number;
}

/**
 * The config file and the credential files it names (NATS creds and nkey seeds, TLS private keys)
 * that are readable by the file's group or by everyone: they hold passwords, tokens or keys. Files
 * that cannot be read are left to the checks that open them.
 */
export async function looseSecretFiles(configPath: string, config: RelayConfig): Promise<LooseFile[]> {
  const files: { what: string; path: string }[] = [{ what: "config file", path: configPath }];
  for (const r of config.regions.values()) {
    if (r.auth?.kind === "creds") files.push({ what: `region ${r.name} creds file`, path: r.auth.credsFile });
    if (r.auth?.kind === "nkey") files.push({ what: `region ${r.name} nkey seed file`, path: r.auth.seedFile });
    if (r.tls?.keyFile) files.push({ what: `region ${r.name} TLS key file`, path: r.tls.keyFile });
  }
  for (const l of config.links) {
    const store = l.guard?.store;
    if (store?.kind === "redis" && store.tls?.keyFile) files.push({ what: `link ${l.name} guard TLS key file`, path: store.tls.keyFile });
  }
  const seen = new Set<string>();
  const loose: LooseFile[] = [];
  for (const f of files) {
    if (seen.has(f.path)) continue;
    seen.add(f.path);
    const mode = await stat(f.path).then(
      (s) => s.mode & 0o777,
      () => undefined,
    );
    if (mode !== undefined && (mode & 0o044) !== 0) loose.push({ ...f, mode });
  }
  return loose;
}
