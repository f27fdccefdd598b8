import type { LinkConfig, MaxRate } from "./types.js";

/**
 * The units a link is worked in: the link itself, or one per partition of a partitioned link. A
 * partition is a link of its own (its own durable `<durable>-p<i>`, lease and cursor) whose source
 * filter is the link's filter with the partition token fixed to `i`, named `<link>/p<i>` in logs,
 * metrics and status. Subjects that carry the partition number at that token (the server's
 * `partition(N, …)` subject mapping) keep per-key order: one key is always in one partition.
 */
export function linkUnits(link: LinkConfig): LinkConfig[] {
  const partitions = link.partitions;
  const filter = link.from.filterSubject;
  if (!partitions || filter === undefined) return [link];
  const tokens = filter.split(".");
  return Array.from({ length: partitions.count }, (_, index) => {
    const fixed = [...tokens];
    fixed[partitions.token - 1] = String(index);
    const { partitions: _whole, ...rest } = link;
    return {
      ...rest,
      name: `${link.name}/p${index}`,
      from: { ...link.from, filterSubject: fixed.join(".") },
      durableName: `${link.durableName}-p${index}`,
      partition: { index, count: partitions.count, link: link.name },
      ...(link.maxRate === undefined ? {} : { maxRate: splitRate(link.maxRate, partitions.count) }),
    };
  });
}

/** A partitioned link's rate cap, shared evenly by its partitions (the link as a whole keeps to it). */
function splitRate(rate: MaxRate, count: number): MaxRate {
  return {
    ...(rate.messages === undefined ? {} : { messages: rate.messages / count }),
    ...(rate.bytes === undefined ? {} : { bytes: rate.bytes / count }),
  };
}
