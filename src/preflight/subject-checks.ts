/**
 * The subject rows: what the link publishes (its source subjects through its transform) is bound to
 * its destination stream, and a partitioned link's partitions cover every subject of its filter.
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { destinationPatterns, sourcePatterns, unboundSubjects } from "../link/binding.js";
import { isSubsetOf, patternProblem, transformPattern } from "../protocol/subjects.js";
import { list, skipped, streamsApply, where } from "./check-helpers.js";
import type { CheckResult, OtherStreams, PartitionFact } from "./facts.js";

// ---------------------------------------------------------------------------------------------
// Transformed subjects bound to the destination stream

export function checkSubjectsBound(
  link: LinkConfig,
  source: StreamFact,
  dest: StreamFact,
  others: OtherStreams = new Map(),
): CheckResult {
  const name = "subjects bound";
  const from = sourcePatterns(link, source);
  if (!from) {
    if (source.kind === "found") {
      return {
        name,
        level: "warning",
        detail: `${where(link.from.region, link.from.stream)} has no subjects of its own (a mirror or sourced stream), so what the link publishes cannot be worked out`,
        fix: `set links[${link.name}].from.filter so the subjects can be checked`,
      };
    }
    return skipped(name, "the source stream was not read and the link has no filter");
  }
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const d = dest.stream;
  const transform = link.to.transform;
  const mapping = from.map((s) => `${s} → ${transformPattern(s, transform).join(" | ")}`).join(", ");
  const invalid = destinationPatterns(link, from).filter((p) => patternProblem(p) !== undefined);
  if (invalid.length > 0) {
    return {
      name,
      level: "error",
      detail: `${mapping}: ${invalid.map((p) => `"${p}" ${patternProblem(p) ?? ""}`).join("; ")}: the transform produces subjects that cannot be published`,
      fix: `fix links[${link.name}].to.subject (stripPrefix / addPrefix)`,
    };
  }
  const unbound = unboundSubjects(link, source, dest);
  if (unbound.length === 0) {
    const identity = !transform.stripPrefix && !transform.addPrefix;
    return {
      name,
      level: "ok",
      detail: `${identity ? from.join(", ") : mapping}: covered by ${d.name} subjects ${list(d.subjects)}`,
    };
  }
  const elsewhere = unbound
    .map((p) => ({ p, streams: (others.get(p) ?? []).filter((n) => n !== d.name) }))
    .filter((x) => x.streams.length > 0)
    .map((x) => `${x.p} overlaps stream ${x.streams.join(", ")}, which would store those instead`);
  const newSubjects = unbound.filter((p) => !unbound.some((q) => q !== p && isSubsetOf(p, q)));
  return {
    name,
    level: "error",
    detail: `${mapping}: ${unbound.join(", ")} not bound to ${where(link.to.region, d.name)} (subjects ${list(d.subjects)}): publishes would get no responders${elsewhere.length > 0 ? ` (${elsewhere.join("; ")})` : ""}`,
    fix: `bind them: ${streamsApply(link.to.region)} (adds ${newSubjects.join(", ")} to ${d.name}), or change links[${link.name}].to.subject / from.filter`,
  };
}

// ---------------------------------------------------------------------------------------------
// Partitions

/**
 * A partitioned link: every subject of the source matching its filter must carry a partition number
 * 0…count−1 at the partition token, or its messages are relayed by no partition. A partition without
 * messages is worth a look (is `count` what the publishers' mapping uses?), not an error.
 */
export function checkPartitions(link: LinkConfig, fact: PartitionFact): CheckResult | undefined {
  const partitions = link.partitions;
  if (!partitions) return undefined;
  const name = "partitions";
  const filter = link.from.filterSubject ?? "";
  if (fact.kind === "unreachable") return skipped(name, "the source stream was not read");
  if (fact.kind === "failed") return { name, level: "warning", detail: `cannot list the subjects of ${where(link.from.region, link.from.stream)}: ${fact.reason}` };
  const counts = new Array<number>(partitions.count).fill(0);
  const stray: string[] = [];
  let strayMessages = 0;
  for (const [subject, n] of Object.entries(fact.subjects)) {
    const token = subject.split(".")[partitions.token - 1] ?? "";
    const p = /^(0|[1-9]\d*)$/.test(token) ? Number(token) : NaN;
    if (Number.isInteger(p) && p < partitions.count) counts[p] = (counts[p] ?? 0) + n;
    else {
      stray.push(subject);
      strayMessages += n;
    }
  }
  const spread = counts.map((n, p) => `p${p}: ${n}`).join(", ");
  if (stray.length > 0) {
    return {
      name,
      level: "error",
      detail: `${strayMessages} messages on ${stray.length} subjects matching ${filter} have no partition number below ${partitions.count} at token ${partitions.token} (e.g. ${list(stray.slice(0, 5))}): no partition relays them`,
      fix: `make the publishers' mapping produce partition(${partitions.count}, …) at token ${partitions.token}, or set links[${link.name}].partitions.count to the mapping's count`,
    };
  }
  const empty = counts.flatMap((n, p) => (n === 0 ? [`p${p}`] : []));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total > 0 && empty.length > 0) {
    return { name, level: "warning", detail: `partitions ${empty.join(", ")} hold no messages (${spread}): is count ${partitions.count} what the mapping uses?` };
  }
  return {
    name,
    level: "ok",
    detail: `${partitions.count} partitions at token ${partitions.token} of ${filter} cover every subject of the filter (${spread})`,
  };
}
