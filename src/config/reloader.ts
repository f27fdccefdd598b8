import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import type { Logger } from "pino";
import type { Env } from "./env.js";
import { ConfigError, parseConfigText } from "./load.js";
import type { RelayConfig } from "./types.js";
import { watchConfigFile } from "./watch.js";
import type { ConfigWatch } from "./watch.js";

/** What a reload is applied to (the Relay). */
export interface Reloadable {
  /** Applies a loaded, valid config; records its own outcome (and rejects on a failure it recorded). */
  reload(next: RelayConfig, trigger: string): Promise<unknown>;
  /** Records a reload that failed before `reload`: the file could not be read or is invalid. */
  reloadFailed(err: unknown, trigger: string): unknown;
}

export interface ReloaderOptions {
  readonly path: string;
  readonly target: Reloadable;
  readonly logger: Logger;
  readonly env?: Env;
  /**
   * A valid config was read, before it is applied (and whether or not applying it succeeds): e.g. its
   * secrets join the logger's redaction list before anything uses them.
   */
  readonly onLoaded?: (config: RelayConfig) => void;
  /** After a successful reload, with the new config: applies what lives outside the relay. */
  readonly onApplied?: (config: RelayConfig) => void;
  readonly debounceMs?: number;
}

/**
 * Reloads the config file on request (`SIGHUP`) and, with `reload.watch`, when the file changes. One
 * reload at a time: requests made while one runs are merged into one more after it. The whole file is
 * read and validated before anything changes; a bad file is recorded as a failed reload and changes
 * nothing. A watch event reloads only when the file's content differs from what was last read (a bad
 * file is not tried again until it changes); `SIGHUP` always reloads.
 */
export class ConfigReloader {
  private pending: string | undefined;
  private queue: Promise<void> | undefined;
  private started = false;
  private stopped = false;
  private lastDigest: string | undefined;
  private watcher: ConfigWatch | undefined;

  constructor(private readonly opts: ReloaderOptions) {}

  /**
   * Starts serving requests (one made before runs now): call once the relay runs. `config` is the one it
   * runs, `digest` the content it was read from (see `readConfigFile`).
   */
  start(config: RelayConfig, digest?: string): void {
    if (this.stopped || this.started) return;
    this.started = true;
    this.lastDigest ??= digest;
    this.setWatch(config.reload.watch);
    if (this.pending !== undefined) void this.request(this.pending);
  }

  /** Asks for a reload; resolves when no reload is running or waiting any more. */
  request(trigger: string): Promise<void> {
    if (this.stopped) return Promise.resolve();
    this.pending = trigger;
    if (!this.started) return Promise.resolve();
    this.queue ??= this.run().finally(() => (this.queue = undefined));
    return this.queue;
  }

  /** No more reloads (the relay is stopping); a reload already running finishes. */
  stop(): void {
    this.stopped = true;
    this.pending = undefined;
    this.setWatch(false);
  }

  private setWatch(enabled: boolean): void {
    if (enabled && !this.watcher && !this.stopped) {
      const { path, logger, debounceMs } = this.opts;
      this.watcher = watchConfigFile(path, {
        logger,
        onChange: () => void this.request("watch"),
        ...(debounceMs === undefined ? {} : { debounceMs }),
      });
    } else if (!enabled && this.watcher) {
      this.watcher.close();
      this.watcher = undefined;
      this.opts.logger.info("no longer watching the config file (reload.watch is off)");
    }
  }

  private async run(): Promise<void> {
    while (this.pending !== undefined && !this.stopped) {
      const trigger = this.pending;
      this.pending = undefined;
      await this.reloadOnce(trigger);
    }
  }

  private async reloadOnce(trigger: string): Promise<void> {
    const { path, target, logger } = this.opts;
    let file: { text: string; digest: string };
    try {
      file = await readConfigText(path);
    } catch (err) {
      const digest = `unreadable: ${err instanceof Error ? err.message : String(err)}`;
      if (trigger === "watch" && digest === this.lastDigest) return;
      this.lastDigest = digest;
      target.reloadFailed(err, trigger);
      return;
    }
    if (trigger === "watch" && file.digest === this.lastDigest) {
      logger.debug({ trigger }, "config file unchanged: nothing to reload");
      return;
    }
    this.lastDigest = file.digest;
    logger.info({ trigger }, "reloading the config file");
    let config: RelayConfig;
    try {
      config = parseConfigText(file.text, path, this.opts.env);
    } catch (err) {
      target.reloadFailed(err, trigger);
      return;
    }
    this.opts.onLoaded?.(config);
    try {
      await target.reload(config, trigger);
    } catch (err) {
      // Recorded by the target (e.g. this relay's region left the config); nothing changed.
      logger.debug({ trigger, err: err instanceof Error ? err.message : String(err) }, "reload not applied");
      return;
    }
    if (this.stopped) return;
    this.setWatch(config.reload.watch);
    this.opts.onApplied?.(config);
  }
}

/** The config file's text and its sha256. Rejects with ConfigError (as `loadConfig`) when unreadable. */
export async function readConfigText(path: string): Promise<{ text: string; digest: string }> {
  try {
    const text = await readFile(path, "utf8");
    return { text, digest: createHash("sha256").update(text).digest("hex") };
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new ConfigError(path, `config ${path}: cannot read: ${reason}`, [], { cause: err });
  }
}

/** `loadConfig`, also returning the digest of the text it read (what the watch compares with). */
export async function readConfigFile(
  path: string,
  env?: Env,
): Promise<{ config: RelayConfig; digest: string }> {
  const { text, digest } = await readConfigText(path);
  return { config: parseConfigText(text, path, env), digest };
}
