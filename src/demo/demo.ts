import { createWriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { headers, nanos } from "@nats-io/nats-core";
import type { NatsConnection } from "@nats-io/nats-core";
import { parseConfigText } from "../config/load.js";
import { createLogger } from "../observability/logger.js";
import { histogramQuantile } from "../observability/quantile.js";
import { Relay } from "../relay/relay.js";
import { DemoNatsServer } from "./local-server.js";

export interface DemoOptions {
  readonly messages: number;
  readonly out: (line: string) => void;
}

const REGIONS = ["east", "west"] as const;

/**
 * Two local regions, a relay in each (east→west and west→east, guarded), traffic from both sides, the
 * west region SIGKILLed mid-transfer and restarted, and the numbers. Returns true when both regions end
 * up with every message exactly once.
 */
export async function runDemo(opts: DemoOptions): Promise<boolean> {
  const { out } = opts;
  const logPath = join(tmpdir(), `jetstream-relay-demo-${process.pid}.log`);
  const logger = createLogger({ level: "info", destination: createWriteStream(logPath) });
  const servers: DemoNatsServer[] = [];
  const clients: NatsConnection[] = [];
  const relays: Relay[] = [];
  try {
    out("starting two regions (nats-server with JetStream on loopback)...");
    for (const r of REGIONS) servers.push(await DemoNatsServer.start(r));
    const [east, west] = servers as [DemoNatsServer, DemoNatsServer];
    for (const s of servers) {
      const nc = await connect({ servers: s.url, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
      clients.push(nc);
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "ORDERS", subjects: ["orders.>"], duplicate_window: nanos(120_000) });
    }
    const config = parseConfigText(
      `regions:
  east: { servers: ["${east.url}"] }
  west: { servers: ["${west.url}"] }
links:
  - { name: east-to-west, from: { region: east, stream: ORDERS }, to: { region: west, stream: ORDERS }, ackWait: 5s, publishTimeout: 2s, guard: { memory: true } }
  - { name: west-to-east, from: { region: west, stream: ORDERS }, to: { region: east, stream: ORDERS }, ackWait: 5s, publishTimeout: 2s, guard: { memory: true } }
`,
      "demo",
    );
    for (const r of REGIONS) {
      const relay = new Relay(config, r, { logger, pollIntervalMs: 250 });
      relays.push(relay);
      await relay.start();
    }
    out(`relays running: east-to-west (in west) and west-to-east (in east); logs in ${logPath}`);

    const started = Date.now();
    const perRegion = opts.messages;
    const traffic = Promise.all(
      REGIONS.map((r, i) => publishTraffic(() => clients[i] as NatsConnection, r, perRegion)),
    );
    await waitFor(async () => (await count(clients[1] as NatsConnection)) > perRegion * 0.6, 60_000);
    out(`cutting region west (SIGKILL) mid-transfer...`);
    const cutAt = Date.now();
    await west.kill();
    await new Promise((r) => setTimeout(r, 3_000));
    await west.restart();
    const outageSeconds = (Date.now() - cutAt) / 1000;
    out(`region west is back after ${outageSeconds.toFixed(1)} s; relays recover by themselves`);
    const published = await traffic;
    const totalPublished = published.reduce((a, b) => a + b, 0);
    const want = totalPublished;
    await waitFor(async () => (await count(clients[0] as NatsConnection)) >= want && (await count(clients[1] as NatsConnection)) >= want, 120_000);
    const elapsed = (Date.now() - started) / 1000;

    out("");
    out(`published: east ${published[0]}, west ${published[1]} (${totalPublished} in all) in ${elapsed.toFixed(1)} s`);
    let ok = true;
    for (const [i, r] of REGIONS.entries()) {
      const relay = relays[i] as Relay;
      const link = relay.linkConfigs[0]?.name ?? "";
      const m = async (name: string, labels: Record<string, string>) => sumMetric(relay, name, { link, ...labels });
      const p50 = await histogramQuantile(relay.registry, "relay_replay_age_seconds", 0.5, { link });
      const p99 = await histogramQuantile(relay.registry, "relay_replay_age_seconds", 0.99, { link });
      out(
        `link ${link}: relayed ${await m("relay_messages_total", { outcome: "relayed" })}, ` +
          `loops stopped ${await m("relay_messages_total", { outcome: "loop" })}, ` +
          `duplicates suppressed ${await m("relay_corrections_total", {})} ` +
          `(broker ${await m("relay_corrections_total", { kind: "broker_duplicate" })}, guard ${await m("relay_corrections_total", { kind: "guard_duplicate" })}), ` +
          `recoveries ${await m("relay_recoveries_total", {})}, ` +
          `replay age p50 ${fmt(p50)} p99 ${fmt(p99)}`,
      );
      const check = await equality(clients[i] as NatsConnection, want);
      out(`region ${r}: ${check.total} messages, ${check.unique} unique ids, ${check.duplicates} duplicates -> ${check.ok ? "OK" : "MISMATCH"}`);
      ok &&= check.ok;
    }
    out(ok ? "\nfinal equality check: both regions hold every message exactly once" : "\nfinal equality check FAILED");
    return ok;
  } finally {
    await Promise.all(relays.map((r) => r.stop(AbortSignal.timeout(5_000))));
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(servers.map((s) => s.destroy()));
  }
}

async function publishTraffic(nc: () => NatsConnection, region: string, n: number): Promise<number> {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const h = headers();
      h.set("Nats-Msg-Id", `${region}-order-${i}`);
      // The region may be down for a while: retry the same id until stored (dedup makes that safe).
      for (;;) {
        try {
          await jetstream(nc()).publish(`orders.${region}.${i % 10}`, new TextEncoder().encode(`order ${i} from ${region}`), { headers: h, timeout: 2_000 });
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  };
  await Promise.all(Array.from({ length: 64 }, worker));
  return n;
}

async function count(nc: NatsConnection): Promise<number> {
  try {
    return (await (await jetstreamManager(nc)).streams.info("ORDERS")).state.messages;
  } catch {
    return 0;
  }
}

async function equality(nc: NatsConnection, want: number) {
  const lastSeq = (await (await jetstreamManager(nc)).streams.info("ORDERS")).state.last_seq;
  const consumer = await jetstream(nc).consumers.get("ORDERS");
  const ids = new Set<string>();
  let total = 0;
  const iter = await consumer.consume({ max_messages: 1_000 });
  // Ends on the stream's last sequence: a consumer's `pending` can read 0 early after a region restart.
  for await (const m of iter) {
    total++;
    ids.add(m.headers?.get("Nats-Msg-Id") ?? "");
    if (m.seq >= lastSeq) break;
  }
  await iter.close();
  return { total, unique: ids.size, duplicates: total - ids.size, ok: total === want && ids.size === want };
}

async function sumMetric(relay: Relay, name: string, labels: Record<string, string>): Promise<number> {
  const metric = relay.registry.getSingleMetric(name);
  if (!metric) return 0;
  let sum = 0;
  for (const v of (await metric.get()).values) {
    const l = v.labels as Record<string, string | number>;
    if (Object.entries(labels).every(([k, want]) => String(l[k]) === want)) sum += v.value;
  }
  return sum;
}

async function waitFor(cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`demo: condition not reached within ${timeoutMs / 1000}s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function fmt(seconds: number | undefined): string {
  if (seconds === undefined) return "n/a";
  return seconds < 1 ? `${(seconds * 1000).toFixed(0)} ms` : `${seconds.toFixed(2)} s`;
}
