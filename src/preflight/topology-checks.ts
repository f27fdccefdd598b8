/**
 * The rows that look at a link among all the links of the config: other links writing into its
 * destination stream (overlaps), and chains of links that lead back to its source region (loops).
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { destinationPatterns, sourcePatterns } from "../link/binding.js";
import { firstIntersection } from "../protocol/subjects.js";
import { where } from "./check-helpers.js";
import type { CheckResult } from "./facts.js";

// ---------------------------------------------------------------------------------------------
// Overlapping links into one destination stream

/**
 * Two links into the same destination region+stream:
 * - from the same source region+stream, with source subjects that intersect: error. Both read the
 *   same messages and both publish them (with the same id), so everything is relayed twice and a
 *   copy that arrives after the duplicate window is stored twice.
 * - from the same source, disjoint source subjects, but transformed subjects that intersect:
 *   warning. No message is relayed twice, but different source subjects are merged into the same
 *   destination subjects. (Each link still finds its own progress there: every relayed message names
 *   its link in Relay-Link, and a cursor is placed from the markers naming it.)
 * - from different sources (A→C and B→C, an active-active mesh): ok. Ids and Relay-Origin differ.
 */
export function checkOverlaps(
  link: LinkConfig,
  links: readonly LinkConfig[],
  sourceOf: (l: LinkConfig) => StreamFact,
): CheckResult {
  const name = "overlapping links";
  const into = where(link.to.region, link.to.stream);
  const same = links.filter(
    (l) => l !== link && l.to.region === link.to.region && l.to.stream === link.to.stream,
  );
  if (same.length === 0) return { name, level: "ok", detail: `no other link writes into ${into}` };
  const mine = sourcePatterns(link, sourceOf(link)) ?? [">"];
  const errors: string[] = [];
  const warnings: string[] = [];
  const fine: string[] = [];
  for (const other of same) {
    if (other.from.region !== link.from.region || other.from.stream !== link.from.stream) {
      fine.push(other.name);
      continue;
    }
    const theirs = sourcePatterns(other, sourceOf(other)) ?? [">"];
    const both = firstIntersection(mine, theirs);
    if (both) {
      errors.push(
        `${other.name} also reads ${where(link.from.region, link.from.stream)} (${both.a} and ${both.b} overlap) into ${into}: those messages would be relayed twice`,
      );
      continue;
    }
    const out = firstIntersection(destinationPatterns(link, mine), destinationPatterns(other, theirs));
    if (out)
      warnings.push(
        `${other.name} reads other subjects of the same source but also writes ${out.b} (overlapping ${out.a}): distinct source subjects are merged in ${into}`,
      );
    else fine.push(other.name);
  }
  const mesh =
    fine.length > 0
      ? `; ${fine.join(", ")} also write into ${into} from other sources or subjects, which is fine (ids and Relay-Origin differ)`
      : "";
  if (errors.length > 0) {
    return {
      name,
      level: "error",
      detail: errors.join("; "),
      fix: "give the links disjoint from.filter subjects, or remove one of them",
    };
  }
  if (warnings.length > 0) {
    return {
      name,
      level: "warning",
      detail: `${warnings.join("; ")}${mesh}`,
      fix: "give the links distinct to.subject prefixes if consumers must tell them apart",
    };
  }
  return { name, level: "ok", detail: `no overlap${mesh}` };
}

// ---------------------------------------------------------------------------------------------
// Loops

/** The shortest chain of links from `from` to `to` (region names), or undefined. */
function regionPath(links: readonly LinkConfig[], from: string, to: string): string[] | undefined {
  const prev = new Map<string, string>();
  const queue = [from];
  const seen = new Set([from]);
  while (queue.length > 0) {
    const r = queue.shift() as string;
    if (r === to) {
      const path = [r];
      for (let p = prev.get(r); p !== undefined; p = prev.get(p)) path.unshift(p);
      return path;
    }
    for (const l of links) {
      if (l.from.region === r && !seen.has(l.to.region)) {
        seen.add(l.to.region);
        prev.set(l.to.region, r);
        queue.push(l.to.region);
      }
    }
  }
  return undefined;
}

export function checkLoops(link: LinkConfig, links: readonly LinkConfig[]): CheckResult {
  const name = "loops";
  const back = regionPath(links, link.to.region, link.from.region);
  if (!back) return { name, level: "ok", detail: "no cycle through this link" };
  const cycle = [link.from.region, ...back].join(" → ");
  return {
    name,
    level: "ok",
    detail: `cycle ${cycle}: loop prevention stops messages returning to their origin (Relay-Origin / Relay-Path headers, maxHops ${link.maxHops})`,
  };
}
