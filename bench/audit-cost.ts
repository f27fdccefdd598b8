/**
 * The continuous audit's cost against the relay's (issue #37): a relay process relays COUNT messages
 * (broker dedup only, loopback), then this process reads the destination as a range pass of the audit
 * does (src/audit: headers only, in chunks, each copy's Relay-Source marker into one bit per source
 * seq, then the seqs without a copy) and the CPU per 100,000 of each is printed with their ratio, and
 * what the audit would cost at 10,000 msgs/s. The audit's budget is 10 % of the relay's CPU.
 *
 * Row group `audit` of `npm run bench` (BENCH_ONLY=audit for this row alone).
 */
import { connect } from "@nats-io/transport-node";
import { parseConfigText } from "../src/config/load.js";
import { CopyReader } from "../src/audit/copies.js";
import { RangeRecord } from "../src/audit/range-record.js";
import { readStream } from "../src/nats/stream-reader.js";
import type { LocalBackend } from "../test/helpers/local-backend.js";
import { RelayProcess } from "../test/helpers/relays.js";
import { addStream, cpuSeconds, fill, relayCpuMeter, timeUntilFull, writeBenchConfig } from "./common.js";

/** Chunks of 20,000 (audit.maxReadRate sizes them in link-audit.ts, up to 50,000): the per-message cost is what is measured. */
const CHUNK = 20_000;

export async function auditCostRows(servers: LocalBackend, count: number): Promise<void> {
  const [a, b] = await Promise.all([servers.startNats(), servers.startNats()]);
  const nca = await connect({ servers: a.url });
  const ncb = await connect({ servers: b.url });
  try {
    await addStream(nca, "SRC", ["src.>"]);
    await addStream(ncb, "DST", ["src.>"]);
    await fill(nca, "src", count, "audit");
    const configPath = await writeBenchConfig(a.url, b.url, "", `http: { listen: "127.0.0.1:0" }\nlog: { level: warn }`);
    const proc = new RelayProcess(["run", "--config", configPath, "--region", "b"], {}, { compiled: true });
    let relayPer100k: number;
    try {
      const cpu = relayCpuMeter(proc.pid, count);
      await timeUntilFull(ncb, "DST", count, undefined, cpu.first);
      relayPer100k = cpu.per100k();
    } finally {
      proc.signal("SIGTERM");
      await proc.exited;
    }
    const { readFileSync } = await import("node:fs");
    const link = parseConfigText(readFileSync(configPath, "utf8"), "bench.yaml", process.env).links[0]!;
    const incarnation = Date.parse((await (await import("@nats-io/jetstream")).jetstreamManager(nca).then((j) => j.streams.info("SRC"))).created);

    const serverCpu0 = cpuSeconds(b.pid);
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    const copies = new CopyReader(link, incarnation);
    const record = new RangeRecord(0, count);
    const side = { nc: ncb, region: "b", stream: "DST" };
    let next = 1;
    for (;;) {
      const r = await readStream(side, { startSeq: next, maxMessages: CHUNK }, (m, seq) => {
        const c = copies.read(m, seq);
        if (c) record.note(c);
      });
      if (r.delivered < CHUNK) break;
      next = r.lastSeq + 1;
    }
    const gaps = record.gaps();
    const used = process.cpuUsage(cpu0);
    const seconds = (performance.now() - started) / 1000;
    const auditPer100k = ((used.user + used.system) / 1e6) * (100_000 / count);
    const serverPer100k = ((cpuSeconds(b.pid) - serverCpu0) * 100_000) / count;
    if (gaps.seqs.length !== 0) throw new Error(`audit bench: ${gaps.seqs.length} source seqs without a copy in a clean run`);
    const ratio = auditPer100k / relayPer100k;
    console.log(`\naudit (a range pass over ${count} relayed messages, loopback, R1):`);
    console.log(`  relay CPU per 100k relayed      ${relayPer100k.toFixed(2)} s`);
    console.log(`  audit CPU per 100k audited      ${auditPer100k.toFixed(2)} s  (${(count / seconds).toFixed(0)} msgs/s read; the destination server spent ${serverPer100k.toFixed(2)} s per 100k sending headers)`);
    console.log(`  ratio audit ÷ relay             ${ratio.toFixed(3)}  (budget 0.10)`);
    console.log(`  at 10,000 msgs/s: relay ${(relayPer100k * 10).toFixed(0)} % of a core, audit ${(auditPer100k * 10).toFixed(1)} % of a core`);
  } finally {
    await Promise.all([nca.close(), ncb.close()]);
  }
}
