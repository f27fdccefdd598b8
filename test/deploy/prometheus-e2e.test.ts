/**
 * The shipped correction-ratio rule, evaluated by a real Prometheus scraping a real relay:
 * clean traffic keeps relay:correction_ratio:rate10m below RelayCorrectionRateHigh's threshold,
 * duplicates push it above. The alert's `for:` (minutes) is not waited out; the test asserts the
 * expression crossing the threshold and the alert turning pending.
 *
 * Needs Debian's `prometheus` package (fails, does not skip, without it) and nats-server.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { check } from "../helpers/check.js";
import { publishMany } from "../helpers/streams.js";
import { REPO_ROOT, startRelay } from "../helpers/relays.js";
import { linkYaml, publishIds, waitForCount, twoRegions } from "../helpers/scenario.js";
import { requirePrometheus, startPrometheus } from "../helpers/prometheus.js";
import type { Prometheus } from "../helpers/prometheus.js";

const ALERTS_FILE = join(REPO_ROOT, "deploy/prometheus/alerts.yml");
const ALERT = "RelayCorrectionRateHigh";
const LINK = "a-to-b";

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
}

/** The ratio series and threshold RelayCorrectionRateHigh uses, read from the shipped file. */
function correctionRule(): { ratio: string; threshold: number } {
  const doc = parse(readFileSync(ALERTS_FILE, "utf8")) as { groups: { rules: Rule[] }[] };
  const rules = doc.groups.flatMap((g) => g.rules);
  const alert = rules.find((r) => r.alert === ALERT);
  assert.ok(alert, `${ALERT} is in ${ALERTS_FILE}`);
  const m = /^\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*>\s*([0-9.eE+-]+)\s*$/.exec(alert.expr);
  assert.ok(m, `${ALERT}'s expr has the form "<recorded ratio> > <threshold>": ${alert.expr}`);
  const [, ratio = "", threshold = ""] = m;
  assert.ok(
    rules.some((r) => r.record === ratio),
    `${ratio} is a recording rule in ${ALERTS_FILE}`,
  );
  return { ratio, threshold: Number(threshold) };
}

/** The link's single value of `expr` in Prometheus, or undefined when absent. */
async function linkValue(prom: Prometheus, expr: string): Promise<number | undefined> {
  const samples = await prom.query(expr);
  const mine = samples.filter((s) => s.metric.link === LINK);
  assert.ok(mine.length <= 1, `${expr}: one series for link ${LINK}, got ${JSON.stringify(samples)}`);
  return mine[0]?.value;
}

