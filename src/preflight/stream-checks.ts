/**
 * The stream rows: the link's source and destination streams exist (and the filter matches the
 * source), the destination keeps what it acks (limits retention), and its duplicate window covers
 * the link's replay horizon.
 */
import type { LinkConfig } from "../config/types.js";
import type { StreamFact } from "../nats/stream-facts.js";
import { formatDuration } from "../config/durations.js";
import { intersects } from "../protocol/subjects.js";
import { list, replayHorizonMs, skipped, streamsApply, where } from "./check-helpers.js";
import type { CheckResult } from "./facts.js";

// ---------------------------------------------------------------------------------------------
// Streams exist

export function checkSourceStream(link: LinkConfig, source: StreamFact): CheckResult {
  const name = "source stream";
  const at = where(link.from.region, link.from.stream);
  switch (source.kind) {
    case "unreachable":
      return skipped(name, `region ${link.from.region} is not reachable`);
    case "failed":
      return {
        name,
        level: "error",
        detail: `${at}: cannot read the stream: ${source.reason}`,
        fix: "make sure JetStream is enabled for the account and the relay's user may use the JetStream API",
      };
    case "missing":
      return {
        name,
        level: "error",
        detail: `${at} does not exist: the link has nothing to read and its durable cannot be created`,
        fix: `create it in region ${link.from.region} with the subjects its publishers use, file storage and limits retention (e.g. nats stream add ${link.from.stream} --subjects "<subjects>" --storage file --retention limits), or correct links[${link.name}].from.stream; jetstream-relay streams apply never creates or changes a source stream`,
      };
    case "found": {
      const s = source.stream;
      const filter = link.from.filterSubject;
      const base = `${at} exists: subjects ${list(s.subjects)}${s.sourced ? " (mirror/sourced)" : ""}, ${s.messages} message(s)`;
      if (filter && s.subjects.length > 0 && !s.subjects.some((subj) => intersects(filter, subj))) {
        return {
          name,
          level: "error",
          detail: `${base}; the link's filter ${filter} matches none of them: the server refuses the durable, and it would relay nothing`,
          fix: `set links[${link.name}].from.filter to a subset of ${list(s.subjects)}, or remove it`,
        };
      }
      return { name, level: "ok", detail: filter ? `${base}; filter ${filter}` : base };
    }
  }
}

