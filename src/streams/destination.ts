/**
 * The plan of one destination stream: create it, or what an existing one lacks (docs/streams.md,
 * "The diff"). Pure.
 */
import { formatDuration } from "../config/durations.js";
import { isCoveredBy, isSubsetOf } from "../protocol/subjects.js";
import { addSubjects, describeExisting, list, partialOverlap, serverAtLeast, statusOf } from "./rules.js";
import type { DiffOptions } from "./rules.js";
import type { Change, DestinationNeed, ExistingFact, PlanItem, ServerFacts, StreamUpdate } from "./types.js";

function conflictChange(
  region: string,
  stream: string,
  subject: string,
  others: readonly string[],
  links: readonly string[],
): Change {
  return {
    field: "subjects",
    to: subject,
    rule: "impossible",
    required: true,
    reason: `${subject} overlaps stream ${others.join(", ")} in region ${region}: the server refuses a subject bound to two streams. Take it out of ${others.join(", ")}, or change the to.subject / from.filter of links ${links.join(", ")} so ${stream} gets subjects of its own`,
  };
}

function overlapChange(stream: string, o: { a: string; b: string }, links: readonly string[]): Change {
  return {
    field: "subjects",
    to: `${o.a}, ${o.b}`,
    rule: "impossible",
    required: true,
    reason: `${o.a} and ${o.b} overlap without one containing the other: the server refuses both in one stream (${stream}). Change the to.subject / from.filter of links ${links.join(", ")} so one contains the other or they are disjoint`,
  };
}

function problemChange(problem: string): Change {
  return { field: "subjects", to: "(unknown)", rule: "impossible", required: true, reason: problem };
}

