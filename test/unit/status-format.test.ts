import { test } from "node:test";
import assert from "node:assert/strict";
import { formatAudits, formatErrors, formatGroup, formatTable } from "../../src/cli/status-command.js";
import type { RelayStatus } from "../../src/relay/relay.js";

const link = (name: string, self: boolean, owner: string, leaseRevision?: number) => ({
  name,
  from: "a/S",
  to: "b/S",
  state: self ? ("live" as const) : ("standby" as const),
  stateSince: "2026-12-01T00:00:00.000Z",
  guard: "none" as const,
  inFlight: 0,
  corrections: {},
  stateHistory: [],
  gaps: [],
  ownership: { owner, self, preferred: self, key: `a.S.${name}`, ...(leaseRevision !== undefined ? { leaseRevision, epoch: leaseRevision, since: "2026-12-01T00:00:01.000Z" } : {}) },
});

const status: RelayStatus = {
  region: "b",
  startedAt: "2026-12-01T00:00:00.000Z",
  links: [{ ...link("l1", true, "m1", 42), window: { messages: 8192, limit: "messages cap" as const, cap: 8192, rttMs: 201.4, ratePerSec: 15_000 } }, link("l2", false, "m2")],
  group: {
    bucket: "relay_leases",
    member: "m1",
    name: "host-1",
    members: [
      { id: "m1", name: "host-1", startedAt: "2026-12-01T00:00:00.000Z", placed: ["l1"] },
      { id: "m2", name: "host-2", startedAt: "2026-12-01T00:00:00.000Z", placed: ["l2"] },
    ],
  },
};

test("status shows each link's owner and lease revision, and the group's members with the links placed on each", () => {
  const table = formatTable(status).split("\n");
  assert.match(table[0] ?? "", /OWNER\s+LEASE REV\s+RELAYED/);
  assert.match(table[1] ?? "", /^l1 .*this relay\s+42/);
  // The self-sizing window, what holds it, and the round trip to the source.
  assert.match(table[0] ?? "", /IN FLIGHT\s+WINDOW\s+RTT/);
  assert.match(table[1] ?? "", /\s8192 messages cap\s+201ms\s/);
  assert.match(table[2] ?? "", /\s0\s+-\s+-\s/);
  assert.match(table[2] ?? "", /^l2 .*m2\s+-/);
  const group = formatGroup(status).split("\n");
  assert.equal(group[0], "group bucket relay_leases: 2 members");
  assert.match(group[2] ?? "", /^m1 \(this relay\)\s+host-1\s+\S+\s+l1$/);
  assert.match(group[3] ?? "", /^m2\s+host-2\s+\S+\s+l2$/);
});

test("status shows the lease revision of a relay before the rename, whose /status names it only `epoch`", () => {
  const { leaseRevision: _, ...older } = status.links[0]!.ownership!;
  const table = formatTable({ ...status, links: [{ ...status.links[0]!, ownership: older }] }).split("\n");
  assert.match(table[1] ?? "", /^l1 .*this relay\s+42\s/);
});

test("status warns when the group's members disagree on group.lease/group.renew, naming each one's settings", () => {
  const group = status.group!;
  const members = [
    { ...group.members[0]!, leaseMs: 3_000, renewMs: 500 },
    { ...group.members[1]!, leaseMs: 20_000, renewMs: 1_000, settingsDiffer: true as const },
  ];
  const lines = formatGroup({ ...status, group: { ...group, members } }).split("\n");
  assert.equal(lines.length, 5);
  assert.match(lines[4] ?? "", /^warning: members disagree on group\.lease\/group\.renew: m2 \(lease 20000 ms, renew 1000 ms\); this relay: lease 3000 ms, renew 500 ms\./);
  assert.equal(formatGroup(status).split("\n").length, 4, "no warning when they agree");
});

test("status shows relayed and dead-lettered counts, and the last error in full, wrapped, below the table", () => {
  const message =
    "link a-to-b: message m-17 (source seq 17): header Entity-Version is missing; the link's guard.versions needs an entity and a version on every message";
  const s: RelayStatus = {
    region: "b",
    startedAt: "2026-12-01T00:00:00.000Z",
    links: [{ ...link("l1", true, "m1", 1), messages: { relayed: 1_000, dead_lettered: 5 }, lastError: { code: "BAD_MESSAGE", message, at: "2026-12-01T00:00:02.000Z" } }],
  };
  const [header, row] = formatTable(s).split("\n");
  const col = (name: string) => (row ?? "").slice((header ?? "").indexOf(name)).split(/\s{2,}/)[0];
  assert.equal(col("RELAYED"), "1000");
  assert.equal(col("DEAD-LETTERED"), "5");
  assert.equal(col("LAST ERROR"), "BAD_MESSAGE at 2026-12-01T00:00:02.000Z");
  const errors = formatErrors(s, 60).split("\n");
  assert.equal(errors[0], "last errors:");
  assert.equal(errors[1], "l1: BAD_MESSAGE at 2026-12-01T00:00:02.000Z");
  assert.ok(errors.slice(2).every((l) => l.startsWith("  ") && l.length <= 60), errors.join("\n"));
  assert.equal(errors.slice(2).map((l) => l.trim()).join(" "), message, "nothing cut");
  assert.equal(formatErrors({ ...s, links: [link("l1", true, "m1")] }), "");
});

test("status lists each audited link's position, totals and last finding", () => {
  const audited = {
    links: [
      {
        name: "a",
        audit: {
          judgedSeq: 120,
          judgedAt: "T1",
          lagSeconds: 3.2,
          coverage: 1,
          nextSweepAt: "T2",
          totals: { checked: 120, missing: 2, extra: 0, reordered: 0, backwards: 0, repaired: 0 },
          lastFinding: { at: "T0", kind: "missing", count: 2, sourceSeqs: [7, 9], ids: ["m-6", "m-8"], pass: "range" },
        },
      },
      { name: "b" },
    ],
  } as unknown as RelayStatus;
  assert.equal(
    formatAudits(audited),
    "audits:\n  a: judged to source seq 120 (settled T1), lag 3s, coverage 1, checked 120, missing 2, extra 0, reordered 0, backwards 0, repaired 0\n      last finding (range pass, T0): 2 missing, source seqs 7, 9",
  );
  assert.equal(formatAudits({ links: [{ name: "b" }] } as unknown as RelayStatus), "");
});
