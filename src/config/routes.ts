import type { LinkConfig } from "./types.js";

/**
 * Every link of the config, for redundant-path suppression: a list, or a function returning the links
 * of the config running now (a reload that adds a direct route then applies to running links at once).
 */
export type AllLinks = readonly LinkConfig[] | (() => readonly LinkConfig[]);

/**
 * Regions with a direct link into the same destination region and stream as `link`: a message that
 * came from one of them by another path is redundant there (the data path suppresses it; a running link
 * reads the set of the config running now, so a reload that changes it does not restart the link).
 */
export function directRoutesFor(link: LinkConfig, links: readonly LinkConfig[]): ReadonlySet<string> {
  return new Set(
    links
      .filter((l) => l.to.region === link.to.region && l.to.stream === link.to.stream)
      .map((l) => l.from.region),
  );
}
