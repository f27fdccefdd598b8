import type { Registry } from "prom-client";

/**
 * histogram_quantile() over one histogram in a registry, summed across the series matching `labels`:
 * linear interpolation inside the bucket, as Prometheus does. Undefined when nothing was observed.
 */
export async function histogramQuantile(
  registry: Registry,
  name: string,
  q: number,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return undefined;
  const data = await metric.get();
  const buckets = new Map<number, number>();
  for (const v of data.values) {
    if ((v as { metricName?: string }).metricName !== `${name}_bucket`) continue;
    const l = v.labels as Record<string, string | number>;
    if (!Object.entries(labels).every(([k, want]) => String(l[k]) === want)) continue;
    const le = l.le === "+Inf" ? Infinity : Number(l.le);
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
  }
  const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
  const total = sorted[sorted.length - 1]?.[1] ?? 0;
  if (total === 0) return undefined;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, count] of sorted) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      const inBucket = count - prevCount;
      return inBucket === 0 ? le : prevLe + ((le - prevLe) * (rank - prevCount)) / inBucket;
    }
    prevLe = le;
    prevCount = count;
  }
  return prevLe;
}
