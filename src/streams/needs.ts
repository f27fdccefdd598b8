/**
 * What the relay needs in a region, worked out from the config the way `check --live` checks it
 * (pure: the source streams' subjects are passed in).
 *
 * - One destination stream per `to.stream` of the links ending in the region. Its subjects are what
 *   those links publish to: each link's `from.filter`, or else its source stream's subjects, through
 *   the link's `to.subject` transform (preflight's `sourcePatterns` / `destinationPatterns`), merged
 *   over the links without a pattern another one contains. Its duplicate window is the largest replay
 *   horizon of the links (preflight's `replayHorizonMs`).
 * - The dead-letter subjects of the links that dead-letter (the default `relay.dlq.<link>`).
 * - The group bucket: every relay started for a region that is some link's destination joins the
 *   region's group, whose leases and members live in that bucket (relay/relay.ts `joinGroup`).
 */
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { replayHorizonMs } from "../preflight/checks.js";
import { destinationPatterns, sourcePatterns } from "../link/binding.js";
import { describeStartAt } from "../link/start-at.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { isSubsetOf, patternProblem } from "../protocol/subjects.js";
import type { DeadLetterNeed, DestinationNeed, RegionNeeds } from "./types.js";

/** The patterns without duplicates and without one that another pattern contains, in first-seen order. */
export function minimalPatterns(patterns: readonly string[]): string[] {
  const unique = [...new Set(patterns)];
  return unique.filter((p) => !unique.some((q) => q !== p && isSubsetOf(p, q)));
}

/** Why a link's source subjects are unknown, given what was found of its source stream. */
function unknownSources(link: LinkConfig, source: StreamFact): string {
  const at = `${link.from.region}/${link.from.stream}`;
  const why =
    source.kind === "unreachable"
      ? `region ${link.from.region} is not reachable`
      : source.kind === "failed"
        ? `cannot read ${at}: ${source.reason}`
        : source.kind === "missing"
          ? `its source ${at} does not exist`
          : `its source ${at} has no subjects of its own (a mirror or sourced stream)`;
  return `links[${link.name}]: what it publishes cannot be worked out: ${why} and it has no from.filter; create the source or set links[${link.name}].from.filter`;
}

/** The subjects a link publishes to in its destination, or why they cannot be worked out. */
export function linkSubjects(
  link: LinkConfig,
  source: StreamFact,
): { subjects: string[] } | { problem: string } {
  const from = sourcePatterns(link, source);
  if (!from) return { problem: unknownSources(link, source) };
  const out = destinationPatterns(link, from);
  const invalid = out.filter((p) => patternProblem(p) !== undefined);
  if (invalid.length > 0) {
    const what = invalid.map((p) => `"${p}" ${patternProblem(p) ?? ""}`).join("; ");
    return {
      problem: `links[${link.name}]: its to.subject transform produces subjects that cannot be published (${what}); fix links[${link.name}].to.subject`,
    };
  }
  return { subjects: out };
}

export function regionNeeds(
  config: RelayConfig,
  region: string,
  sourceOf: (link: LinkConfig) => StreamFact,
): RegionNeeds {
  const links = config.links.filter((l) => l.to.region === region);
  const byStream = new Map<string, LinkConfig[]>();
  for (const l of links) byStream.set(l.to.stream, [...(byStream.get(l.to.stream) ?? []), l]);

  const destinations: DestinationNeed[] = [];
  for (const [stream, into] of byStream) {
    const subjects: string[] = [];
    const problems: string[] = [];
    for (const l of into) {
      const r = linkSubjects(l, sourceOf(l));
      if ("problem" in r) problems.push(r.problem);
      else subjects.push(...r.subjects);
    }
    let windowLink = into[0] as LinkConfig;
    for (const l of into) if (replayHorizonMs(l) > replayHorizonMs(windowLink)) windowLink = l;
    const readBy = config.links
      .filter((l) => l.from.region === region && l.from.stream === stream)
      .map((l) => l.name);
    destinations.push({
      stream,
      links: into.map((l) => l.name),
      starts: into.map((l) => ({ link: l.name, startAt: describeStartAt(l.startAt) })),
      subjects: minimalPatterns(subjects),
      duplicateWindowMs: replayHorizonMs(windowLink),
      windowLink: windowLink.name,
      problems,
      readBy,
    });
  }

  const deadLetters: DeadLetterNeed[] = links.flatMap((l) =>
    l.badMessage.action === "dead-letter" ? [{ link: l.name, subject: l.badMessage.subject }] : [],
  );
  return { region, destinations, deadLetters, bucket: links.length > 0 ? config.group.bucket : undefined };
}
