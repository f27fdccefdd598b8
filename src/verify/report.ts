/**
 * What `verify` found on one link; `--json` prints this object as it is.
 *
 * Every forwardable or bad source message the verify examined ends in exactly one class, by what
 * happened to it (not by what the config predicts): held by the destination (`delivered`), on the
 * dead-letter stream (`deadLettered`), dropped by the version guard for a newer version of its entity
 * (`superseded`), newer than the relayed horizon (`notYetRelayed`), bad and nowhere to be found
 * (`badNotConfirmed`), or `missing`. Messages the link does not forward at all are `notForwarded`.
 * `duplicated`, `outOfOrder` and `backwards` are read from the destination's copies.
 *
 * Unexpected (the sides differ, exit 1): missing, duplicated, outOfOrder, backwards.
 * Expected (what a correct relay leaves, exit 0): notYetRelayed, deadLettered, superseded,
 * notForwarded, badNotConfirmed. `differences` sums both up.
 */
export interface VerifyReport {
  readonly link: string;
  /** RFC 3339; absent when the whole of both streams was read. */
  readonly since?: string;
  readonly source: {
    readonly region: string;
    readonly stream: string;
    readonly filter?: string;
    /** First sequence still stored in the stream: when above 1, older messages were removed (retention, purge) and not examined. */
    readonly streamFirstSeq: number;
    readonly streamLastSeq: number;
    /** The stream's creation time (ms since the epoch): the incarnation in derived ids. Absent if the server did not say. */
    readonly incarnation?: number;
    /** Messages read (after filter and --since): forwardable + notForwarded + bad + badButPresent. */
    readonly examined: number;
    /** Examined messages the link forwards under the current config: what the destination should hold. */
    readonly forwardable: number;
    /** Examined messages route() does not forward (originated in or passed through the destination, ...). */
    readonly notForwarded: number;
    /**
     * Examined messages the current config calls bad (missing/malformed entity or version) and the
     * destination does not hold: dead-lettered, or halting the link.
     */
    readonly bad: number;
    /**
     * Examined messages the current config calls bad but the destination holds: relayed before the
     * config made them bad (e.g. before guard.versions was set). Present, so not bad and not a difference.
     */
    readonly badButPresent: number;
  };
  readonly destination: {
    readonly region: string;
    readonly stream: string;
    readonly streamFirstSeq: number;
    readonly streamLastSeq: number;
    /**
     * Messages read at/after --since (with --since, up to a minute earlier is read for presence only,
     * and with guard.versions everything earlier for entity versions only).
     */
    readonly examined: number;
    /** Examined messages whose Relay-Source names this link's source region and stream. */
    readonly fromLink: number;
    /**
     * Of those, copies `jetstream-relay repair` put back (`Relay-Repair`): present like any copy, but
     * appended after later messages, so left out of the order check. Absent when there are none.
     */
    readonly repaired?: number;
    /**
     * Highest source sequence named by a Relay-Source of this link: the relayed horizon (0 = none). Markers
     * whose Relay-Source-Time is earlier than the source's incarnation (a recreated source) are left out.
     */
    readonly lastRelayedSourceSeq: number;
    /**
     * Partitioned links: the horizon of each partition (by its partition number), which judges that
     * partition's source messages: a partition behind the others is not yet relayed, not missing.
     */
    readonly lastRelayedSourceSeqByPartition?: Readonly<Record<string, number>>;
    /** Distinct message ids held in memory (hashed). */
    readonly distinctIds: number;
    /** Messages whose id has the derived form before incarnations (`<region>:<stream>:<seq>`), counted under the current form. */
    readonly legacyIds: number;
  };
  /** Where dead-lettered messages were looked for (the link's onBadMessage). */
  readonly deadLetter: {
    /**
     * `read`: the stream capturing the dead-letter subject was read; `no-stream`: no stream in the
     * destination region captures it; `unreadable`: it could not be read (`detail` says why); `halt`:
     * the link halts at a bad message, nothing is dead-lettered.
     */
    readonly status: "read" | "no-stream" | "unreadable" | "halt";
    /** The dead-letter subject (absent under halt). */
    readonly subject?: string;
    /** The stream read (status `read`). */
    readonly stream?: string;
    /** Dead-letter records of this link found there (Relay-Dead-Letter-Link names it or one of its partitions). */
    readonly records: number;
    readonly detail?: string;
  };
  /** Examined source messages (forwardable or bad) whose id the destination holds. */
  readonly delivered: { readonly count: number };
  /** Expected. Forwardable source messages newer than the horizon, not accounted for otherwise: in flight. */
  readonly notYetRelayed: {
    readonly count: number;
    readonly firstSeq?: number;
    readonly examples: readonly string[];
  };
  /** Unexpected. Forwardable source messages at/below the horizon, not in the destination and not explained otherwise. */
  readonly missing: { readonly count: number; readonly examples: readonly SourceExample[] };
  /** Unexpected. */
  readonly duplicated: {
    /** Distinct ids stored more than once. */
    readonly count: number;
    /** Copies beyond the first, summed over those ids. */
    readonly extraCopies: number;
    readonly examples: readonly { readonly id: string; readonly copies: number }[];
  };
  /** Unexpected. First copies of this link stored after a copy of a later source message (see `scope`). */
  readonly outOfOrder: {
    /** `link`: compared over the whole link (unpartitioned); `partition`: within each partition only. */
    readonly scope: "link" | "partition";
    readonly count: number;
    readonly examples: readonly OutOfOrderExample[];
  };
  /** Unexpected. Absent when the link has no guard.versions. */
  readonly backwards?: {
    /** Entities whose version decreased at least once. */
    readonly count: number;
    /** Decreases seen in all (an entity can go backwards more than once). */
    readonly events: number;
    readonly entitiesChecked: number;
    readonly examples: readonly BackwardsExample[];
  };
  /** Expected. Source messages not in the destination whose id is on the dead-letter stream, recorded by this link. */
  readonly deadLettered: { readonly count: number; readonly examples: readonly SourceExample[] };
  /**
   * Expected. Absent when the link has no guard.versions. Forwardable source messages not in the
   * destination whose entity the destination already held at this version or newer when the relay came
   * to them (a delivered copy of an earlier source message, of an earlier source range, or of another
   * link into the same stream): the guard drops such a stale version.
   */
  readonly superseded?: { readonly count: number; readonly examples: readonly SupersededExample[] };
  /** Expected. Examined source messages route() does not forward, by reason. */
  readonly notForwarded: {
    readonly count: number;
    /** Originated in, or already passed through, the destination region. */
    readonly loop: number;
    /** Made more than maxHops hops. */
    readonly maxHops: number;
    /** A direct link from their origin into the same destination stream delivers them. */
    readonly directRoute: number;
    readonly examples: readonly SourceExample[];
  };
  /**
   * Expected, unconfirmed. Source messages the current config calls bad, at/below the horizon, neither
   * in the destination nor on a readable dead-letter stream (see `deadLetter.status`).
   */
  readonly badNotConfirmed: { readonly count: number; readonly examples: readonly SourceExample[] };
  /** The counts of each class, split by whether a correct relay leaves them. */
  readonly differences: {
    readonly unexpected: {
      readonly missing: number;
      readonly duplicated: number;
      readonly outOfOrder: number;
      /** Entities whose version went backwards (0 without guard.versions). */
      readonly versionsBackwards: number;
    };
    readonly expected: {
      readonly notYetRelayed: number;
      readonly deadLettered: number;
      readonly superseded: number;
      readonly notForwarded: number;
      readonly badNotConfirmed: number;
    };
  };
  /** True when every unexpected count is 0 (the exit code is 0). */
  readonly agree: boolean;
  readonly elapsedMs: number;
}

