/** What `verify` found on one link; `--json` prints this object as it is. */
export interface VerifyReport {
  readonly link: string;
  /** RFC 3339; absent when the whole of both streams was read. */
  readonly since?: string;
  readonly source: {
    readonly region: string;
    readonly stream: string;
    readonly filter?: string;
    /** First sequence still stored in the stream: older messages were removed by retention and not examined. */
    readonly streamFirstSeq: number;
    readonly streamLastSeq: number;
    /** The stream's creation time (ms since the epoch): the incarnation in derived ids. Absent if the server did not say. */
    readonly incarnation?: number;
    /** Messages read (after filter and --since). */
    readonly examined: number;
    /** Examined messages the link forwards: what the destination should hold. */
    readonly forwardable: number;
    /** Examined messages route() does not forward (originated in or passed through the destination, ...). */
    readonly notForwarded: number;
    /** Examined messages the link cannot relay (missing/malformed entity or version): dead-lettered or halting. */
    readonly bad: number;
  };
  readonly destination: {
    readonly region: string;
    readonly stream: string;
    readonly streamFirstSeq: number;
    readonly streamLastSeq: number;
    /** Messages read at/after --since (with --since, up to a minute earlier is read for presence only). */
    readonly examined: number;
    /** Examined messages whose Relay-Source names this link's source region and stream. */
    readonly fromLink: number;
    /**
     * Highest source sequence named by a Relay-Source of this link: the relayed horizon (0 = none). Markers
     * whose Relay-Source-Time is earlier than the source's incarnation (a recreated source) are left out.
     */
    readonly lastRelayedSourceSeq: number;
    /** Distinct message ids held in memory (hashed). */
    readonly distinctIds: number;
    /** Messages whose id has the derived form before incarnations (`<region>:<stream>:<seq>`), counted under the current form. */
    readonly legacyIds: number;
  };
  /** Forwardable source messages newer than the horizon: in flight, not counted as missing. */
  readonly notYetRelayed: { readonly count: number; readonly firstSeq?: number; readonly examples: readonly string[] };
  readonly missing: { readonly count: number; readonly examples: readonly { readonly id: string; readonly sourceSeq: number }[] };
  readonly duplicated: {
    /** Distinct ids stored more than once. */
    readonly count: number;
    /** Copies beyond the first, summed over those ids. */
    readonly extraCopies: number;
    readonly examples: readonly { readonly id: string; readonly copies: number }[];
  };
  /** Absent when the link has no guard.versions. */
  readonly backwards?: {
    /** Entities whose version decreased at least once. */
    readonly count: number;
    /** Decreases seen in all (an entity can go backwards more than once). */
    readonly events: number;
    readonly entitiesChecked: number;
    readonly examples: readonly BackwardsExample[];
  };
  readonly agree: boolean;
  readonly elapsedMs: number;
}

export interface BackwardsExample {
  readonly entity: string;
  readonly before: number;
  readonly after: number;
  /** Destination sequences of the two messages. */
  readonly beforeSeq: number;
  readonly afterSeq: number;
}

/** The human-readable report: a summary, then up to N example ids of each kind. */
export function formatReport(r: VerifyReport): string {
  const s = r.source;
  const d = r.destination;
  const filter = s.filter ? ` (filter ${s.filter})` : "";
  const lines = [
    `verify link ${r.link}: ${s.region}/${s.stream}${filter} -> ${d.region}/${d.stream}${r.since ? `, since ${r.since}` : ""}`,
    "",
    `source ${s.region}/${s.stream}: ${s.examined} examined (stream first seq ${s.streamFirstSeq}, last seq ${s.streamLastSeq}; ` +
      `earlier messages were removed by retention and not examined)`,
    `  ${s.forwardable} forwarded by this link, ${s.notForwarded} not forwarded (loop or redundant route), ${s.bad} bad (dead-letter)`,
    `destination ${d.region}/${d.stream}: ${d.examined} examined, ${d.fromLink} relayed over this link, ` +
      `last Relay-Source seq ${d.lastRelayedSourceSeq}` +
      (d.legacyIds > 0 ? `, ${d.legacyIds} with ids derived before incarnations (counted under their current form)` : ""),
    "",
    `not yet relayed (newer than the destination's last Relay-Source seq ${d.lastRelayedSourceSeq}): ${r.notYetRelayed.count}` +
      (r.notYetRelayed.firstSeq !== undefined ? ` (from source seq ${r.notYetRelayed.firstSeq})` : ""),
    ...r.notYetRelayed.examples.map((id) => `  ${id}`),
    `missing: ${r.missing.count}`,
    ...r.missing.examples.map((m) => `  ${m.id} (source seq ${m.sourceSeq})`),
    `duplicated: ${r.duplicated.count}` + (r.duplicated.count > 0 ? ` (${r.duplicated.extraCopies} extra copies)` : ""),
    ...r.duplicated.examples.map((x) => `  ${x.id} (${x.copies} copies)`),
  ];
  if (r.backwards) {
    lines.push(`versions went backwards: ${r.backwards.count} entities (${r.backwards.events} times; ${r.backwards.entitiesChecked} entities checked)`);
    for (const b of r.backwards.examples) {
      lines.push(`  ${b.entity}: version ${b.before} (dest seq ${b.beforeSeq}) then ${b.after} (dest seq ${b.afterSeq})`);
    }
  } else {
    lines.push("versions went backwards: not checked (the link has no guard.versions)");
  }
  if (d.fromLink === 0 && s.forwardable > 0) {
    lines.push("", "note: the destination holds no message relayed over this link: everything counts as not yet relayed");
  }
  lines.push("", `result: ${r.agree ? "AGREE" : "DIFFER"} (${(r.elapsedMs / 1000).toFixed(1)} s)`);
  return lines.join("\n");
}
