/**
 * Reads what a region has, for the plan: the streams the relay needs (by name), the streams that
 * overlap each planned subject, and the links' source streams (read, never changed).
 */
import { JetStreamApiCodes } from "@nats-io/jetstream";
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { millis } from "@nats-io/nats-core";
import type { LinkConfig, RelayConfig } from "../config/types.js";
import { isApiCode } from "../nats/durable-consumer.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { streamFacts } from "../nats/stream-facts.js";
import type { RegionSession } from "../nats/region-session.js";
import { bucketStreamName, DEAD_LETTER_STREAM } from "./types.js";
import type { ExistingFact, ExistingStream, RegionNeeds, SourceNote } from "./types.js";

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function existingStream(info: StreamInfo): ExistingStream {
  const c = info.config;
  return {
    name: c.name,
    subjects: c.subjects ?? [],
    retention: c.retention,
    storage: c.storage,
    duplicateWindowMs: c.duplicate_window ? millis(c.duplicate_window) : 0,
    maxAgeMs: c.max_age ? millis(c.max_age) : 0,
    replicas: c.num_replicas,
    messages: info.state.messages,
    mirror: c.mirror !== undefined && c.mirror !== null,
  };
}

export async function readExisting(jsm: JetStreamManager, name: string): Promise<ExistingFact> {
  try {
    return { kind: "found", stream: existingStream(await jsm.streams.info(name)) };
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) return { kind: "missing" };
    return { kind: "failed", reason: message(err) };
  }
}

/** A source stream as preflight sees it (its subjects are what a link without a filter reads). */
export async function readSource(session: RegionSession | undefined, stream: string): Promise<StreamFact> {
  if (!session?.ok) return { kind: "unreachable" };
  try {
    return streamFacts(await session.jsm.streams.info(stream));
  } catch (err) {
    if (isApiCode(err, JetStreamApiCodes.StreamNotFound)) return { kind: "missing" };
    return { kind: "failed", reason: message(err) };
  }
}

/** Names of the streams whose subjects overlap `subject` (what the server refuses a second stream for). */
export async function streamsOverlapping(jsm: JetStreamManager, subject: string): Promise<string[]> {
  const names: string[] = [];
  for await (const n of jsm.streams.names(subject)) names.push(n);
  return names;
}

/** The source streams of the links ending in `region`, as reported in the plan. */
export function sourceNotes(
  config: RelayConfig,
  region: string,
  sourceOf: (l: LinkConfig) => StreamFact,
  sessions: ReadonlyMap<string, RegionSession>,
): SourceNote[] {
  const notes = new Map<string, { region: string; stream: string; links: string[]; fact: StreamFact }>();
  for (const l of config.links.filter((x) => x.to.region === region)) {
    const key = `${l.from.region}/${l.from.stream}`;
    const n = notes.get(key) ?? {
      region: l.from.region,
      stream: l.from.stream,
      links: [],
      fact: sourceOf(l),
    };
    n.links.push(l.name);
    notes.set(key, n);
  }
  return [...notes.values()].map((n): SourceNote => {
    const f = n.fact;
    const session = sessions.get(n.region);
    const state: SourceNote["state"] =
      f.kind === "found"
        ? { kind: "found", subjects: f.stream.subjects, messages: f.stream.messages }
        : f.kind === "missing"
          ? { kind: "missing" }
          : f.kind === "failed"
            ? { kind: "failed", reason: f.reason }
            : {
                kind: "failed",
                reason: session && !session.ok ? session.reason : `region ${n.region} is not reachable`,
              };
    return { region: n.region, stream: n.stream, links: n.links, state };
  });
}

/** Every stream the needs name, and the streams overlapping each planned subject. */
export async function readRegion(
  jsm: JetStreamManager,
  needs: RegionNeeds,
): Promise<{ existing: Map<string, ExistingFact>; owners: Map<string, readonly string[]> }> {
  const names = new Set(needs.destinations.map((d) => d.stream));
  if (needs.deadLetters.length > 0) names.add(DEAD_LETTER_STREAM);
  if (needs.bucket !== undefined) names.add(bucketStreamName(needs.bucket));
  const existing = new Map<string, ExistingFact>();
  await Promise.all([...names].map(async (n) => existing.set(n, await readExisting(jsm, n))));
  const subjects = new Set([
    ...needs.destinations.flatMap((d) => d.subjects),
    ...needs.deadLetters.map((d) => d.subject),
  ]);
  const owners = new Map<string, readonly string[]>();
  // A failure here fails the region: without it a create could be refused for an overlap.
  await Promise.all([...subjects].map(async (s) => owners.set(s, await streamsOverlapping(jsm, s))));
  return { existing, owners };
}
