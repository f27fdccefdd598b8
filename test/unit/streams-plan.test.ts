import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseConfigText } from "../../src/config/load.js";
import type { LinkConfig, RelayConfig } from "../../src/config/types.js";
import type { StreamFact } from "../../src/nats/stream-facts.js";
import { updateConfig } from "../../src/streams/apply.js";
import {
  addSubjects,
  partialOverlap,
  planRegionItems,
  serverAtLeast,
  statusOf,
} from "../../src/streams/diff.js";
import { formatPlan } from "../../src/streams/format.js";
import { regionNeeds } from "../../src/streams/needs.js";
import type { ExistingFact, ExistingStream, PlanItem, RegionFacts } from "../../src/streams/types.js";

function config(linksYaml: string, extra = ""): RelayConfig {
  const yaml = `regions:\n  a: { servers: ["nats://127.0.0.1:1"] }\n  b: { servers: ["nats://127.0.0.1:2"] }\n  c: { servers: ["nats://127.0.0.1:3"] }\nlinks:\n${linksYaml}${extra}`;
  return parseConfigText(yaml, "test.yaml", {});
}

function source(subjects: string[]): StreamFact {
  return {
    kind: "found",
    stream: {
      name: "S",
      subjects,
      retention: "limits",
      duplicateWindowMs: 120_000,
      maxAgeMs: 0,
      messages: 0,
      sourced: false,
    },
  };
}

function stream(s: Partial<ExistingStream> & { name: string; subjects: string[] }): ExistingFact {
  return {
    kind: "found",
    stream: {
      retention: "limits",
      storage: "file",
      duplicateWindowMs: 120_000,
      maxAgeMs: 0,
      replicas: 1,
      messages: 0,
      mirror: false,
      ...s,
    },
  };
}

const MISSING: ExistingFact = { kind: "missing" };

/** The plan of region b with the given streams (the bucket and RELAY_DLQ exist unless given). */
function plan(
  c: RelayConfig,
  existing: Record<string, ExistingFact>,
  opts: {
    force?: boolean;
    version?: string;
    owners?: Record<string, string[]>;
    sourceOf?: (l: LinkConfig) => StreamFact;
  } = {},
): PlanItem[] {
  const needs = regionNeeds(c, "b", opts.sourceOf ?? (() => source(["S.>"])));
  const facts: RegionFacts = {
    needs,
    existing: new Map(
      Object.entries({
        KV_relay_leases: stream({ name: "KV_relay_leases", subjects: ["$KV.relay_leases.>"] }),
        RELAY_DLQ: stream({ name: "RELAY_DLQ", subjects: ["relay.dlq.>"] }),
        ...existing,
      }),
    ),
    owners: new Map(
      Object.entries({ "relay.dlq.a-to-b": ["RELAY_DLQ"], "relay.dlq.a2": ["RELAY_DLQ"], ...opts.owners }),
    ),
    server: { version: opts.version ?? "2.9.10", clustered: false },
    sources: [],
  };
  return planRegionItems("b", facts, { force: opts.force === true });
}

function item(items: readonly PlanItem[], kind: PlanItem["kind"], name?: string): PlanItem {
  const found = items.find((i) => i.kind === kind && (name === undefined || i.name === name));
  assert.ok(found, `a ${kind} item ${name ?? ""} in ${JSON.stringify(items, null, 2)}`);
  return found;
}

