/**
 * What the live checks share: the replay horizon a destination's duplicate window must cover, how a
 * row names a stream or a list, the command that fixes a region's streams, and the skipped row.
 */
import type { LinkConfig } from "../config/types.js";
import type { CheckResult } from "./facts.js";

const MIN_HORIZON_MS = 120_000;

/**
 * How long after its first publish a message can be published again by the link: a redelivery
 * after the ack wait (twice, to allow one lost ack), a replay up to `maxReplayAge`, and never less
 * than the NATS default duplicate window (2 min).
 */
export function replayHorizonMs(link: LinkConfig): number {
  return Math.max(link.ackWaitMs * 2, link.maxReplayAgeMs ?? 0, MIN_HORIZON_MS);
}

export function where(region: string, stream: string): string {
  return `${region}/${stream}`;
}

export function list(values: readonly string[]): string {
  return values.length === 0 ? "(none)" : values.join(", ");
}

/**
 * The command that creates or updates the region's destination and dead-letter streams
 * (docs/streams.md). The checks do not know the config file's path.
 */
export function streamsApply(region: string): string {
  return `jetstream-relay streams apply --config <your config> --region ${region}`;
}

export function skipped(name: string, because: string): CheckResult {
  return { name, level: "skipped", detail: `not checked: ${because}` };
}
