/**
 * The source sequences of an audited range that have no copy in the destination, judged against what
 * the source actually holds, as `verify` classifies them (verify/verifier.ts): a message the link does
 * not forward (a loop, max hops, a direct route), one dead-lettered, one whose entity the guard holds at
 * a newer version (superseded), one whose id another copy holds (the source stored it twice), one that is
 * not relayable and has no dead-letter record, and one no longer in the source (or not the link's
 * subject) are expected; what is left is missing. A message is called missing only after one more read
 * of the destination, from well before its source time to the end, finds no copy of it under any record.
 */
import type { JsMsg, StoredMsg } from "@nats-io/jetstream";
import { jetstreamManager } from "@nats-io/jetstream";
import { directRoutesFor } from "../config/routes.js";
import type { LinkConfig } from "../config/types.js";
import type { Guard } from "../guard/types.js";
import { identify, route } from "../link/identity.js";
import { streamsCapturing } from "../nats/stream-reader.js";
import type { StreamSide } from "../nats/stream-reader.js";
import { headersOf } from "../nats/wire-headers.js";
import { RelayHeaders } from "../protocol/headers.js";
import { patternMatches } from "../protocol/subjects.js";
import type { CopyReader } from "./copies.js";

export type ExpectedKind = "not_forwarded" | "dead_lettered" | "superseded" | "duplicate_id" | "bad" | "not_in_source";

export interface Missing {
  readonly sourceSeq: number;
  readonly id: string;
}

export interface GapVerdict {
  readonly missing: Missing[];
  readonly expected: Map<ExpectedKind, number>;
}

export interface GapDeps {
  readonly link: LinkConfig;
  readonly links: readonly LinkConfig[];
  readonly source: StreamSide;
  readonly dest: StreamSide;
  readonly incarnation: number | undefined;
  readonly guard: Guard;
  readonly copies: CopyReader;
  /** Pays for messages fetched one by one (audit.maxReadRate). */
  readonly paced: (messages: number) => Promise<void>;
  /** A paced, headers-only read of a side from a sequence or a time to a sequence (pacer.ts readPaced). */
  readonly read: (side: StreamSide, from: { readonly seq: number } | { readonly ms: number }, to: number, filterSubject: string | undefined, onMessage: (m: JsMsg, seq: number) => void) => Promise<void>;
}

/** Gaps up to this many are fetched one by one; more are read in one filtered pass over their span. */
const FETCH_EACH = 64;
/** The regions' clocks differ: a copy can carry an earlier time than its source message. */
const CLOCK_SLACK_MS = 60_000;

interface Candidate {
  readonly seq: number;
  readonly id: string;
  readonly timeMs: number;
  readonly entity?: string;
  readonly version?: number;
  readonly bad: boolean;
}

export async function judgeGaps(deps: GapDeps, seqs: readonly number[]): Promise<GapVerdict> {
  const expected = new Map<ExpectedKind, number>();
  const count = (kind: ExpectedKind, n = 1) => expected.set(kind, (expected.get(kind) ?? 0) + n);
  if (seqs.length === 0) return { missing: [], expected };
  const held = await sourceMessages(deps, seqs);
  count("not_in_source", seqs.length - held.length);
  const directRoutes = directRoutesFor(deps.link, deps.links);
  let candidates: Candidate[] = [];
  for (const m of held) {
    const r = identify({ subject: m.subject, headers: m.headers, streamSequence: m.seq }, deps.link, deps.incarnation);
    if (r.ok && !route(r.identity, deps.link, directRoutes).forward) {
      count("not_forwarded");
      continue;
    }
    const id = r.ok ? r.identity.id : r.id;
    const entity = r.ok ? r.identity.entity : undefined;
    const version = r.ok ? r.identity.version : undefined;
    candidates.push({
      seq: m.seq,
      id,
      timeMs: m.timeMs,
      bad: !r.ok,
      ...(entity !== undefined && version !== undefined ? { entity, version } : {}),
    });
  }
  if (candidates.length === 0) return { missing: [], expected };
  const since = Math.min(...candidates.map((c) => c.timeMs)) - CLOCK_SLACK_MS;

  const lettered = await deadLettered(deps, since);
  count("dead_lettered", candidates.filter((c) => lettered.has(c.seq)).length);
  candidates = candidates.filter((c) => !lettered.has(c.seq));
  const superseded = await supersededOf(deps.guard, candidates);
  count("superseded", superseded.size);
  candidates = candidates.filter((c) => !superseded.has(c.seq));
  if (candidates.length === 0) return { missing: [], expected };

  // The last word: the destination from well before the first candidate's time, under any record.
  const dupWindowMs = await duplicateWindowMs(deps.dest);
  const bySeq = new Set(candidates.map((c) => c.seq));
  const byId = new Set(candidates.map((c) => c.id));
  const seen = new Set<number>();
  const seenIds = new Set<string>();
  await deps.read(deps.dest, { ms: since - dupWindowMs }, Number.MAX_SAFE_INTEGER, undefined, (m, seq) => {
    const copy = deps.copies.read(m, seq);
    if (copy && bySeq.has(copy.sourceSeq)) seen.add(copy.sourceSeq);
    const id = headersOf(m)?.get(RelayHeaders.MsgId) ?? "";
    if (id !== "" && byId.has(id)) seenIds.add(id);
  });
  const missing: Missing[] = [];
  for (const c of candidates) {
    if (seen.has(c.seq)) continue; // a copy after all, outside the range the pass read
    if (seenIds.has(c.id)) count("duplicate_id");
    else if (c.bad) count("bad");
    else missing.push({ sourceSeq: c.seq, id: c.id });
  }
  return { missing, expected };
}

