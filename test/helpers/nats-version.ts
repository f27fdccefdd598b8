/**
 * Which nats-server the tests, the fault tests and the benches run: `NATS_SERVER_BIN=/path/to/nats-server`
 * picks a binary, else `nats-server` from PATH. Its version is read once (`--version`), and a test of a
 * feature a newer server has is declared with `{ skip: needsServer("2.11") }`: it runs when the binary is
 * 2.11 or newer and is reported as "skipped: needs 2.11+ (nats-server 2.9.10 here)" otherwise.
 */
import { accessSync, constants } from "node:fs";
import { execFileSync } from "node:child_process";
import { requireBinary } from "./local-process.js";

let resolved: string | undefined;
let version: string | undefined | null = null;

/** The nats-server binary: NATS_SERVER_BIN (which must be an executable file), else `nats-server` from PATH. */
export function natsServerBin(env: NodeJS.ProcessEnv = process.env): string {
  const wanted = env.NATS_SERVER_BIN;
  if (wanted === undefined || wanted === "") return requireBinary("nats-server", "nats-server");
  if (env === process.env && resolved === wanted) return wanted;
  try {
    accessSync(wanted, constants.X_OK);
  } catch (err) {
    throw new Error(`NATS_SERVER_BIN=${wanted}: not an executable file (${err instanceof Error ? err.message : String(err)})`);
  }
  if (env === process.env) resolved = wanted;
  return wanted;
}

/** The version the binary reports (`nats-server: v2.9.10` → `2.9.10`), read once; undefined when it says none. */
export function natsServerVersion(): string | undefined {
  if (version === null) {
    const out = execFileSync(natsServerBin(), ["--version"], { encoding: "utf8", timeout: 10_000 });
    version = /v?(\d+\.\d+\.\d+[\w.-]*)/.exec(out)?.[1];
  }
  return version;
}

/** `a` compared with `b` by their numeric major.minor.patch (a pre-release counts as its release). */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string) => (/^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(v) ?? []).slice(1, 4).map((n) => Number(n ?? 0));
  const [x, y] = [parts(a), parts(b)];
  for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
}

/** Whether the binary is `min` (`2.11`, `2.11.0`) or newer; an unknown version counts as new. */
export function serverSupports(min: string): boolean {
  const v = natsServerVersion();
  return v === undefined || compareVersions(v, min) >= 0;
}

/** node:test's `skip` for a test that needs nats-server `min`+: false to run it, else the reason. */
export function needsServer(min: string): false | string {
  return serverSupports(min) ? false : `skipped: needs ${min}+ (nats-server ${natsServerVersion() ?? "?"} here)`;
}
