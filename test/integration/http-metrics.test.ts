import { test } from "node:test";
import assert from "node:assert/strict";
import { check } from "../helpers/check.js";
import { publishMany } from "../helpers/streams.js";
import { startRelay } from "../helpers/relays.js";
import { linkYaml, publishIds, waitForCount, twoRegions } from "../helpers/scenario.js";

/** Parses Prometheus text exposition into `name{labels} -> value`. */
function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

test("/metrics counts what the test sent; /status, /readyz and /healthz answer", async (t) => {
  const { a, b, src, dst, nca, ncb } = await twoRegions(t);
  // 500 new messages, plus 20 that B already holds under the same ids: the broker reports those as duplicates.
  await publishMany(ncb, 20, (i) => ({ subject: `${src}.0`, headers: { "Nats-Msg-Id": `m-${i}` } }));
  await publishIds(nca, src, "m", 520);
  const { url } = await startRelay(
    t,
    linkYaml({ regions: { a: [a.url], b: [b.url] }, links: [{ name: "a-to-b", from: "a", fromStream: src, to: "b", toStream: dst }] }),
    "b",
    { http: true },
  );
  await waitForCount(ncb, dst, 520, 30_000);
  const metrics = await check(
    async () => {
      const m = parseMetrics(await (await fetch(`${url}/metrics`)).text());
      return m.get('relay_messages_total{link="a-to-b",outcome="relayed"}') === 500 ? m : undefined;
    },
    { name: "relayed counter at 500", timeoutMs: 10_000 },
  );
  assert.equal(metrics.get('relay_messages_total{link="a-to-b",outcome="duplicate"}'), 20);
  assert.equal(metrics.get('relay_corrections_total{link="a-to-b",kind="broker_duplicate"}'), 20);
  assert.equal(metrics.get('relay_replay_age_seconds_count{link="a-to-b"}'), 500);
  assert.equal(metrics.get('relay_publish_duration_seconds_count{link="a-to-b"}'), 520);
  await check(async () => parseMetrics(await (await fetch(`${url}/metrics`)).text()).get('relay_link_state{link="a-to-b",state="live"}') === 1, {
    name: "link state live in /metrics",
  });
  // The backlog gauge is refreshed by a probe of the source: poll until it has seen the caught-up state.
  const m2 = await check(
    async () => {
      const m = parseMetrics(await (await fetch(`${url}/metrics`)).text());
      return m.get('relay_backlog_messages{link="a-to-b"}') === 0 ? m : undefined;
    },
    { name: "backlog gauge back to 0", timeoutMs: 10_000 },
  );
  assert.equal(m2.get('relay_link_up{link="a-to-b"}'), 1);
  assert.equal(m2.get('relay_backlog_age_seconds{link="a-to-b"}'), 0);
  assert.equal(m2.get('relay_link_state{link="a-to-b",state="recovering"}'), 0);

  assert.equal((await fetch(`${url}/healthz`)).status, 200);
  assert.equal((await fetch(`${url}/readyz`)).status, 200);
  const status = (await (await fetch(`${url}/status`)).json()) as {
    region: string;
    links: { name: string; state: string; corrections: Record<string, number> }[];
  };
  assert.equal(status.region, "b");
  assert.deepEqual(status.links[0]?.corrections, { broker_duplicate: 20, guard_duplicate: 0, stale_version: 0, kv_conflict: 0 });
  assert.deepEqual(status.links.map((l) => [l.name, l.state]), [["a-to-b", "live"]]);
  assert.equal((await fetch(`${url}/nope`)).status, 404);
});
