/**
 * The start row: where each link will start consuming and how many messages that is. A link with a
 * record (its durable consumer, or its Relay-Source markers in the destination) goes on from there;
 * only a link without one starts where its `startAt` says (README "Where a new link starts").
 */
import type { LinkConfig } from "../config/types.js";
import { describeStartAt } from "../link/start-at.js";
import { skipped, where } from "./check-helpers.js";
import type { CheckResult, ConsumerFact, StartFact } from "./facts.js";

export function checkStart(link: LinkConfig, consumer: ConsumerFact, fact: StartFact): CheckResult {
  const name = "start";
  const said = `startAt ${describeStartAt(link.startAt)}`;
  // Under a subject filter a count of sequences includes other subjects' messages.
  const upTo = link.from.filterSubject !== undefined ? "up to " : "";
  const from = where(link.from.region, link.from.stream);
  switch (consumer.kind) {
    case "unreachable":
      return skipped(name, "the source stream was not read");
    case "failed":
      return skipped(name, "the durable consumer could not be read");
    case "found": {
      const c = consumer.consumer;
      return {
        name,
        level: "ok",
        detail: `${link.durableName} exists: the link goes on after ${from} seq ${c.ackFloorStreamSeq} (its ack floor), ${c.numPending + c.numAckPending} messages to relay; ${said} applies only to a link without a record`,
      };
    }
    case "missing":
      break;
  }
  switch (fact.kind) {
    case "unreachable":
      return skipped(name, "the destination was not read");
    case "failed":
      return {
        name,
        level: "warning",
        detail: `cannot tell where the link starts: ${fact.reason}`,
        fix: "make sure the relay's users may read the source and destination streams and create a consumer on the source",
      };
    case "record":
      return {
        name,
        level: "ok",
        detail: `no consumer, but the destination holds the link's messages up to ${from} seq ${fact.afterSeq}: the link starts after it, ${upTo}${Math.max(0, fact.streamLastSeq - fact.afterSeq)} messages to relay; ${said} does not apply`,
      };
    case "start-at": {
      const none = fact.complete ? "the destination holds none of its messages" : `none of its messages in the last ${fact.scanned} destination messages (the relay reads no further)`;
      const at = link.startAt === "new" ? `with the next message stored (after seq ${fact.startSeq - 1})` : `at ${from} seq ${fact.startSeq}`;
      return {
        name,
        level: fact.complete ? "ok" : "warning",
        detail: `a new link (no consumer, ${none}): ${said} starts it ${at}, ${fact.messages} messages to relay now`,
        ...(fact.complete ? {} : { fix: "the relay reads the link's checkpoint in the group bucket (which the check does not), and without one it halts with POSITION_UNKNOWN unless nothing in the destination is on the link's subjects; give it a start with jetstream-relay link start-at LINK --seq N" }),
      };
    }
  }
}
