/**
 * The durable consumer row: the link's durable on the source stream, if it exists, has the filter
 * the link asks for (else the relay refuses to start the link), and how far it has got.
 */
import type { LinkConfig } from "../config/types.js";
import { skipped, where } from "./check-helpers.js";
import type { CheckResult, ConsumerFact } from "./facts.js";

export function checkConsumer(link: LinkConfig, fact: ConsumerFact): CheckResult {
  const name = "durable consumer";
  const at = `${link.durableName} on ${where(link.from.region, link.from.stream)}`;
  switch (fact.kind) {
    case "unreachable":
      return skipped(name, "the source stream was not read");
    case "failed":
      return {
        name,
        level: "warning",
        detail: `${at}: cannot read it: ${fact.reason}`,
        fix: "make sure the relay's user may read consumer info",
      };
    case "missing":
      return {
        name,
        level: "ok",
        detail: `${at} does not exist yet: the relay creates it (where it starts: the start row)`,
      };
    case "found": {
      const c = fact.consumer;
      const have = [...c.filterSubjects].sort().join(",");
      const want = link.from.filterSubject ?? "";
      if (have !== want) {
        return {
          name,
          level: "error",
          detail: `${at} exists with filter "${have}" but the link says "${want}": the relay refuses to start this link`,
          fix: `delete it (nats consumer rm ${link.from.stream} ${link.durableName}, in region ${link.from.region}; it then starts over) or set links[${link.name}].durable to another name`,
        };
      }
      return {
        name,
        level: "ok",
        detail: `${at} exists: ${c.numPending} pending, ${c.numAckPending} awaiting ack, ack floor stream seq ${c.ackFloorStreamSeq} (consumer seq ${c.ackFloorConsumerSeq})`,
      };
    }
  }
}