/** A source message, by id and source sequence. */
export interface SourceExample {
  readonly id: string;
  readonly sourceSeq: number;
}

export interface SupersededExample extends SourceExample {
  readonly entity: string;
  readonly version: number;
  /** The version of the entity the destination held by then (>= version). */
  readonly heldVersion: number;
}

export interface OutOfOrderExample extends SourceExample {
  /** Destination sequence of this copy. */
  readonly destSeq: number;
  /** The later source message whose copy was stored before it, and where. */
  readonly afterSourceSeq: number;
  readonly afterDestSeq: number;
  /** The partition both are in (scope `partition`). */
  readonly partition?: string;
}

export interface BackwardsExample {
  readonly entity: string;
  readonly before: number;
  readonly after: number;
  /** Destination sequences of the two messages. */
  readonly beforeSeq: number;
  readonly afterSeq: number;
}

const UNEXPECTED_LABELS = {
  missing: "missing",
  duplicated: "duplicated",
  outOfOrder: "out of order",
  versionsBackwards: "versions went backwards",
} as const;

const EXPECTED_LABELS = {
  notYetRelayed: "not yet relayed",
  deadLettered: "dead-lettered",
  superseded: "superseded",
  notForwarded: "not forwarded",
  badNotConfirmed: "bad, not confirmed",
} as const;

