import { watch } from "node:fs";
import type { FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import type { Logger } from "pino";

export interface ConfigWatch {
  close(): void;
}

/** How long the directory must be quiet before the file is read: an editor's save is several events. */
export const WATCH_DEBOUNCE_MS = 300;

/**
 * Calls `onChange` after the config file's directory changed and then stayed quiet for `debounceMs`.
 * The directory is watched, not the file: editors save by writing a temporary file and renaming it
 * over the old one, and a Kubernetes ConfigMap volume swaps a `..data` symlink, and a watch on the file
 * itself would follow the old inode and miss both. Any change in the directory calls `onChange`, which
 * compares the file's content with what it last read. A watch that fails (the directory was removed)
 * is set up again every second until it works.
 */
export function watchConfigFile(
  path: string,
  opts: { readonly logger: Logger; readonly onChange: () => void; readonly debounceMs?: number },
): ConfigWatch {
  const dir = dirname(resolve(path));
  const debounceMs = opts.debounceMs ?? WATCH_DEBOUNCE_MS;
  let watcher: FSWatcher | undefined;
  let debounce: NodeJS.Timeout | undefined;
  let retry: NodeJS.Timeout | undefined;
  let closed = false;

  const changed = () => {
    if (debounce) clearTimeout(debounce);
    debounce = setTimeout(() => {
      debounce = undefined;
      if (!closed) opts.onChange();
    }, debounceMs);
    debounce.unref();
  };
  const start = () => {
    retry = undefined;
    if (closed) return;
    try {
      watcher = watch(dir, { persistent: false }, changed);
      watcher.on("error", (err) => {
        opts.logger.warn({ dir, err: err.message }, "config watch failed: setting it up again");
        watcher?.close();
        watcher = undefined;
        again();
      });
      opts.logger.info({ dir, file: basename(path) }, "watching the config file: a change reloads it");
    } catch (err) {
      opts.logger.warn(
        { dir, err: err instanceof Error ? err.message : String(err) },
        "cannot watch the config file's directory: retrying",
      );
      again();
    }
  };
  const again = () => {
    if (closed || retry) return;
    retry = setTimeout(() => {
      start();
      changed(); // the file may have changed while nothing watched it
    }, 1_000);
    retry.unref();
  };
  start();
  return {
    close() {
      closed = true;
      watcher?.close();
      if (debounce) clearTimeout(debounce);
      if (retry) clearTimeout(retry);
    },
  };
}
