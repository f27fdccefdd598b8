/**
 * The region rows: whether the check reached each region of a link, and the pull window the round
 * trip to the source region calls for.
 */
import type { LinkConfig, MaxRate } from "../config/types.js";
import type { StreamFact, StreamFacts } from "../nats/stream-facts.js";
import { windowPerSecond } from "../nats/pull-window.js";
import { REFERENCE_RATE_PER_SEC, rateCapWindow, startingWindow, WAN_RTT_MS } from "../link/window-controller.js";
import { initialWindow } from "../link/link-window.js";
import { skipsOnSubjectPurge } from "../nats/purge-skips.js";
import { skipped, where } from "./check-helpers.js";
import type { CheckResult, RegionFact } from "./facts.js";

export function checkRegion(role: "source" | "destination", region: string, fact: RegionFact): CheckResult {
  const name = `${role} region`;
  if (fact.ok) {
    const at = `${region}: connected to ${fact.server}${fact.version ? ` (nats-server ${fact.version})` : ""}`;
    // Not a warning: the links read such skips back (docs/data-path.md); every other consumer is skipped.
    const purges =
      role === "source" && fact.version !== undefined && skipsOnSubjectPurge(fact.version)
        ? "; before 2.10.11 a subject purge (a KV purge, `nats stream purge --subject`) jumps consumers over other subjects' stored messages: the relay reads them back, other consumers lose them (upgrade to 2.10.11+)"
        : "";
    return { name, level: "ok", detail: `${at}${purges}` };
  }
  return {
    name,
    level: "error",
    // The reason names the region and its servers (credentials stripped).
    detail: `not reachable: ${fact.reason}`,
    fix: `check regions.${region}.servers, the network path to them, auth and TLS; the ${role === "source" ? "link cannot read" : "link cannot publish"} until it connects`,
  };
}

// ---------------------------------------------------------------------------------------------
// Pull window

const MIB = 1024 * 1024;
/** The most `inFlightBytes` takes (the config's bound). */
const MAX_IN_FLIGHT_BYTES = 16 * 1024 * MIB;

const mib = (bytes: number): string => (bytes >= MIB ? `${+(bytes / MIB).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`);

/** A size as the config takes it (whole MiB, else whole KiB rounded up). */
const configSize = (bytes: number): string => (bytes % MIB === 0 ? `${bytes / MIB}MiB` : `${Math.ceil(bytes / 1024)}KiB`);

/**
 * The window the link starts with and the cap it may grow to (it sizes itself to the round trip:
 * link-window.ts), against what the round trip to the source region needs at 10,000 msgs/s (measured
 * from where the check runs, so run it where the relay runs). A cap below that across a WAN warns: the
 * link moves at most one cap per round trip. The bytes cap is inFlightBytes over the stream's average
 * message size (the relay measures it as it goes; an empty stream gives no size to judge by).
 */
export function checkWindow(link: LinkConfig, source: StreamFact, region: RegionFact): CheckResult {
  const name = "pull window";
  if (!region.ok) return skipped(name, `region ${link.from.region} is not reachable`);
  if (source.kind !== "found") return skipped(name, `stream ${where(link.from.region, link.from.stream)} was not read`);
  const s = source.stream;
  const avg = s.bytes !== undefined && s.messages > 0 ? s.bytes / s.messages : undefined;
  const rtt = region.rttMs === undefined ? undefined : Math.max(1, Math.round(region.rttMs));
  const start = startingWindow({
    capMessages: link.inFlight,
    capBytes: link.inFlightBytes,
    batchSize: link.batchSize,
    initial: initialWindow(link, rtt),
    ...(rtt !== undefined ? { rttMs: rtt } : {}),
    ...(avg !== undefined ? { avgMessageBytes: avg } : {}),
  });
  const byBytes = start.cap < link.inFlight;
  const capWhy = byBytes ? `inFlightBytes ${mib(link.inFlightBytes)} over messages of ~${mib(avg ?? 0)} on average` : `inFlight ${link.inFlight}`;
  const base = `starts at ${start.window} messages and sizes itself to the round trip, up to ${start.cap} (${capWhy})`;
  // The rate cap (maxRate) beside the window: the window stops at what the capped rate needs.
  const rateWindow = rateCapWindow(link.maxRate, avg, rtt);
  const capNote = link.maxRate === undefined ? "" : `; rate cap ${formatRate(link.maxRate)}: the window stops at ~${Math.max(link.batchSize, Math.min(start.cap, rateWindow))}`;
  const slow = rateCapBelowSource(link, s);
  if (slow !== undefined) return { name, level: "warning", detail: `${base}${capNote}; ${slow}`, fix: `raise links[${link.name}].maxRate above the source's rate, or the link cannot catch up while the source keeps that pace (docs/data-path.md, "Rate caps")` };
  if (rtt === undefined) return { name, level: "ok", detail: `${base}; round trip to ${link.from.region} not measured${capNote}` };
  const detail = `${base}; round trip from here ${rtt} ms: ${REFERENCE_RATE_PER_SEC} msgs/s needs ~${start.neededForRtt ?? 0}, the cap allows ~${windowPerSecond(start.cap, rtt)} msgs/s${capNote}`;
  // Capped below what the window allows: the window is not what limits the link.
  if (start.limit === "rtt" || rtt < WAN_RTT_MS || rateWindow <= start.cap) return { name, level: "ok", detail };
  const needed = start.neededForRtt ?? link.inFlight;
  const raise = byBytes
    ? `links[${link.name}].inFlightBytes: ${configSize(Math.min(MAX_IN_FLIGHT_BYTES, Math.ceil(needed * (avg ?? 1))))} (the window it needs × the average message)`
    : `links[${link.name}].inFlight: ${Math.min(65_536, needed)}`;
  return {
    name,
    level: "warning",
    detail,
    fix: `across this round trip the cap holds the window below what ${REFERENCE_RATE_PER_SEC} msgs/s needs: ${raise} (docs/data-path.md, "A link across a WAN")`,
  };
}

const formatRate = (r: MaxRate): string =>
  [r.messages !== undefined ? `${+r.messages.toFixed(2)} msgs/s` : undefined, r.bytes !== undefined ? `${mib(r.bytes)}/s` : undefined].filter((x) => x !== undefined).join(", ");

/**
 * The rate cap is below the source's average rate over what it holds (its messages and bytes over the
 * time from its first message to its last): a link capped there falls further behind while the source
 * keeps that pace. Undefined when it is not (or there is no cap, or no span to judge by, or the link reads
 * only part of the stream: a filter's share of the rate is not known).
 */
function rateCapBelowSource(link: LinkConfig, s: StreamFacts): string | undefined {
  const cap = link.maxRate;
  if (cap === undefined || s.spanMs === undefined || link.from.filterSubject !== undefined) return undefined;
  const seconds = s.spanMs / 1000;
  const messages = s.messages / seconds;
  const bytes = s.bytes === undefined ? undefined : s.bytes / seconds;
  const below = (cap.messages !== undefined && cap.messages < messages) || (cap.bytes !== undefined && bytes !== undefined && cap.bytes < bytes);
  if (!below) return undefined;
  const took = `~${Math.round(messages)} msgs/s${bytes !== undefined ? `, ${mib(bytes)}/s` : ""}`;
  return `the cap is below the source's average rate over what it holds (${took})`;
}