export function destinationItem(
  region: string,
  need: DestinationNeed,
  fact: ExistingFact | undefined,
  owners: ReadonlyMap<string, readonly string[]>,
  server: ServerFacts,
  deadLetters: readonly string[],
  opts: DiffOptions,
): PlanItem {
  const base = { region, kind: "destination" as const, name: need.stream, links: need.links };
  const at = `${region}/${need.stream}`;
  if (!fact || fact.kind === "failed") {
    return {
      ...base,
      status: "failed",
      detail: `cannot read ${at}: ${fact?.reason ?? "not read"}`,
      changes: [],
    };
  }
  const window = formatDuration(need.duplicateWindowMs);
  const horizon = `${window}, the replay horizon of link ${need.windowLink}`;
  const others = (p: string): string[] => (owners.get(p) ?? []).filter((n) => n !== need.stream);
  const problems = need.problems.map(problemChange);

  if (fact.kind === "missing") {
    const blockers: Change[] = [];
    if (need.subjects.length === 0) {
      blockers.push({
        field: "stream",
        to: "create",
        rule: "impossible",
        required: true,
        reason: `no subject of links ${need.links.join(", ")} could be worked out, so ${at} cannot be created`,
      });
    }
    for (const p of need.subjects) {
      const o = others(p);
      if (o.length > 0) blockers.push(conflictChange(region, need.stream, p, o, need.links));
    }
    const o = partialOverlap(need.subjects);
    if (o) blockers.push(overlapChange(need.stream, o, need.links));
    if (blockers.length > 0) {
      return {
        ...base,
        status: "blocked",
        detail: `${at} does not exist and cannot be created as planned`,
        changes: [...blockers, ...problems],
      };
    }
    const changes: Change[] = [
      { field: "stream", to: "create", rule: "safe", required: true },
      { field: "subjects", to: list(need.subjects), rule: "safe", required: true },
      { field: "retention", to: "limits", rule: "safe", required: true },
      { field: "duplicate window", to: horizon, rule: "safe", required: true },
      ...problems,
    ];
    return {
      ...base,
      status: problems.length > 0 ? "blocked" : "create",
      detail:
        problems.length > 0
          ? `${at} does not exist: apply creates it with the subjects that could be worked out`
          : `${at} does not exist`,
      changes,
      // A new destination holds no record of its links: each starts where its `startAt` says.
      notes: need.starts.map((s) => `link ${s.link} starts at ${s.startAt}${s.startAt === "earliest" ? " (the first message its source holds)" : ""}, unless its source consumer exists already`),
      create: {
        subjects: need.subjects,
        retention: "limits",
        storage: "file",
        duplicateWindowMs: need.duplicateWindowMs,
      },
    };
  }

  const s = fact.stream;
  if (s.mirror) {
    return {
      ...base,
      status: "blocked",
      detail: describeExisting(s),
      changes: [
        {
          field: "stream",
          to: "subjects",
          rule: "impossible",
          required: true,
          reason: `${at} is a mirror: it holds no subjects of its own, so nothing can publish into it. Point links ${need.links.join(", ")} at another to.stream`,
        },
      ],
    };
  }
  const changes: Change[] = [];
  const update: { -readonly [K in keyof StreamUpdate]: StreamUpdate[K] } = {};

  // Subjects: add what is missing; what no link needs is removed only with --force.
  const missing = need.subjects.filter((p) => !isCoveredBy(p, s.subjects));
  let addable = true;
  for (const p of missing) {
    const o = others(p);
    if (o.length > 0) {
      changes.push(conflictChange(region, need.stream, p, o, need.links));
      addable = false;
    }
  }
  let withAdded = [...s.subjects];
  if (missing.length > 0 && addable) {
    withAdded = addSubjects(s.subjects, missing);
    const o = partialOverlap(withAdded);
    if (o) {
      changes.push(overlapChange(need.stream, o, need.links));
      addable = false;
      withAdded = [...s.subjects];
    } else {
      changes.push({
        field: "subjects",
        from: list(s.subjects),
        to: `${list(withAdded)} (+ ${missing.join(", ")})`,
        rule: "safe",
        required: true,
      });
      update.subjects = withAdded;
    }
  }
  changes.push(...problems);
  // Narrowing is offered only when every link's subjects are known and no link reads this stream.
  if (addable && need.problems.length === 0 && need.readBy.length === 0) {
    // A subject that captures a dead-letter subject of the region is needed too.
    const extra = withAdded.filter(
      (e) => !isCoveredBy(e, need.subjects) && !deadLetters.some((d) => isSubsetOf(d, e)),
    );
    if (extra.length > 0) {
      const kept = withAdded.filter((e) => !extra.includes(e));
      const forced = addSubjects(
        kept,
        need.subjects.filter((p) => !isCoveredBy(p, kept)),
      );
      changes.push({
        field: "subjects",
        from: list(s.subjects),
        to: `${list(forced)} (- ${extra.join(", ")})`,
        rule: "force",
        required: false,
        reason: `${extra.join(", ")} ${extra.length === 1 ? "is" : "are"} not needed by links ${need.links.join(", ")}: kept (something else may publish there); --force removes ${extra.length === 1 ? "it" : "them"} (messages already stored stay)`,
      });
      update.forcedSubjects = forced;
    }
  }

  if (s.retention !== "limits") {
    const canChange = serverAtLeast(server.version, 2, 10);
    changes.push({
      field: "retention",
      from: s.retention,
      to: "limits",
      rule: canChange ? "force" : "impossible",
      required: true,
      reason: canChange
        ? `changing retention ${s.retention} → limits changes how ${at} keeps messages for everything else that reads it (they stay until its limits remove them): only with --force (a work-queue stream may still be refused by the server)`
        : `nats-server ${server.version ?? "(unknown version)"} cannot change a stream's retention in place (2.10+ can, between interest and limits): create a new stream with limits retention and point links ${need.links.join(", ")} at it (jetstream-relay creates a missing destination), or recreate ${at} yourself; jetstream-relay never deletes a stream`,
    });
    if (canChange) update.retention = "limits";
  }

  if (s.duplicateWindowMs < need.duplicateWindowMs) {
    const from = s.duplicateWindowMs > 0 ? formatDuration(s.duplicateWindowMs) : "none";
    if (s.maxAgeMs > 0 && need.duplicateWindowMs > s.maxAgeMs) {
      changes.push({
        field: "max age",
        from: formatDuration(s.maxAgeMs),
        to: window,
        rule: "force",
        required: true,
        reason: `the duplicate window cannot exceed the max age, and raising the max age keeps ${at}'s messages longer: only with --force; or shorten links[${need.windowLink}].ackWait / maxReplayAge`,
      });
      changes.push({
        field: "duplicate window",
        from,
        to: horizon,
        rule: "force",
        required: true,
        reason: "needs the max age raised first (above)",
      });
      update.maxAgeMs = need.duplicateWindowMs;
    } else {
      changes.push({ field: "duplicate window", from, to: horizon, rule: "safe", required: true });
    }
    update.duplicateWindowMs = need.duplicateWindowMs;
  }

  const status = statusOf(changes, opts.force);
  return {
    ...base,
    status,
    detail: describeExisting(s),
    changes,
    ...(Object.keys(update).length > 0 ? { update } : {}),
  };
}
