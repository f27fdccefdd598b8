/**
 * npx tsx bench/verify-bench.ts — `verify` over two streams of 1,000,000 small messages each: wall time
 * and peak RSS (VmHWM) of the verifying process, which must stay under 512 MB.
 *
 * Two local nats-servers (from PATH). The source gets COUNT messages with ids, entity and version
 * headers; the destination gets the copies the relay would have written (Relay-Source etc.), minus the
 * last 1,000 (in flight) and minus 10 deleted ones (missing). The verifier runs in a child process —
 * this same file with `--child` — so its RSS is its own: it reads /proc/self/status after the verify.
 * BENCH_MESSAGES overrides the count (e.g. 100000 for a quick look).
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { headers, nanos } from "@nats-io/nats-core";
import type { MsgHdrs, NatsConnection } from "@nats-io/nats-core";
import { verifyCommand } from "../src/cli/verify-command.js";
import { fillStream } from "../test/helpers/fill.js";
import type { VerifyReport } from "../src/verify/report.js";
import { LocalBackend } from "../test/helpers/local-backend.js";
import { peakRssMb, serverLabel, writeBenchConfig } from "./common.js";

const COUNT = Number(process.env.BENCH_MESSAGES ?? 1_000_000);
const IN_FLIGHT = 1_000;
const DELETED = 10;
const payload = new TextEncoder().encode("x".repeat(100));

function msgHeaders(i: number, relayedFrom?: string): MsgHdrs {
  const h = headers();
  h.set("Nats-Msg-Id", `order-${i}`);
  h.set("Entity-Id", `customer-${i % 100_000}`);
  h.set("Entity-Version", String(Math.floor(i / 100_000)));
  if (relayedFrom) {
    h.set("Relay-Origin", "a");
    h.set("Relay-Path", "a");
    h.set("Relay-Source", `a ${relayedFrom} ${i + 1}`);
  }
  return h;
}

/** Pipelined publishing, 4,096 in flight, in order on one connection. Returns msgs/s. */
function fill(nc: NatsConnection, subject: string, count: number, make: (i: number) => MsgHdrs): Promise<number> {
  return fillStream(nc, subject, count, { payload, headers: make });
}

async function addStream(nc: NatsConnection, name: string, subjects: string[]): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name, subjects, retention: RetentionPolicy.Limits, storage: StorageType.File, duplicate_window: nanos(60_000) });
}

async function main(): Promise<void> {
  const servers = new LocalBackend();
  try {
    console.log(`verify benchmark: ${COUNT} messages a side, ${serverLabel()}`);
    const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
    const nca = await connect({ servers: a.url });
    const ncb = await connect({ servers: b.url });
    await addStream(nca, "SRC", ["orders.>"]);
    await addStream(ncb, "DST", ["orders.>"]);
    const rates = await Promise.all([
      fill(nca, "orders", COUNT, (i) => msgHeaders(i)),
      fill(ncb, "orders", COUNT - IN_FLIGHT, (i) => msgHeaders(i, "SRC")),
    ]);
    console.log(`filled both streams at ${rates.map((r) => Math.round(r)).join(" / ")} msgs/s`);
    const jsm = await jetstreamManager(ncb);
    for (let k = 1; k <= DELETED; k++) await jsm.streams.deleteMessage("DST", Math.floor((k * (COUNT - IN_FLIGHT)) / (DELETED + 1)));
    await Promise.all([nca.close(), ncb.close()]);
    const config = await writeBenchConfig(
      a.url,
      b.url,
      `    guard: { memory: true, versions: { entity: "header:Entity-Id", version: "header:Entity-Version" } }`,
    );

    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), "--child", "--config", config, "--link", "bench", "--json"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const started = performance.now();
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    const seconds = (performance.now() - started) / 1000;
    const rss = /peak RSS (\d+(?:\.\d+)?) MB/.exec(err)?.[1];
    if (code !== 1 || !rss) throw new Error(`verify exited ${code}, expected 1 (the planted differences)\n${err}`);
    const r = JSON.parse(out) as VerifyReport;
    console.log(
      `verify: ${seconds.toFixed(1)} s wall (process start to exit; ${(r.elapsedMs / 1000).toFixed(1)} s verifying), peak RSS ${Number(rss).toFixed(0)} MB` +
        ` (limit 512 MB), ${Math.round((r.source.examined + r.destination.examined) / (r.elapsedMs / 1000))} msgs/s`,
    );
    console.log(
      `found: missing ${r.missing.count} (planted ${DELETED}), not yet relayed ${r.notYetRelayed.count} (planted ${IN_FLIGHT}), ` +
        `duplicated ${r.duplicated.count}, backwards ${r.backwards?.count}; examined ${r.source.examined} + ${r.destination.examined}`,
    );
  } finally {
    await servers.cleanup();
  }
}

/** The verifying process: the command as the CLI runs it, then its own peak RSS on stderr. */
async function child(argv: readonly string[]): Promise<number> {
  const code = await verifyCommand(argv);
  console.error(`peak RSS ${(peakRssMb("self") ?? Number.NaN).toFixed(1)} MB`);
  return code;
}

const isChild = process.argv[2] === "--child";
(isChild ? child(process.argv.slice(3)) : main().then(() => 0)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(isChild ? 3 : 1);
  },
);