describe("needs", () => {
  test("a destination to create says where each of its links starts (startAt), in the plan and its text", () => {
    const c = config(`
  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D } }
  - { name: c-to-b, from: { region: c, stream: S }, to: { region: b, stream: D }, startAt: { seq: 42 } }
`);
    const created = item(plan(c, { D: MISSING }), "destination", "D");
    assert.equal(created.status, "create");
    assert.deepEqual(created.notes, [
      "link a-to-b starts at earliest (the first message its source holds), unless its source consumer exists already",
      "link c-to-b starts at seq 42, unless its source consumer exists already",
    ]);
    const text = formatPlan({ regions: [{ region: "b", server: "127.0.0.1:2", serverVersion: "2.9.10", clustered: false, items: [created] }], force: false }, { config: "relay.yaml" });
    assert.match(text, /does not exist\n\s+link a-to-b starts at earliest/);
    const existing = item(plan(c, { D: stream({ name: "D", subjects: ["S.>"] }) }), "destination", "D");
    assert.equal(existing.notes, undefined, "an existing destination may hold the links' records: no start said");
  });

  test("links into one stream merge their transformed subjects; the window is the largest replay horizon", () => {
    const c = config(`
  - { name: a-to-b, from: { region: a, stream: S, filter: "orders.>" }, to: { region: b, stream: D, subject: { stripPrefix: "orders.", addPrefix: "a." } } }
  - { name: a2, from: { region: a, stream: S, filter: "orders.eu.>" }, to: { region: b, stream: D, subject: { stripPrefix: "orders.", addPrefix: "a." } }, ackWait: 2m }
  - { name: c-to-b, from: { region: c, stream: S }, to: { region: b, stream: D }, onBadMessage: halt }
  - { name: b-to-a, from: { region: b, stream: D }, to: { region: a, stream: S } }
`);
    const needs = regionNeeds(c, "b", () => source(["S.>"]));
    assert.equal(needs.destinations.length, 1);
    const d = needs.destinations[0];
    assert.deepEqual(d?.links, ["a-to-b", "a2", "c-to-b"]);
    // a.eu.> is inside a.>: one stream cannot list both.
    assert.deepEqual(d?.subjects, ["a.>", "S.>"]);
    assert.equal(d?.duplicateWindowMs, 240_000);
    assert.equal(d?.windowLink, "a2");
    assert.deepEqual(d?.readBy, ["b-to-a"]);
    assert.deepEqual(needs.deadLetters, [
      { link: "a-to-b", subject: "relay.dlq.a-to-b" },
      { link: "a2", subject: "relay.dlq.a2" },
    ]);
    assert.equal(needs.bucket, "relay_leases");
    assert.equal(
      regionNeeds(c, "c", () => source(["S.>"])).bucket,
      undefined,
      "no link ends in c: no group there",
    );
  });

  test("a link without a filter whose source is missing: its subjects are a problem, not a guess", () => {
    const c = config(`  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D } }\n`);
    const needs = regionNeeds(c, "b", () => ({ kind: "missing" }));
    assert.deepEqual(needs.destinations[0]?.subjects, []);
    assert.match(
      needs.destinations[0]?.problems[0] ?? "",
      /links\[a-to-b\]: .* its source a\/S does not exist and it has no from\.filter/,
    );
  });
});

