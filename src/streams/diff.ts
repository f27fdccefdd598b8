/**
 * The plan of one region: what it needs (needs.ts) against what it has (inspect.ts). Pure.
 *
 * Rules (docs/streams.md):
 * - A missing destination stream is created with the subjects its links publish to, limits
 *   retention, file storage and a duplicate window of the largest replay horizon of its links.
 * - An existing one gets the subjects it lacks (safe) and a duplicate window raised to that horizon
 *   (safe). Nothing is ever lowered or deleted.
 * - Retention other than limits, subjects no link needs, and a max age below the horizon are changes
 *   that narrow or rewrite a stream other things may use: only with `--force`, and retention only where
 *   the server can change it in place (nats-server 2.10+; 2.9 refuses).
 * - What the server would refuse anyway (a subject bound to another stream, overlapping subjects in
 *   one stream, a mirror) and what cannot be worked out (a link's subjects) block the change.
 * - The dead-letter subjects no stream captures (and none of the planned destinations will) go to a
 *   per-region RELAY_DLQ stream.
 * - The group bucket is created when missing, the way the relay creates it; an existing one is left
 *   as it is. Source streams are reported, never changed.
 */
import { isCoveredBy } from "../protocol/subjects.js";
import { destinationItem } from "./destination.js";
import { addSubjects, describeExisting, list } from "./rules.js";
import type { DiffOptions } from "./rules.js";
import { bucketStreamName, DEAD_LETTER_STREAM } from "./types.js";
import type { PlanItem, RegionFacts, SourceNote } from "./types.js";

export { addSubjects, partialOverlap, serverAtLeast, statusOf } from "./rules.js";
export type { DiffOptions } from "./rules.js";

/** `planned`: the subjects each destination stream has once apply made its safe changes. */
function deadLetterItem(
  region: string,
  facts: RegionFacts,
  planned: ReadonlyMap<string, readonly string[]>,
): PlanItem | undefined {
  const { deadLetters } = facts.needs;
  if (deadLetters.length === 0) return undefined;
  const links = [...new Set(deadLetters.map((d) => d.link))];
  const base = { region, kind: "dead-letter" as const, name: DEAD_LETTER_STREAM, links };
  const fact = facts.existing.get(DEAD_LETTER_STREAM);
  if (!fact || fact.kind === "failed") {
    return {
      ...base,
      status: "failed",
      detail: `cannot read ${region}/${DEAD_LETTER_STREAM}: ${fact?.reason ?? "not read"}`,
      changes: [],
    };
  }
  const subjects = [...new Set(deadLetters.map((d) => d.subject))];
  const captured: string[] = [];
  const uncaptured: string[] = [];
  for (const subject of subjects) {
    // Captured now, or by a destination stream the plan creates or extends.
    const by = [
      ...new Set([
        ...(facts.owners.get(subject) ?? []),
        ...[...planned].filter(([, subjects]) => isCoveredBy(subject, subjects)).map(([name]) => name),
      ]),
    ];
    if (by.length > 0) captured.push(`${subject} by ${by.join(", ")}`);
    else uncaptured.push(subject);
  }
  const capturedText = captured.length > 0 ? `; captured: ${captured.join("; ")}` : "";
  if (uncaptured.length === 0) {
    const own = fact.kind === "found" ? "" : ` (${DEAD_LETTER_STREAM} is not needed)`;
    return {
      ...base,
      status: "ok",
      detail: `every dead-letter subject is captured${own}: ${captured.join("; ")}`,
      changes: [],
    };
  }
  if (fact.kind === "missing") {
    return {
      ...base,
      status: "create",
      detail: `${uncaptured.join(", ")} captured by no stream${capturedText}`,
      changes: [
        { field: "stream", to: "create", rule: "safe", required: true },
        { field: "subjects", to: list(uncaptured), rule: "safe", required: true },
        { field: "retention", to: "limits", rule: "safe", required: true },
      ],
      create: { subjects: uncaptured, retention: "limits", storage: "file" },
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
          reason: `${region}/${DEAD_LETTER_STREAM} is a mirror and cannot capture ${uncaptured.join(", ")}: capture them in another stream, or set onBadMessage of links ${links.join(", ")}`,
        },
      ],
    };
  }
  const merged = addSubjects(s.subjects, uncaptured);
  return {
    ...base,
    status: "update",
    detail: `${describeExisting(s)}${capturedText}`,
    changes: [
      {
        field: "subjects",
        from: list(s.subjects),
        to: `${list(merged)} (+ ${uncaptured.join(", ")})`,
        rule: "safe",
        required: true,
      },
    ],
    update: { subjects: merged },
  };
}

function bucketItem(region: string, facts: RegionFacts): PlanItem | undefined {
  const bucket = facts.needs.bucket;
  if (bucket === undefined) return undefined;
  const links = facts.needs.destinations.flatMap((d) => d.links);
  const base = { region, kind: "lease bucket" as const, name: bucket, links };
  const stream = bucketStreamName(bucket);
  const fact = facts.existing.get(stream);
  if (!fact || fact.kind === "failed") {
    return {
      ...base,
      status: "failed",
      detail: `cannot read ${region}/${stream}: ${fact?.reason ?? "not read"}`,
      changes: [],
    };
  }
  if (fact.kind === "found") {
    return {
      ...base,
      status: "ok",
      detail: `KV bucket exists (stream ${stream}, ${fact.stream.replicas} replica(s)): the relays use it as it is`,
      changes: [],
    };
  }
  const replicas = facts.server.clustered ? "min(3, cluster size)" : "1 (a single server)";
  return {
    ...base,
    status: "create",
    detail: `KV bucket ${bucket} (stream ${stream}) does not exist: created as the relay creates it, history 1, replicas ${replicas}`,
    changes: [{ field: "stream", to: "create", rule: "safe", required: true }],
  };
}

function sourceItem(region: string, note: SourceNote): PlanItem {
  const at = `${note.region}/${note.stream}`;
  const base = {
    region,
    kind: "source" as const,
    name: at,
    links: note.links,
    status: "note" as const,
    changes: [],
  };
  switch (note.state.kind) {
    case "found":
      return {
        ...base,
        detail: `exists: subjects ${list(note.state.subjects)}, ${note.state.messages} message(s); read by the relay, never changed`,
      };
    case "missing":
      return {
        ...base,
        detail: `does not exist: create it in region ${note.region}; jetstream-relay never creates or changes a source stream`,
      };
    case "failed":
      return { ...base, detail: `not read: ${note.state.reason}` };
  }
}

/** Every item of one region: destinations (config order), the dead-letter stream, the group bucket, sources. */
export function planRegionItems(region: string, facts: RegionFacts, opts: DiffOptions): PlanItem[] {
  const deadLetters = facts.needs.deadLetters.map((d) => d.subject);
  const items: PlanItem[] = facts.needs.destinations.map((need) =>
    destinationItem(
      region,
      need,
      facts.existing.get(need.stream),
      facts.owners,
      facts.server,
      deadLetters,
      opts,
    ),
  );
  // What the destination streams will capture: what apply creates or adds (existing subjects are in `owners`).
  const planned = new Map<string, readonly string[]>();
  for (const i of items) {
    const subjects = i.create?.subjects ?? i.update?.subjects;
    if (subjects) planned.set(i.name, subjects);
  }
  const dlq = deadLetterItem(region, facts, planned);
  if (dlq) items.push(dlq);
  const bucket = bucketItem(region, facts);
  if (bucket) items.push(bucket);
  items.push(...facts.sources.map((s) => sourceItem(region, s)));
  return items;
}