test(
  "Prometheus evaluates the shipped correction-ratio rule: below threshold clean, above it with duplicates",
  { timeout: 120_000 },
  async (t) => {
    requirePrometheus(); // fail before starting any server
    const { ratio, threshold } = correctionRule();
    assert.ok(threshold > 0 && threshold < 0.1, `threshold ${threshold} is a plausible ratio`);

    const { a, b, src, dst, nca, ncb } = await twoRegions(t);
    const { url } = await startRelay(
      t,
      linkYaml({
        regions: { a: [a.url], b: [b.url] },
        links: [{ name: LINK, from: "a", fromStream: src, to: "b", toStream: dst }],
      }),
      "b",
      { http: true },
    );
    const prom = await startPrometheus(t, { targets: [url], ruleFiles: [ALERTS_FILE] });
    const messages = `sum by (link) (relay_messages_total{job="jetstream-relay",link="${LINK}"})`;
    const corrections = `sum by (link) (relay_corrections_total{job="jetstream-relay",link="${LINK}",kind="broker_duplicate"})`;

    // Prometheus loaded the shipped file and scrapes the relay.
    const groups = await prom.rules();
    const loaded = groups.flatMap((g) => g.rules.map((r) => r.name));
    assert.ok(
      loaded.includes(ratio) && loaded.includes(ALERT),
      `Prometheus loaded ${ratio} and ${ALERT}: ${loaded.join(", ")}`,
    );
    await check(async () => (await prom.query('up{job="jetstream-relay"}')).some((s) => s.value === 1), {
      name: 'Prometheus: up{job="jetstream-relay"} == 1',
      timeoutMs: 15_000,
      intervalMs: 250,
    });

    // rate() only counts increases between two scrapes of a series, so whatever a counter holds
    // when Prometheus first sees it never enters the ratio. The relay creates every outcome and
    // correction series at 0 when the link starts (src/link/outcome-counters.ts); wait until
    // Prometheus has scraped those zeros before sending the traffic the test measures.
    await check(
      async () => (await linkValue(prom, messages)) === 0 && (await linkValue(prom, corrections)) === 0,
      {
        name: `Prometheus sees relay_messages_total and relay_corrections_total for ${LINK} at 0 before any traffic`,
        timeoutMs: 15_000,
        intervalMs: 250,
      },
    );

    // ---- clean traffic: 2,000 new messages.
    await publishIds(nca, src, "clean", 2_000);
    await waitForCount(ncb, dst, 2_000, 30_000, "(clean traffic)");
    const clean = await check(
      async () => {
        const total = await linkValue(prom, messages);
        const r = await linkValue(prom, ratio);
        return total === 2_000 && r !== undefined ? { r } : undefined;
      },
      {
        name: `Prometheus sees 2,000 messages on ${LINK} and a recorded ${ratio}`,
        timeoutMs: 20_000,
        intervalMs: 250,
      },
    );
    assert.equal(clean.r, 0, `${ratio} is 0 with no corrections`);
    assert.ok(clean.r < threshold, `${ratio} = ${clean.r} is below ${ALERT}'s threshold ${threshold}`);
    assert.equal(await linkValue(prom, corrections), 0, "no corrections on clean traffic");
    assert.deepEqual(
      (await prom.alerts()).filter((al) => al.labels.alertname === ALERT),
      [],
      `${ALERT} is not pending on clean traffic`,
    );

    // ---- duplicates: 500 ids that B already holds, mixed into 1,000 messages.
    await publishMany(ncb, 500, (i) => ({
      subject: `${src}.${i % 5}`,
      headers: { "Nats-Msg-Id": `dup-${i}` },
    }));
    // Even i: an id B already has; odd i: a new one.
    await publishMany(nca, 1_000, (i) => ({
      subject: `${src}.${i % 5}`,
      headers: { "Nats-Msg-Id": i % 2 === 0 ? `dup-${i / 2}` : `new-${i}` },
    }));
    // 2,000 clean + 500 pre-published + 500 new.
    await waitForCount(ncb, dst, 3_000, 30_000, "(duplicates phase)");

    const started = Date.now();
    const high = await check(
      async () => {
        const r = await linkValue(prom, ratio);
        return r !== undefined && r > threshold ? { r } : undefined;
      },
      {
        name: `Prometheus: ${ratio}{link="${LINK}"} > ${threshold} after 500 duplicates`,
        timeoutMs: 60_000,
        intervalMs: 250,
      },
    );
    t.diagnostic(
      `${ratio} first read ${high.r.toFixed(4)} (threshold ${threshold}) ${Date.now() - started} ms after the duplicates landed`,
    );

    // A scrape can land mid-burst, so the first value above the threshold may be partial. Once
    // Prometheus has every message, the ratio is exactly 500/3,000: all of the link's series were
    // created together at 0 and are scraped together, so rate() extrapolates them alike.
    const settled = await check(
      async () => {
        const [c, m, r] = [
          await linkValue(prom, corrections),
          await linkValue(prom, messages),
          await linkValue(prom, ratio),
        ];
        return c === 500 && m === 3_000 && r !== undefined && Math.abs(r - 500 / 3_000) < 1e-9
          ? { r }
          : undefined;
      },
      {
        name: `Prometheus sees 500 broker duplicates of 3,000 messages and ${ratio} == 500/3000`,
        timeoutMs: 15_000,
        intervalMs: 250,
      },
    );
    assert.ok(settled.r > threshold);
    assert.equal(
      await linkValue(prom, `relay_messages_total{job="jetstream-relay",link="${LINK}",outcome="duplicate"}`),
      500,
    );

    // The alert's own expression is true now: it turns pending (it fires only after its `for:`).
    const pending = await check(
      async () =>
        (await prom.alerts()).find((al) => al.labels.alertname === ALERT && al.labels.link === LINK),
      { name: `${ALERT} pending for ${LINK}`, timeoutMs: 10_000, intervalMs: 250 },
    );
    assert.equal(pending.state, "pending");
    assert.ok(Number(pending.value) > threshold);

    // Every rule of the shipped group evaluates without error against real relay metrics.
    const unhealthy = (await prom.rules())
      .flatMap((g) => g.rules)
      .filter((r) => r.health !== "ok")
      .map((r) => `${r.name}: ${r.health} ${r.lastError ?? ""}`);
    assert.deepEqual(unhealthy, []);
  },
);
