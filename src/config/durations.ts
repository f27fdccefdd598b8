/**
 * Durations in the config file are strings with a unit: "250ms", "30s", "5m", "1h", "1d", or a
 * combination written largest unit first ("1h30m", "2m30s"). A bare number is refused on purpose:
 * `ackWait: 30` could mean seconds or milliseconds, so the operator has to say which.
 */

const UNIT_MS = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
} as const;

type Unit = keyof typeof UNIT_MS;

/** Units from largest to smallest; a combined duration must use them in this order, each once. */
const UNIT_ORDER: readonly Unit[] = ["d", "h", "m", "s", "ms"];

const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

/** Thrown by `parseDuration`; its message is a phrase meant to follow `<path>: `. */
export class DurationError extends Error {
  override readonly name = "DurationError";
}

/** The largest duration accepted: 365 days. */
export const MAX_DURATION_MS = 365 * UNIT_MS.d;

const EXAMPLES = '"250ms", "30s", "5m", "1h", "1d" or "1h30m"';

/**
 * Parses a duration string into whole milliseconds. Throws `DurationError` for anything else,
 * including numbers: `parseDuration(30)` fails with `must be a duration with a unit, e.g. "30s" (got 30)`.
 */
export function parseDuration(input: unknown): number {
  if (typeof input === "number") {
    const hint = Number.isFinite(input) && input >= 0 ? `"${input}s"` : '"30s"';
    throw new DurationError(`must be a duration with a unit, e.g. ${hint} (got ${String(input)})`);
  }
  if (typeof input !== "string") {
    throw new DurationError(`must be a duration string such as ${EXAMPLES}`);
  }
  const text = input.trim();
  const shown = JSON.stringify(input.length > 40 ? `${input.slice(0, 40)}…` : input);
  if (text === "") throw new DurationError(`must be a duration such as ${EXAMPLES} (got an empty string)`);
  if (/^\d+(\.\d+)?$/.test(text)) {
    throw new DurationError(`must be a duration with a unit, e.g. "${text}s" (got ${shown})`);
  }

  let total = 0;
  let pos = 0;
  let lastUnitRank = -1;
  while (pos < text.length) {
    PART.lastIndex = pos;
    const m = PART.exec(text);
    if (m === null) {
      throw new DurationError(
        `invalid duration ${shown}: use a number and a unit (ms, s, m, h, d), e.g. ${EXAMPLES}`,
      );
    }
    const value = Number(m[1]);
    const unit = m[2] as Unit;
    const rank = UNIT_ORDER.indexOf(unit);
    if (rank <= lastUnitRank) {
      throw new DurationError(
        `invalid duration ${shown}: write each unit once, largest first (e.g. "1h30m")`,
      );
    }
    lastUnitRank = rank;
    total += value * UNIT_MS[unit];
    pos = PART.lastIndex;
  }
  // Decimals such as "1.5s" are fine as long as they come out as whole milliseconds.
  const rounded = Math.round(total);
  if (Math.abs(rounded - total) > 1e-6) {
    throw new DurationError(`invalid duration ${shown}: must be a whole number of milliseconds`);
  }
  if (rounded > MAX_DURATION_MS) {
    throw new DurationError(`duration ${shown} is too long (at most 365d)`);
  }
  return rounded;
}

/**
 * Formats milliseconds the way the config file writes them: 1500 → "1s500ms", 5400000 → "1h30m",
 * 0 → "0s". Round-trips through `parseDuration`.
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return `${ms}ms`;
  let rest = Math.round(ms);
  if (rest === 0) return "0s";
  let out = "";
  for (const unit of UNIT_ORDER) {
    const size = UNIT_MS[unit];
    const n = Math.floor(rest / size);
    if (n > 0) {
      out += `${n}${unit}`;
      rest -= n * size;
    }
  }
  return out;
}