describe("plan rules", () => {
  const one = config(
    `  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D }, ackWait: 90s }\n`,
  );

  test("a missing destination is created: its subjects, limits, file, the replay horizon as window", () => {
    const d = item(plan(one, { D: MISSING }), "destination");
    assert.equal(d.status, "create");
    assert.deepEqual(d.create, {
      subjects: ["S.>"],
      retention: "limits",
      storage: "file",
      duplicateWindowMs: 180_000,
    });
  });

  test("a missing destination whose subject another stream holds is blocked, naming that stream", () => {
    const d = item(plan(one, { D: MISSING }, { owners: { "S.>": ["OTHER"] } }), "destination");
    assert.equal(d.status, "blocked");
    assert.equal(d.create, undefined);
    assert.match(d.changes[0]?.reason ?? "", /S\.> overlaps stream OTHER in region b: the server refuses/);
  });

  test("an existing destination: missing subject added, window raised; nothing lowered", () => {
    const d = item(
      plan(one, { D: stream({ name: "D", subjects: ["x.>"], duplicateWindowMs: 10_000 }) }),
      "destination",
    );
    assert.equal(d.status, "update");
    assert.deepEqual(d.update?.subjects, ["x.>", "S.>"]);
    assert.equal(d.update?.duplicateWindowMs, 180_000);
    // x.> is not needed: kept, removed only with --force; optional, so the stream is not "refused".
    const narrow = d.changes.find((c) => c.rule === "force");
    assert.equal(narrow?.required, false);
    assert.deepEqual(d.update?.forcedSubjects, ["S.>"]);
    const big = item(
      plan(one, { D: stream({ name: "D", subjects: ["S.>"], duplicateWindowMs: 3_600_000 }) }),
      "destination",
    );
    assert.equal(big.status, "ok", "a larger window stays");
    assert.equal(big.changes.length, 0);
  });

  test("--force narrows subjects only when no link reads the stream", () => {
    const wide = { D: stream({ name: "D", subjects: ["S.>", "x.>"], duplicateWindowMs: 180_000 }) };
    assert.equal(item(plan(one, wide), "destination").status, "ok");
    const forced = item(plan(one, wide, { force: true }), "destination");
    assert.equal(forced.status, "update");
    assert.deepEqual(updateConfig(forced, true).config, { subjects: ["S.>"] });
    const mesh = config(
      `  - { name: a-to-b, from: { region: a, stream: S }, to: { region: b, stream: D } }\n  - { name: b-to-a, from: { region: b, stream: D }, to: { region: a, stream: S } }\n`,
    );
    const kept = item(
      plan(mesh, { D: stream({ name: "D", subjects: ["S.>", "local.>"] }) }, { force: true }),
      "destination",
    );
    assert.equal(kept.status, "ok");
    assert.equal(kept.changes.length, 0);
  });

  test("interest retention: blocked on nats-server 2.9; refused without --force on 2.10+", () => {
    const interest = {
      D: stream({ name: "D", subjects: ["S.>"], retention: "interest", duplicateWindowMs: 180_000 }),
    };
    const old = item(plan(one, interest), "destination");
    assert.equal(old.status, "blocked");
    assert.match(
      old.changes[0]?.reason ?? "",
      /nats-server 2\.9\.10 cannot change a stream's retention in place/,
    );
    assert.equal(old.update, undefined);
    const refused = item(plan(one, interest, { version: "2.10.22" }), "destination");
    assert.equal(refused.status, "refused");
    assert.equal(
      item(plan(one, interest, { version: "2.10.22", force: true }), "destination").status,
      "update",
    );
  });

  test("a max age below the horizon: max age and window change only with --force", () => {
    const aged = { D: stream({ name: "D", subjects: ["S.>"], duplicateWindowMs: 60_000, maxAgeMs: 60_000 }) };
    const d = item(plan(one, aged), "destination");
    assert.equal(d.status, "refused");
    assert.deepEqual(
      d.changes.map((c) => [c.field, c.rule]),
      [
        ["max age", "force"],
        ["duplicate window", "force"],
      ],
    );
    assert.deepEqual(updateConfig(d, false).config, {});
    const forced = updateConfig(d, true).config;
    assert.equal(Number(forced.max_age) / 1e6, 180_000);
    assert.equal(Number(forced.duplicate_window) / 1e6, 180_000);
  });

  test("a mirror cannot be a destination", () => {
    const d = item(plan(one, { D: stream({ name: "D", subjects: [], mirror: true }) }), "destination");
    assert.equal(d.status, "blocked");
    assert.match(d.changes[0]?.reason ?? "", /is a mirror/);
  });

  test("dead-letter subjects: captured (now or by a planned destination) is ok; else RELAY_DLQ is created or extended", () => {
    const c = config(
      `  - { name: x, from: { region: a, stream: S }, to: { region: b, stream: D }, onBadMessage: { deadLetter: dead.x } }\n`,
    );
    const none = { D: MISSING, RELAY_DLQ: MISSING };
    const created = item(plan(c, none), "dead-letter");
    assert.equal(created.status, "create");
    assert.deepEqual(created.create?.subjects, ["dead.x"]);
    const extended = item(
      plan(c, { D: MISSING, RELAY_DLQ: stream({ name: "RELAY_DLQ", subjects: ["relay.dlq.>"] }) }),
      "dead-letter",
    );
    assert.equal(extended.status, "update");
    assert.deepEqual(extended.update?.subjects, ["relay.dlq.>", "dead.x"]);
    assert.equal(item(plan(c, none, { owners: { "dead.x": ["PARKED"] } }), "dead-letter").status, "ok");
    const wide = item(plan(c, none, { sourceOf: () => source([">"]) }), "dead-letter");
    assert.equal(wide.status, "ok", "the planned destination D (subjects >) captures it");
    assert.match(wide.detail, /dead\.x by D/);
    // A destination that cannot be created captures nothing.
    const blocked = plan(c, none, { sourceOf: () => source([">"]), owners: { ">": ["OTHER"] } });
    assert.equal(item(blocked, "destination").status, "blocked");
    assert.equal(item(blocked, "dead-letter").status, "create");
    // A destination subject that captures a dead-letter subject is never narrowed away.
    const parked = { D: stream({ name: "D", subjects: ["S.>", "dead.>"] }), RELAY_DLQ: MISSING };
    const kept = plan(c, parked, { force: true, owners: { "dead.x": ["D"] } });
    assert.equal(item(kept, "destination").status, "ok");
    assert.equal(item(kept, "dead-letter").status, "ok");
  });

  test("the group bucket: created when missing, an existing one left as it is", () => {
    assert.equal(item(plan(one, { D: MISSING, KV_relay_leases: MISSING }), "lease bucket").status, "create");
    assert.equal(item(plan(one, { D: MISSING }), "lease bucket").status, "ok");
  });
});

describe("helpers", () => {
  test("addSubjects replaces what an added pattern contains; partialOverlap finds what the server refuses", () => {
    assert.deepEqual(addSubjects(["a.b.>", "c"], ["a.>"]), ["c", "a.>"]);
    assert.deepEqual(partialOverlap(["a.*.x", "a.b.*"]), { a: "a.*.x", b: "a.b.*" });
    assert.equal(partialOverlap(["a.>", "b.>"]), undefined);
  });

  test("serverAtLeast and statusOf", () => {
    assert.ok(
      serverAtLeast("2.10.0", 2, 10) && serverAtLeast("v2.11.1", 2, 10) && serverAtLeast("3.0.0", 2, 10),
    );
    assert.ok(!serverAtLeast("2.9.10", 2, 10) && !serverAtLeast(undefined, 2, 10));
    const force = { field: "retention", to: "limits", rule: "force", required: true } as const;
    assert.equal(statusOf([force], false), "refused");
    assert.equal(statusOf([force], true), "update");
    assert.equal(statusOf([{ ...force, rule: "impossible" }], true), "blocked");
    assert.equal(statusOf([{ ...force, required: false }], false), "ok");
  });
});
