import { test } from "node:test";
import assert from "node:assert/strict";
import type { Entry } from "../../src/link/entry.js";
import { SentVersions } from "../../src/link/stages/versions.js";

/** Only what SentVersions reads of an entry. */
const entry = (entity: string | undefined, version: number | undefined): Entry =>
  ({
    identity: { id: `${entity}-${version}`, origin: "a", path: ["a"], entity, version },
    deadLetterReason: undefined,
    state: "ready",
    unanswered: 0,
  }) as unknown as Entry;

test("a stored version counts while its entity is held, also after that message left; the record goes with the last one", () => {
  const sent = new SentVersions();
  const v1 = entry("e", 1);
  const v2 = entry("e", 2);
  sent.hold(v1);
  sent.hold(v2);
  sent.sent(v1);
  sent.sent(v2);
  assert.equal(sent.highestUnanswered("e"), 2);
  assert.equal(sent.highestStored("e"), undefined);
  sent.answered(v2);
  sent.stored(v2);
  assert.equal(
    sent.highestUnanswered("e"),
    2,
    "v1 still on its way: an upper bound until every answer is in",
  );
  sent.release(v2); // committed and acked
  assert.equal(sent.highestStored("e"), 2, "stored: kept while v1 is held");
  sent.answered(v1); // failed
  assert.equal(sent.highestUnanswered("e"), undefined);
  sent.release(v1);
  assert.equal(sent.highestStored("e"), undefined);
  assert.equal(sent.size, 0, "nothing kept for an entity the window no longer holds");
});

test("a message with several attempts out is unanswered until each is answered; a failed one stored nothing", () => {
  const sent = new SentVersions();
  const v3 = entry("e", 3);
  sent.hold(v3);
  sent.sent(v3);
  sent.sent(v3); // retried while the first attempt is still out (rolled back behind an earlier failure)
  sent.answered(v3); // the first: a timeout
  assert.equal(sent.highestUnanswered("e"), 3);
  sent.answered(v3); // the second: refused
  assert.equal(sent.highestUnanswered("e"), undefined);
  assert.equal(sent.highestStored("e"), undefined);
});

test("messages without an entity or version are not tracked", () => {
  const sent = new SentVersions();
  const plain = entry(undefined, undefined);
  sent.hold(plain);
  sent.sent(plain);
  sent.answered(plain);
  sent.stored(plain);
  sent.release(plain);
  assert.equal(sent.size, 0);
});