/** A source message at a gap, as much as the classification needs. */
interface Held {
  readonly seq: number;
  readonly subject: string;
  readonly headers: { get(key: string): string } | undefined;
  readonly timeMs: number;
}

/** The source messages at `seqs` that the source still holds and that are the link's (its filter). */
async function sourceMessages(deps: GapDeps, seqs: readonly number[]): Promise<Held[]> {
  const filter = deps.link.from.filterSubject;
  const out: Held[] = [];
  if (seqs.length <= FETCH_EACH) {
    const jsm = await jetstreamManager(deps.source.nc, deps.source.domain ? { domain: deps.source.domain, checkAPI: false } : { checkAPI: false });
    for (const seq of seqs) {
      const sm: StoredMsg | null = await jsm.streams.getMessage(deps.source.stream, { seq }).catch((err: unknown) => {
        if (isNoMessage(err)) return null;
        throw err;
      });
      await deps.paced(1);
      if (!sm || (filter !== undefined && !patternMatches(sm.subject, filter))) continue;
      out.push({ seq: sm.seq, subject: sm.subject, headers: sm.header, timeMs: sm.time.getTime() });
    }
    return out;
  }
  const wanted = new Set(seqs);
  await deps.read(deps.source, { seq: seqs[0]! }, seqs[seqs.length - 1]!, filter, (m: JsMsg) => {
    if (!wanted.has(m.seq)) return;
    out.push({ seq: m.seq, subject: m.subject, headers: headersOf(m), timeMs: m.info.timestampNanos / 1e6 });
  });
  return out;
}

function isNoMessage(err: unknown): boolean {
  const code = (err as { api_error?: { err_code?: number }; code?: number | string } | undefined)?.api_error?.err_code;
  return code === 10037 || /no message found/i.test(String((err as Error | undefined)?.message));
}

/** Source seqs of the link's dead-letter records stored since `sinceMs` (none under `halt`). */
async function deadLettered(deps: GapDeps, sinceMs: number): Promise<Set<number>> {
  const seqs = new Set<number>();
  const policy = deps.link.badMessage;
  if (policy.action === "halt") return seqs;
  const [stream] = await streamsCapturing(deps.dest, policy.subject);
  if (stream === undefined) return seqs;
  const prefix = `${deps.link.from.region} ${deps.link.from.stream} `;
  await deps.read({ ...deps.dest, stream }, { ms: sinceMs }, Number.MAX_SAFE_INTEGER, policy.subject, (m) => {
    const h = headersOf(m);
    if (h?.get(RelayHeaders.DeadLetterLink) !== deps.link.name) return;
    const rs = h.get(RelayHeaders.Source);
    if (rs.startsWith(prefix)) seqs.add(Number(rs.slice(prefix.length)));
  });
  return seqs;
}

/** Candidates whose entity the guard holds at their version or newer (it dropped them as stale). */
async function supersededOf(guard: Guard, candidates: readonly Candidate[]): Promise<Set<number>> {
  const out = new Set<number>();
  const versioned = candidates.filter((c) => c.entity !== undefined && c.version !== undefined);
  if (versioned.length === 0 || !guard.readVersions) return out;
  const stored = await guard.readVersions([...new Set(versioned.map((c) => c.entity!))]);
  for (const c of versioned) {
    const v = stored.get(c.entity!);
    if (v !== undefined && v >= c.version!) out.add(c.seq);
  }
  return out;
}

async function duplicateWindowMs(dest: StreamSide): Promise<number> {
  const jsm = await jetstreamManager(dest.nc, dest.domain ? { domain: dest.domain, checkAPI: false } : { checkAPI: false });
  const info = await jsm.streams.info(dest.stream);
  return Math.ceil((info.config.duplicate_window ?? 0) / 1e6);
}
