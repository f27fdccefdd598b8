import { createRequire } from "node:module";
import { pino } from "pino";
import type { Logger, LevelWithSilent } from "pino";

/** Paths redacted wherever they appear in a logged object, whatever the value. */
const REDACT_PATHS = [
  "password",
  "pass",
  "token",
  "*.password",
  "*.pass",
  "*.token",
  "*.*.password",
  "*.*.token",
  "auth",
  "*.auth",
];

/**
 * The secret values a logger scrubs, shared with whoever learns of new ones: a config reload adds the
 * new config's passwords and tokens before it applies them (src/cli/run-command.ts). Values are only
 * added: a secret the reload replaced can still turn up afterwards (in the error of a connection made
 * with it), and scrubbing a value that is no longer secret costs nothing.
 */
export class LogSecrets {
  private list: readonly string[] = [];

  constructor(values: Iterable<string> = []) {
    this.add(values);
  }

  /** Adds values; shorter than 4 characters they are left out (they would mangle ordinary words). */
  add(values: Iterable<string>): void {
    const next = new Set(this.list);
    for (const v of values) if (v.length >= 4) next.add(v);
    if (next.size === this.list.length) return;
    // Longest first: a secret that contains another is replaced whole.
    this.list = [...next].sort((a, b) => b.length - a.length);
  }

  /** The current values, longest first. */
  get values(): readonly string[] {
    return this.list;
  }
}

export interface LoggerOptions {
  readonly level: LevelWithSilent;
  /**
   * Secret values (passwords, tokens): replaced by [redacted] in every string that is logged. A
   * LogSecrets is read at every log call, so values added to it later are scrubbed from then on.
   */
  readonly secrets?: readonly string[] | LogSecrets;
  /** Where to write (default stdout). Tests pass a stream to inspect output. */
  readonly destination?: NodeJS.WritableStream;
  /** Pretty output; by default only when stdout is a TTY and pino-pretty is installed. */
  readonly pretty?: boolean;
}

/**
 * pino-pretty is a development dependency: a production install (`npm ci --omit=dev`, the Docker
 * image) does not have it, and pino would fail to start its transport. Pretty output needs it found.
 */
function prettyAvailable(): boolean {
  try {
    createRequire(import.meta.url).resolve("pino-pretty");
    return true;
  } catch {
    return false;
  }
}

/**
 * The relay's root logger: JSON lines, secrets redacted by key and scrubbed by value (an error message
 * from a client library could quote a URL with a password in it). Components take child loggers.
 */
export function createLogger(opts: LoggerOptions): Logger {
  const secrets = opts.secrets instanceof LogSecrets ? opts.secrets : new LogSecrets(opts.secrets);
  const scrub = (value: unknown, list: readonly string[], depth = 0): unknown => {
    if (typeof value === "string") {
      let out = value;
      for (const s of list) if (out.includes(s)) out = out.split(s).join("[redacted]");
      return out;
    }
    if (depth > 4 || value === null || typeof value !== "object") return value;
    if (value instanceof Error) return scrub({ type: value.name, message: value.message, stack: value.stack }, list, depth + 1);
    if (Array.isArray(value)) return value.map((v) => scrub(v, list, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = scrub(v, list, depth + 1);
    return out;
  };
  const pretty = (opts.pretty ?? (process.stdout.isTTY === true && !opts.destination)) && prettyAvailable();
  const options = {
    level: opts.level,
    base: { service: "jetstream-relay" },
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
    hooks: {
      logMethod(this: Logger, args: Parameters<Logger["info"]>, method: (...a: unknown[]) => void) {
        const list = secrets.values;
        method.apply(this, list.length > 0 ? args.map((a) => scrub(a, list)) : args);
      },
    },
  };
  if (pretty) return pino({ ...options, transport: { target: "pino-pretty", options: { colorize: true } } });
  return opts.destination ? pino(options, opts.destination) : pino(options);
}
