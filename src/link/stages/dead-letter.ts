/**
 * The link's bad-message policy (`onBadMessage`): a message it cannot identify, or the destination will
 * not take (too large, refused), either halts the link when the publish cursor reaches it, or is turned
 * into a record on the dead-letter subject and published in its place, in order.
 */
import type { Logger } from "pino";
import type { LinkConfig } from "../../config/types.js";
import { ErrorCodes, RelayError } from "../../errors.js";
import type { Entry } from "../entry.js";
import { toDeadLetter, toOversizedDeadLetter, wireSize } from "../entry.js";
import type { DestinationFacts } from "./common.js";
import type { Tally } from "./tally.js";
import type { UncommittedVersions } from "./versions.js";

export interface DeadLetterNeeds {
  readonly link: LinkConfig;
  readonly logger: Logger;
  readonly tally: Pick<Tally, "recordError">;
  readonly versions: Pick<UncommittedVersions, "forget">;
}

export class DeadLetters {
  constructor(private readonly needs: DeadLetterNeeds) {}

  /**
   * A message without a usable identity (`reason`: what is missing or malformed); `entry` carries the
   * id it would have. It is ready at once: a halt, or a dead-letter record, where it stands in order.
   */
  badMessage(entry: Entry, reason: string): Entry {
    const { link, logger } = this.needs;
    const policy = link.badMessage;
    const err = new RelayError(ErrorCodes.BAD_MESSAGE, `link ${link.name}: message ${entry.identity.id} (source seq ${entry.seq}): ${reason}`);
    this.needs.tally.recordError(err);
    if (policy.action === "halt") {
      entry.haltWith = err;
      entry.state = "ready";
    } else {
      logger.warn({ id: entry.identity.id, seq: entry.seq, reason, deadLetter: policy.subject }, "bad message: dead-lettering");
      toDeadLetter(entry, policy.subject, link.name, reason);
    }
    return entry;
  }

  /** Larger than the destination takes (headers included): never published as is. */
  oversized(entry: Entry, dest: DestinationFacts): void {
    const size = wireSize(entry);
    const reason = `message is ${size} bytes with headers; the destination takes at most ${dest.maxMessageBytes}`;
    if (entry.deadLetterReason !== undefined) {
      // Already on its way to the dead-letter subject, and too large for it too: park the record only.
      toOversizedDeadLetter(entry, entry.subject, this.needs.link.name, `${entry.deadLetterReason}; ${reason}`);
      return;
    }
    const err = new RelayError(ErrorCodes.MESSAGE_TOO_LARGE, `link ${this.needs.link.name}: message ${entry.identity.id} (source seq ${entry.seq}): ${reason}`);
    this.needs.tally.recordError(err);
    this.reject(entry, err, reason, true);
  }

  /** The destination refused it as too large (its limit was lowered since it was read): as if known before. */
  refusedAsTooLarge(entry: Entry, err: RelayError): void {
    this.needs.tally.recordError(err);
    if (entry.deadLetterReason !== undefined) toOversizedDeadLetter(entry, entry.subject, this.needs.link.name, `${entry.deadLetterReason}; ${err.message}`);
    else this.reject(entry, err, err.message, true);
  }

  /** The bad-message policy for a message the destination will not take: halt, or park it on the dead-letter subject. */
  private reject(entry: Entry, err: RelayError, reason: string, oversized: boolean): void {
    const { link, logger } = this.needs;
    const policy = link.badMessage;
    this.needs.versions.forget(entry); // a refused version is never applied
    if (policy.action === "halt") {
      entry.haltWith = err; // the link halts when the publish cursor gets there
      entry.state = "ready";
      return;
    }
    logger.warn({ id: entry.identity.id, seq: entry.seq, code: err.code, reason, deadLetter: policy.subject }, "message refused by the destination: dead-lettering");
    if (oversized) toOversizedDeadLetter(entry, policy.subject, link.name, reason);
    else toDeadLetter(entry, policy.subject, link.name, reason);
    entry.firstAttemptMs = 0;
  }
}
