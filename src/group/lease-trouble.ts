import type { Logger } from "pino";
import { ErrorCodes, toRelayError } from "../errors.js";
import type { LeaseState } from "./types.js";

/**
 * A streak of failed lease KV requests: the first failure is logged as a warning, the rest of the
 * streak at debug, and the first success after it says how many attempts failed.
 */
export class KvTrouble {
  private streak = 0;

  constructor(private readonly logger: Logger) {}

  failed(err: unknown, state: LeaseState): void {
    const relayErr = toRelayError(err, ErrorCodes.JETSTREAM_API);
    this.streak++;
    const level = this.streak === 1 ? "warn" : "debug";
    this.logger[level](
      { code: relayErr.code, err: relayErr.message, state, attempts: this.streak },
      "lease KV request failed",
    );
  }

  recovered(): void {
    if (this.streak === 0) return;
    this.logger.info({ attempts: this.streak }, "lease KV reachable again");
    this.streak = 0;
  }
}
