import pino from "pino";
import type { LinkConfig } from "../../src/config/types.js";
import { NoneGuard } from "../../src/guard/none-guard.js";
import { Pipeline } from "../../src/link/pipeline.js";
import type { DestinationMarkers, PipelineDeps, PipelineEvents } from "../../src/link/pipeline.js";
import type { SourceAcks } from "../../src/nats/source-acks.js";
import { createMetrics } from "../../src/observability/metrics.js";

/** What a unit test changes of a pipeline's dependencies; the rest are `testPipeline`'s defaults. */
export type TestPipelineOptions = Partial<Omit<PipelineDeps, "link" | "markers" | "events">> & {
  readonly markers?: Partial<DestinationMarkers>;
  readonly events?: Partial<PipelineEvents>;
};

/**
 * A pipeline of `link` for the unit tests of the pipeline and its stages: no guard, a silent logger,
 * metrics of its own, events that do nothing, a destination holding none of the link's markers, and
 * a relay that owns the link — each replaced by what `opts` gives. Without `opts.acks`, the source acks
 * are recorded in `acked` (the reply subjects, in order).
 */
export function testPipeline(link: LinkConfig, opts: TestPipelineOptions = {}) {
  const metrics = opts.metrics ?? createMetrics(undefined, { defaultMetrics: false });
  const acked: string[] = [];
  const acks = opts.acks ?? ({ ack: (reply: string) => acked.push(reply) > 0, nak: () => true, working: () => true } as unknown as SourceAcks);
  const pipeline = new Pipeline({
    ...opts,
    link,
    links: opts.links ?? [link],
    guard: opts.guard ?? new NoneGuard(),
    acks,
    metrics,
    logger: opts.logger ?? pino({ level: "silent" }),
    events: { publishTrouble: () => {}, guardTrouble: () => {}, healthy: () => {}, halt: () => {}, destinationRestarted: () => {}, ...opts.events },
    markers: { findStored: () => Promise.resolve(new Map()), storedAt: () => Promise.resolve(undefined), lastSeq: () => Promise.resolve(0), ...opts.markers },
    owns: opts.owns ?? (() => true),
  });
  return { pipeline, metrics, acked };
}
