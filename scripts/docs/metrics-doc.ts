export const METRICS_DOC = "docs/metrics.md";
export async function renderMetricsDoc(): Promise<string> { return ""; }
