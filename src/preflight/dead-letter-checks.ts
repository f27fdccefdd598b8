/**
 * The dead-letter row: a link that dead-letters bad messages needs a stream in its destination
 * region that captures its dead-letter subject.
 */
import type { LinkConfig } from "../config/types.js";
import { skipped, streamsApply } from "./check-helpers.js";
import type { CheckResult, DeadLetterFact } from "./facts.js";

export function checkDeadLetter(link: LinkConfig, fact: DeadLetterFact | undefined): CheckResult {
  const name = "dead-letter subject";
  const policy = link.badMessage;
  if (policy.action === "halt")
    return { name, level: "ok", detail: "onBadMessage: halt (the link stops at a bad message)" };
  if (!fact || fact.kind === "unreachable") return skipped(name, `region ${link.to.region} is not reachable`);
  if (fact.kind === "failed") {
    return {
      name,
      level: "warning",
      detail: `${policy.subject}: cannot list the streams of ${link.to.region}: ${fact.reason}`,
      fix: "make sure the relay's user may use the JetStream API",
    };
  }
  if (fact.streams.length === 0) {
    return {
      name,
      level: "warning",
      detail: `${policy.subject} is captured by no stream in ${link.to.region}: dead-lettered messages would fail to park and the link would retry`,
      fix: `capture it: ${streamsApply(link.to.region)} (creates or extends RELAY_DLQ with ${policy.subject}), or set links[${link.name}].onBadMessage`,
    };
  }
  const own = fact.streams.includes(link.to.stream)
    ? ` (the link's own destination stream: dead letters mix with relayed data)`
    : "";
  return {
    name,
    level: "ok",
    detail: `${policy.subject} is captured by ${fact.streams.join(", ")} in ${link.to.region}${own}`,
  };
}
