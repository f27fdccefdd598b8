import assert from "node:assert/strict";
import { test } from "node:test";
import { formatReport, resultLine } from "../../src/verify/report.js";
import type { VerifyReport } from "../../src/verify/report.js";

type Differences = VerifyReport["differences"];

function report(
  over: {
    streamFirstSeq?: number;
    unexpected?: Partial<Differences["unexpected"]>;
    expected?: Partial<Differences["expected"]>;
  } = {},
): VerifyReport {
  const unexpected = { missing: 0, duplicated: 0, outOfOrder: 0, versionsBackwards: 0, ...over.unexpected };
  const expected = {
    notYetRelayed: 0,
    deadLettered: 0,
    superseded: 0,
    notForwarded: 0,
    badNotConfirmed: 0,
    ...over.expected,
  };
  return {
    link: "a-to-b",
    source: {
      region: "a",
      stream: "SRC",
      streamFirstSeq: over.streamFirstSeq ?? 1,
      streamLastSeq: 500,
      examined: 500,
      forwardable: 500,
      notForwarded: 0,
      bad: 0,
      badButPresent: 0,
    },
    destination: {
      region: "b",
      stream: "DST",
      streamFirstSeq: 1,
      streamLastSeq: 500,
      examined: 500,
      fromLink: 500,
      lastRelayedSourceSeq: 500,
      distinctIds: 500,
      legacyIds: 0,
    },
    deadLetter: {
      status: "read",
      subject: "relay.dlq.a-to-b",
      stream: "DLQ",
      records: expected.deadLettered,
    },
    delivered: { count: 500 },
    notYetRelayed: { count: expected.notYetRelayed, examples: [] },
    missing: { count: unexpected.missing, examples: [] },
    duplicated: { count: unexpected.duplicated, extraCopies: unexpected.duplicated, examples: [] },
    outOfOrder: { scope: "link", count: unexpected.outOfOrder, examples: [] },
    deadLettered: { count: expected.deadLettered, examples: [] },
    notForwarded: {
      count: expected.notForwarded,
      loop: expected.notForwarded,
      maxHops: 0,
      directRoute: 0,
      examples: [],
    },
    badNotConfirmed: { count: expected.badNotConfirmed, examples: [] },
    differences: { unexpected, expected },
    agree: Object.values(unexpected).every((n) => n === 0),
    elapsedMs: 1_234,
  };
}

test("verify's summary speaks of retention only when the source's first seq is above 1", () => {
  const whole = formatReport(report());
  assert.match(whole, /^source a\/SRC: 500 examined \(stream first seq 1, last seq 500\)$/m);
  assert.doesNotMatch(whole, /retention/);
  const trimmed = formatReport(report({ streamFirstSeq: 101 }));
  assert.match(
    trimmed,
    /^source a\/SRC: 500 examined \(stream first seq 101, last seq 500; earlier messages were removed by retention and not examined\)$/m,
  );
});

test("verify's result line: AGREE with the expected differences named, DIFFER with the unexpected ones first", () => {
  assert.equal(resultLine(report()), "result: AGREE (1.2 s)");
  assert.equal(
    resultLine(report({ expected: { deadLettered: 5, superseded: 1_050 } })),
    "result: AGREE (expected differences: 5 dead-lettered, 1,050 superseded; 1.2 s)",
  );
  assert.equal(
    resultLine(report({ unexpected: { missing: 1, outOfOrder: 2 }, expected: { notForwarded: 3 } })),
    "result: DIFFER (1 missing, 2 out of order; expected differences: 3 not forwarded; 1.2 s)",
  );
  const text = formatReport(report({ expected: { deadLettered: 5 } }));
  assert.match(text, /^dead letters: relay\.dlq\.a-to-b is captured by b\/DLQ: 5 records of this link$/m);
  assert.match(text, /^superseded: not checked \(the link has no guard\.versions\)$/m);
  assert.match(text, /\nresult: AGREE \(expected differences: 5 dead-lettered; 1\.2 s\)$/);
});
