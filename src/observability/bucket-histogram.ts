import type { Metric, Registry } from "prom-client";

/** A histogram series bound to its label values: what the hot path holds. */
export interface HistogramSeries {
  observe(value: number): void;
}

interface Sample {
  value: number;
  metricName: string;
  labels: Record<string, string | number>;
  sharedLabels: Record<string, string>;
}

/** One series: a count per bucket (not cumulative; the last is +Inf), the sum and the count. */
class Series implements HistogramSeries {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    private readonly bounds: readonly number[],
    readonly labels: Readonly<Record<string, string>>,
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`histogram value is not a finite number: ${value}`);
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

/**
 * A Prometheus histogram for values observed once per message. prom-client's bound histogram builds a
 * label object, validates and hashes the labels on every observe (measured at ~4% of the relay's CPU
 * for the two per-message histograms); a series here is a bucket array bound once, and an observe is a
 * bucket search and three additions. It registers on a prom-client Registry like any metric and exposes
 * the same series (`_bucket{le}`, `_sum`, `_count`) in the same format.
 */
export class BucketHistogram<L extends string> {
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  private readonly bounds: readonly number[];
  private readonly series = new Map<string, Series>();

  constructor(config: { name: string; help: string; labelNames: readonly L[]; buckets: readonly number[]; registers: Registry[] }) {
    this.name = config.name;
    this.help = config.help;
    this.labelNames = config.labelNames;
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    for (const registry of config.registers) registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these label values, created on first use (at 0, so it is exported from then on). */
  labels(labels: Readonly<Record<L, string>>): HistogramSeries {
    const key = this.keyOf(labels);
    let s = this.series.get(key);
    if (!s) {
      const own: Record<string, string> = {};
      for (const n of this.labelNames) own[n] = labels[n];
      s = new Series(this.bounds, own);
      this.series.set(key, s);
    }
    return s;
  }

  /** Drops the series of these label values (a removed link). */
  remove(labels: Readonly<Record<string, string | number>>): void {
    this.series.delete(this.keyOf(labels));
  }

  private keyOf(labels: Readonly<Record<string, string | number>>): string {
    return this.labelNames.map((n) => String(labels[n])).join("\u0000");
  }

  reset(): void {
    this.series.clear();
  }

  /** For the registry's text format: bucket labels apart from the series' own, as prom-client's histogram. */
  getForPromString(): Promise<{ name: string; help: string; type: "histogram"; aggregator: "sum"; values: Sample[] }> {
    const values: Sample[] = [];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += s.counts[i]!;
        values.push({ value: cumulative, metricName: `${this.name}_bucket`, labels: { le }, sharedLabels: s.labels });
      });
      values.push({ value: s.count, metricName: `${this.name}_bucket`, labels: { le: "+Inf" }, sharedLabels: s.labels });
      values.push({ value: s.sum, metricName: `${this.name}_sum`, labels: {}, sharedLabels: s.labels });
      values.push({ value: s.count, metricName: `${this.name}_count`, labels: {}, sharedLabels: s.labels });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values });
  }

  /** As prom-client's `get()`: every sample's labels include the series' own. */
  async get(): Promise<{ name: string; help: string; type: "histogram"; aggregator: "sum"; values: { value: number; metricName: string; labels: Record<string, string | number> }[] }> {
    const data = await this.getForPromString();
    return {
      ...data,
      values: data.values.map(({ value, metricName, labels, sharedLabels }) => ({ value, metricName, labels: { ...labels, ...sharedLabels } })),
    };
  }
}
