import { test } from "node:test";
import assert from "node:assert/strict";
import { ErrorCodes, RelayError } from "../../src/errors.js";
import type { Entry } from "../../src/link/entry.js";
import { SentVersions } from "../../src/link/stages/versions.js";

/** Only what SentVersions reads of an entry. */
const entry = (entity: string | undefined, version: number | undefined): Entry =>
  ({
    identity: { id: `${entity}-${version}`, origin: "a", path: ["a"], entity, version },
    deadLetterReason: undefined,
  }) as unknown as Entry;

const timeout = new RelayError(ErrorCodes.PUBLISH_TIMEOUT, "no PubAck (test)");
const full = new RelayError(ErrorCodes.DESTINATION_FULL, "maximum messages exceeded (test)");

test("a stored version counts while its entity is held, also after that message left; the record goes with the last one", () => {
  const sent = new SentVersions();
  const v1 = entry("e", 1);
  const v2 = entry("e", 2);
  sent.hold(v1);
  sent.hold(v2);
  sent.sent(v1);
  sent.sent(v2);
  assert.equal(sent.highest("e"), 2, "v2 unanswered: perhaps stored");
  sent.answered(v2, null);
  sent.stored(v2);
  sent.release(v2); // committed and acked
  assert.equal(sent.highest("e"), 2, "stored: kept while v1 is held");
  sent.release(v1);
  assert.equal(sent.highest("e"), undefined);
  assert.equal(sent.size, 0, "nothing kept for an entity the window no longer holds");
});

test("a refused publish stored nothing; a timed-out one perhaps did, until it is stored or leaves", () => {
  const sent = new SentVersions();
  const v1 = entry("e", 1);
  const v2 = entry("e", 2);
  const v3 = entry("e", 3);
  for (const e of [v1, v2, v3]) {
    sent.hold(e);
    sent.sent(e);
  }
  sent.answered(v3, full);
  assert.equal(sent.highest("e"), 2, "v3 refused: not in the destination");
  sent.answered(v2, timeout);
  sent.sent(v2); // retried
  sent.answered(v2, full); // the retry refused: the first attempt may still have been stored
  assert.equal(sent.highest("e"), 2, "v2 in doubt");
  sent.release(v2);
  assert.equal(sent.highest("e"), 1, "v1 still unanswered");
  sent.answered(v1, full);
  assert.equal(sent.highest("e"), undefined);
});

test("messages without an entity or version are not tracked", () => {
  const sent = new SentVersions();
  const plain = entry(undefined, undefined);
  sent.hold(plain);
  sent.sent(plain);
  sent.stored(plain);
  sent.release(plain);
  assert.equal(sent.size, 0);
});