export function checkDestinationStream(
  link: LinkConfig,
  dest: StreamFact,
  wanted: readonly string[] | undefined,
): CheckResult {
  const name = "destination stream";
  const at = where(link.to.region, link.to.stream);
  switch (dest.kind) {
    case "unreachable":
      return skipped(name, `region ${link.to.region} is not reachable`);
    case "failed":
      return {
        name,
        level: "error",
        detail: `${at}: cannot read the stream: ${dest.reason}`,
        fix: "make sure JetStream is enabled for the account and the relay's user may use the JetStream API",
      };
    case "missing": {
      const subjects = wanted && wanted.length > 0 ? `subjects ${wanted.join(", ")}` : "the subjects the links publish to";
      return {
        name,
        level: "error",
        detail: `${at} does not exist: every publish would get no responders and the link would retry forever`,
        fix: `create it: ${streamsApply(link.to.region)} (creates ${link.to.stream} with ${subjects}, file storage, limits retention, duplicate window ${formatDuration(replayHorizonMs(link))})`,
      };
    }
    case "found": {
      const s = dest.stream;
      return {
        name,
        level: "ok",
        detail: `${at} exists: subjects ${list(s.subjects)}, ${s.messages} message(s)`,
      };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Destination retention

export function checkRetention(link: LinkConfig, dest: StreamFact): CheckResult {
  const name = "destination retention";
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const r = dest.stream.retention;
  if (dest.stream.counter === true)
    return {
      name,
      level: "error",
      detail: `${link.to.stream} is a counter stream (allow_msg_counter, nats-server 2.12+): it refuses every publish without Nats-Incr and sums what it takes, so it cannot hold a copy; the link fails with DESTINATION_UNSUPPORTED`,
      fix: `aggregate counters across regions with server sourcing (the counter stream's sources), or point links[${link.name}].to.stream at a stream without allow_msg_counter`,
    };
  if (r === "limits")
    return {
      name,
      level: "ok",
      detail: "limits: a stored message stays until the stream's limits remove it",
    };
  return {
    name,
    level: "error",
    detail: `${r}: interest/work-queue destinations can ack a message they dropped (no consumer interest, or consumed and removed), so the relay would ack the source for a message that is gone and never relay it again; dedup by id also stops working once it is removed`,
    fix: `use a stream with retention limits: on nats-server 2.10+ ${streamsApply(link.to.region)} --force changes interest → limits in place; otherwise (nats-server 2.9, or a work-queue stream) point links[${link.name}].to.stream at a new stream (${streamsApply(link.to.region)} creates it) or recreate ${link.to.stream} with limits retention`,
  };
}

// ---------------------------------------------------------------------------------------------
// Duplicate window

export function checkDuplicateWindow(link: LinkConfig, dest: StreamFact, leaseMs?: number): CheckResult {
  const name = "duplicate window";
  if (dest.kind !== "found") return skipped(name, "the destination stream was not read");
  const horizon = replayHorizonMs(link);
  const s = dest.stream;
  const why = `replay horizon ${formatDuration(horizon)} = max(2 × ackWait ${formatDuration(link.ackWaitMs)}, maxReplayAge ${link.maxReplayAgeMs === undefined ? "-" : formatDuration(link.maxReplayAgeMs)}, 2m)`;
  const guardNote = link.guard
    ? `the link's ${link.guard.store.kind} guard covers redeliveries the broker does not, but the window is the second line of defence`
    : "the link has no guard, so nothing else catches them";
  const problems: string[] = [];
  const fixes: string[] = [];
  if (s.duplicateWindowMs <= 0) {
    problems.push(
      `duplicate window is not set: the broker does not deduplicate relayed messages; ${guardNote}`,
    );
    fixes.push(`${streamsApply(link.to.region)} (raises ${s.name}'s duplicate window to ${formatDuration(horizon)})`);
  } else if (s.duplicateWindowMs < horizon) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} < ${why}: a redelivery or replay after the window is stored twice (broker dedup will not cover redeliveries); ${guardNote}`,
    );
    fixes.push(
      `${streamsApply(link.to.region)} (raises ${s.name}'s duplicate window to ${formatDuration(horizon)}), or shorten links[${link.name}].ackWait / maxReplayAge`,
    );
  }
  // A relay frozen past its lease, or one whose last bytes sit in a slow network, may land what it had
  // in flight after the next owner published the same messages: the window must outlast a few leases.
  if (leaseMs !== undefined && s.duplicateWindowMs > 0 && s.duplicateWindowMs < 3 * leaseMs) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} < 3 × group.lease ${formatDuration(leaseMs)}: what an owner paused past its lease had already sent can land after the next owner published the same messages, and is stored twice; ${guardNote}`,
    );
    fixes.push(`raise ${s.name}'s duplicate window to at least ${formatDuration(3 * leaseMs)}, or shorten group.lease`);
  }
  if (s.maxAgeMs > 0 && s.duplicateWindowMs > s.maxAgeMs) {
    problems.push(
      `duplicate window ${formatDuration(s.duplicateWindowMs)} > max age ${formatDuration(s.maxAgeMs)}: ids are only remembered while their message is kept`,
    );
    fixes.push(
      `raise ${s.name}'s max age to at least its duplicate window, or lower the window to ${formatDuration(Math.min(horizon, s.maxAgeMs))}, with your stream tooling in region ${link.to.region} (jetstream-relay streams apply never lowers a window)`,
    );
  }
  if (problems.length > 0)
    return { name, level: "warning", detail: problems.join("; "), fix: fixes.join("; ") };
  const age = s.maxAgeMs > 0 ? `, <= max age ${formatDuration(s.maxAgeMs)}` : "";
  return { name, level: "ok", detail: `${formatDuration(s.duplicateWindowMs)} >= ${why}${age}` };
}
