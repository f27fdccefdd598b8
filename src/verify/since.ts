import { DurationError, parseDuration } from "../config/durations.js";
import { ErrorCodes, RelayError } from "../errors.js";

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * `--since`: an RFC 3339 time (`2026-11-30T08:00:00Z`, `2026-11-30T09:00:00.5+01:00`), or a duration
 * back from `now` in the config file's syntax (`90s`, `15m`, `1h`, `1h30m`, `2d`). Sub-millisecond
 * digits are dropped. Throws USAGE for anything else.
 */
export function parseSince(text: string, now: number = Date.now()): Date {
  const value = text.trim();
  if (RFC3339.test(value)) {
    const ms = Date.parse(value.toUpperCase().replace(/(\.\d{3})\d+/, "$1").replace(" ", "T"));
    if (!Number.isNaN(ms)) return new Date(ms);
  } else {
    try {
      return new Date(now - parseDuration(value));
    } catch (err) {
      if (!(err instanceof DurationError)) throw err;
    }
  }
  throw new RelayError(
    ErrorCodes.USAGE,
    `verify: --since ${JSON.stringify(text)} is neither an RFC 3339 time (e.g. 2026-11-30T08:00:00Z) nor a duration (e.g. 1h, 30m)`,
  );
}
