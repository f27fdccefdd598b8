/**
 * `to.order: strict` chains a link's publishes by the destination's last sequence, which holds only
 * while the link is the destination stream's only writer: a message anyone else stores moves the
 * sequence, and every publish of the link is then refused until it reads the stream again. What can
 * be known of other writers is checked here, from the stream's config and the relay's own config: the
 * link's start and every re-read of the stream after a change (destination.ts), and `check --live`
 * (preflight/order-checks.ts). A client publishing on the link's own subjects cannot be seen: the
 * server refuses the link's next publish and the link resumes after that message (data-path.md).
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { isCoveredBy, patternMatches } from "../protocol/subjects.js";
import { destinationPatterns, sourcePatterns } from "./binding.js";

/**
 * Why `link` may not be its destination stream's only writer (empty: nothing says so). `dest`: the
 * destination stream as read; `source`: the source stream (its subjects, when the link has no filter);
 * `links`: every link the relay runs (partitions included). A source not read yet leaves the subjects
 * unjudged.
 */
export function otherWriters(link: LinkConfig, source: StreamFact, dest: StreamFact, links: readonly LinkConfig[]): string[] {
  if (dest.kind !== "found") return [];
  const reasons: string[] = [];
  const stream = dest.stream;
  if (stream.sourced) reasons.push(`stream ${stream.name} sources or mirrors other streams: the server writes into it too`);
  const others = links.filter(
    (l) => l.name !== link.name && l.name !== link.partition?.link && l.to.region === link.to.region && l.to.stream === link.to.stream,
  );
  if (others.length > 0) reasons.push(`link${others.length === 1 ? "" : "s"} ${others.map((l) => l.name).join(", ")} also write${others.length === 1 ? "s" : ""} it`);
  if (link.partition !== undefined) reasons.push(`the link is partitioned: its ${link.partition.count} partitions write it at once`);
  const from = sourcePatterns(link, source);
  if (from === undefined) {
    // Not read yet (a poll before the link's first pass): judged when it is, before anything is published.
    if (source.kind === "found") reasons.push("the subjects the link publishes are not known (no from.filter, and the source stream names no subjects), so other publishers cannot be ruled out");
  } else {
    const own = destinationPatterns(link, from);
    const beyond = stream.subjects.filter((s) => !isCoveredBy(s, own));
    if (beyond.length > 0) {
      reasons.push(`it binds ${beyond.join(", ")} beyond the link's subjects (${own.join(", ")}): anyone publishing there writes it too`);
    }
  }
  const policy = link.badMessage;
  if (policy.action === "dead-letter" && stream.subjects.some((s) => patternMatches(policy.subject, s))) {
    reasons.push(`it captures the link's dead-letter subject ${policy.subject}: dead letters would take sequences the order chain does not count; park them in a stream of their own`);
  }
  return reasons;
}

/** The error text for `reasons` (non-empty) about `link`'s destination. */
export function otherWritersText(link: LinkConfig, reasons: readonly string[]): string {
  return `link ${link.name}: to.order strict needs the link to be the only writer of its destination stream ${link.to.stream} in region ${link.to.region}, but ${reasons.join("; ")}. Fix: give the link a destination stream of its own with exactly its subjects, or remove to.order`;
}
