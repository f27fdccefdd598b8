/**
 * The live checks of `jetstream-relay check --live`, one function per row of a link's table.
 *
 * Every function is pure: preflight.ts gathers the facts (connections, stream and consumer info,
 * Redis persistence) and passes them in; a check only decides. A check whose facts could not be
 * gathered because something it depends on failed is "skipped" (the failure has its own row).
 * Nothing here ever sees a secret: the facts hold names, subjects and numbers only, and error
 * reasons were scrubbed where they were caught.
 *
 * The checks live by family: region-checks.ts (regions, pull window), stream-checks.ts (source and
 * destination streams, retention, duplicate window), subject-checks.ts (subjects bound, partitions),
 * topology-checks.ts (overlapping links, loops), guard-checks.ts, dead-letter-checks.ts and
 * consumer-checks.ts; the facts they take and the row they return are in facts.ts. This file only
 * re-exports them.
 */
export { replayHorizonMs } from "./check-helpers.js";
export { checkRegion, checkWindow } from "./region-checks.js";
export { checkDestinationStream, checkDuplicateWindow, checkRetention, checkSourceStream } from "./stream-checks.js";
export { checkPartitions, checkSubjectsBound } from "./subject-checks.js";
export { checkLoops, checkOverlaps } from "./topology-checks.js";
export { checkGuard, checkGuardEviction, checkGuardMarker, checkGuardReplication } from "./guard-checks.js";
export { checkDeadLetter } from "./dead-letter-checks.js";
export { checkConsumer } from "./consumer-checks.js";
export { checkStart } from "./start-checks.js";
export type {
  CheckResult,
  ConsumerFact,
  ConsumerFacts,
  DeadLetterFact,
  Level,
  MarkerFact,
  OtherStreams,
  PartitionFact,
  RedisFact,
  RegionFact,
  StartFact,
} from "./facts.js";
