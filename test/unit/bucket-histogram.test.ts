import { test } from "node:test";
import assert from "node:assert/strict";
import { Histogram, Registry } from "prom-client";
import { BucketHistogram } from "../../src/observability/bucket-histogram.js";
import { histogramQuantile } from "../../src/observability/quantile.js";
import { forgetLinkSeries } from "../../src/relay/reload.js";

const BUCKETS = [0.001, 0.01, 0.1, 1, 10];
const VALUES = [0, 0.0005, 0.001, 0.0011, 0.05, 0.1, 0.7, 3, 10, 11, 1e6];

function both() {
  const ours = new Registry();
  const theirs = new Registry();
  const config = { name: "x_seconds", help: "a histogram", labelNames: ["link"] as const, buckets: BUCKETS };
  return {
    ours,
    theirs,
    a: new BucketHistogram({ ...config, registers: [ours] }),
    b: new Histogram({ ...config, registers: [theirs] }),
  };
}

test("BucketHistogram exposes exactly what prom-client's histogram does for the same observations", async () => {
  const { ours, theirs, a, b } = both();
  for (const link of ["one", "two"]) {
    const sa = a.labels({ link });
    const sb = b.labels({ link });
    for (const v of link === "one" ? VALUES : VALUES.slice(3)) {
      sa.observe(v);
      sb.observe(v);
    }
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  // get() (what histogramQuantile, the tests and the reload's series removal read): the same samples.
  const samples = async (r: Registry) =>
    ((await r.getSingleMetric("x_seconds")?.get())?.values ?? []).map((v) => ({ name: (v as { metricName?: string }).metricName, labels: { ...v.labels }, value: v.value }));
  assert.deepEqual(await samples(ours), await samples(theirs));
  assert.equal(await histogramQuantile(ours, "x_seconds", 0.5, { link: "one" }), await histogramQuantile(theirs, "x_seconds", 0.5, { link: "one" }));
});

test("BucketHistogram: a bound series exists at 0 from its binding, is removed with its link, refuses non-finite values", async () => {
  const { ours, a } = both();
  const s = a.labels({ link: "gone" });
  a.labels({ link: "kept" }).observe(1);
  assert.match(await ours.metrics(), /x_seconds_count\{link="gone"\} 0/);
  await forgetLinkSeries(ours, "gone");
  const text = await ours.metrics();
  assert.doesNotMatch(text, /link="gone"/);
  assert.match(text, /x_seconds_count\{link="kept"\} 1/);
  assert.throws(() => s.observe(Number.NaN), /not a finite number/);
});