function n(value: number): string {
  return value.toLocaleString("en-US");
}

function listed<K extends string>(
  counts: Readonly<Record<K, number>>,
  labels: Readonly<Record<K, string>>,
): string {
  return (Object.keys(labels) as K[])
    .filter((k) => counts[k] > 0)
    .map((k) => `${n(counts[k])} ${labels[k]}`)
    .join(", ");
}

/** The result line: AGREE or DIFFER, the unexpected counts, then the expected ones. */
export function resultLine(r: VerifyReport): string {
  const unexpected = listed(r.differences.unexpected, UNEXPECTED_LABELS);
  const expected = listed(r.differences.expected, EXPECTED_LABELS);
  const parts = [
    ...(unexpected ? [unexpected] : []),
    ...(expected ? [`expected differences: ${expected}`] : []),
    `${(r.elapsedMs / 1000).toFixed(1)} s`,
  ];
  return `result: ${r.agree ? "AGREE" : "DIFFER"} (${parts.join("; ")})`;
}

function deadLetterLine(r: VerifyReport): string {
  const dl = r.deadLetter;
  const where = `${r.destination.region}`;
  switch (dl.status) {
    case "halt":
      return "dead letters: none (onBadMessage: halt; the link stops at a bad message)";
    case "read":
      return `dead letters: ${dl.subject} is captured by ${where}/${dl.stream}: ${n(dl.records)} records of this link`;
    case "no-stream":
      return `dead letters: ${dl.subject} is captured by no stream in ${where}: dead-lettering cannot be confirmed`;
    case "unreadable":
      return `dead letters: ${dl.subject} could not be read (${dl.detail ?? "unknown error"}): dead-lettering cannot be confirmed`;
  }
}

