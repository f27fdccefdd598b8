/**
 * The strict-order row of `check --live`: a link with `to.order: strict` must be its destination
 * stream's only writer (link/sole-writer.ts judges it, as the link does at start and whenever the
 * stream changes). Links without it get no row.
 */
import type { LinkConfig } from "../config/types.js";
import { otherWriters } from "../link/sole-writer.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { skipped, where } from "./check-helpers.js";
import type { CheckResult } from "./facts.js";

export function checkOrder(link: LinkConfig, source: StreamFact, dest: StreamFact, links: readonly LinkConfig[]): CheckResult[] {
  if (link.to.order !== "strict") return [];
  const name = "strict order";
  if (dest.kind !== "found") return [skipped(name, "the destination stream was not read")];
  const reasons = otherWriters(link, source, dest, links);
  const at = where(link.to.region, link.to.stream);
  if (reasons.length === 0) {
    return [{ name, level: "ok", detail: `the link is the only writer the config and ${at} show: its publishes are chained by Nats-Expected-Last-Sequence` }];
  }
  return [
    {
      name,
      level: "error",
      detail: `${at} is not the link's alone: ${reasons.join("; ")}; the link would fail with ORDER_NOT_SOLE_WRITER`,
      fix: `give links[${link.name}] a destination stream of its own with exactly its subjects, or remove to.order`,
    },
  ];
}
