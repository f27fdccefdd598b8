/**
 * Which subjects a link reads and which it publishes to: the link checks that its destination stream
 * binds them before it publishes, and the pre-flight checks and `streams plan` report the same.
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { isCoveredBy, patternProblem, transformPattern } from "../protocol/subjects.js";

/**
 * The source subjects the link reads: its filter, else the source stream's subjects. Undefined
 * when that cannot be known (no filter, and the stream was not read or has no subjects of its own).
 */
export function sourcePatterns(link: LinkConfig, source: StreamFact): readonly string[] | undefined {
  if (link.from.filterSubject) return [link.from.filterSubject];
  if (source.kind !== "found" || source.stream.subjects.length === 0) return undefined;
  return source.stream.subjects;
}

/** The destination subjects the link publishes to, given its source subjects. */
export function destinationPatterns(link: LinkConfig, sourceSubjects: readonly string[]): string[] {
  return [...new Set(sourceSubjects.flatMap((s) => transformPattern(s, link.to.transform)))];
}

/** The destination subjects the link publishes that the destination stream does not bind. */
export function unboundSubjects(link: LinkConfig, source: StreamFact, dest: StreamFact): string[] {
  const from = sourcePatterns(link, source);
  if (!from || dest.kind !== "found") return [];
  return destinationPatterns(link, from).filter(
    (p) => patternProblem(p) === undefined && !isCoveredBy(p, dest.stream.subjects),
  );
}