/** The human-readable report: a summary, then every class with its count and up to N examples. */
export function formatReport(r: VerifyReport): string {
  const s = r.source;
  const d = r.destination;
  const filter = s.filter ? ` (filter ${s.filter})` : "";
  const retention =
    s.streamFirstSeq > 1 ? "; earlier messages were removed by retention and not examined" : "";
  const seq = (x: { id: string; sourceSeq: number }) => `  ${x.id} (source seq ${x.sourceSeq})`;
  const lines = [
    `verify link ${r.link}: ${s.region}/${s.stream}${filter} -> ${d.region}/${d.stream}${r.since ? `, since ${r.since}` : ""}`,
    "",
    `source ${s.region}/${s.stream}: ${n(s.examined)} examined (stream first seq ${s.streamFirstSeq}, last seq ${s.streamLastSeq}${retention})`,
    `  ${n(s.forwardable)} forwarded by this link, ${n(s.notForwarded)} not forwarded (loop or redundant route), ` +
      `${n(s.bad)} bad under the current config` +
      (s.badButPresent > 0
        ? `, ${n(s.badButPresent)} bad under the current config but held by the destination (relayed before the config changed: present, not bad)`
        : ""),
    `destination ${d.region}/${d.stream}: ${n(d.examined)} examined, ${n(d.fromLink)} relayed over this link` +
      (d.repaired ? ` (${n(d.repaired)} put back by repair: present, not order-checked)` : "") +
      ", " +
      `last Relay-Source seq ${d.lastRelayedSourceSeq}` +
      (d.lastRelayedSourceSeqByPartition
        ? ` (per partition: ${
            Object.entries(d.lastRelayedSourceSeqByPartition)
              .map(([p, seq]) => `${p}: ${seq}`)
              .join(", ") || "none"
          })`
        : "") +
      (d.legacyIds > 0
        ? `, ${n(d.legacyIds)} with ids derived before incarnations (counted under their current form)`
        : ""),
    deadLetterLine(r),
    `delivered: ${n(r.delivered.count)} source messages are held by the destination`,
    "",
    "unexpected differences:",
    `missing: ${n(r.missing.count)}`,
    ...r.missing.examples.map(seq),
    `duplicated: ${n(r.duplicated.count)}` +
      (r.duplicated.count > 0 ? ` (${n(r.duplicated.extraCopies)} extra copies)` : ""),
    ...r.duplicated.examples.map((x) => `  ${x.id} (${x.copies} copies)`),
    `out of order (${r.outOfOrder.scope === "partition" ? "within each partition" : "over the whole link"}, by source seq): ${n(r.outOfOrder.count)}`,
    ...r.outOfOrder.examples.map(
      (x) =>
        `  ${x.id} (source seq ${x.sourceSeq}, dest seq ${x.destSeq}) stored after source seq ${x.afterSourceSeq} (dest seq ${x.afterDestSeq})` +
        (x.partition !== undefined ? ` in partition ${x.partition}` : ""),
    ),
  ];
  if (r.backwards) {
    lines.push(
      `versions went backwards: ${n(r.backwards.count)} entities (${n(r.backwards.events)} times; ${n(r.backwards.entitiesChecked)} entities checked)`,
    );
    for (const b of r.backwards.examples) {
      lines.push(
        `  ${b.entity}: version ${b.before} (dest seq ${b.beforeSeq}) then ${b.after} (dest seq ${b.afterSeq})`,
      );
    }
  } else {
    lines.push("versions went backwards: not checked (the link has no guard.versions)");
  }
  lines.push(
    "",
    "expected differences:",
    (d.lastRelayedSourceSeqByPartition
      ? `not yet relayed (newer than their partition's last Relay-Source seq): ${n(r.notYetRelayed.count)}`
      : `not yet relayed (newer than the destination's last Relay-Source seq ${d.lastRelayedSourceSeq}): ${n(r.notYetRelayed.count)}`) +
      (r.notYetRelayed.firstSeq !== undefined ? ` (from source seq ${r.notYetRelayed.firstSeq})` : ""),
    ...r.notYetRelayed.examples.map((id) => `  ${id}`),
    `dead-lettered (on the dead-letter stream, not in the destination): ${n(r.deadLettered.count)}`,
    ...r.deadLettered.examples.map(seq),
  );
  if (r.superseded) {
    lines.push(
      `superseded (the destination held the entity at this version or newer): ${n(r.superseded.count)}`,
    );
    for (const x of r.superseded.examples) {
      lines.push(
        `  ${x.id} (source seq ${x.sourceSeq}): ${x.entity} version ${x.version}, the destination held ${x.heldVersion}`,
      );
    }
  } else {
    lines.push("superseded: not checked (the link has no guard.versions)");
  }
  const nf = r.notForwarded;
  lines.push(
    `not forwarded (loop-filtered or redundant route): ${n(nf.count)}` +
      (nf.count > 0
        ? ` (${n(nf.loop)} loop, ${n(nf.maxHops)} over maxHops, ${n(nf.directRoute)} delivered by a direct link)`
        : ""),
    ...nf.examples.map(seq),
    `bad, not confirmed (bad under the current config, in neither the destination nor the dead-letter stream): ${n(r.badNotConfirmed.count)}`,
    ...r.badNotConfirmed.examples.map(seq),
  );
  if (d.fromLink === 0 && s.forwardable > 0) {
    lines.push(
      "",
      "note: the destination holds no message relayed over this link: everything counts as not yet relayed",
    );
  }
  lines.push("", resultLine(r));
  return lines.join("\n");
}
