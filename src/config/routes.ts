import type { LinkConfig } from "./types.js";

/**
 * Regions with a direct link into the same destination region and stream as `link`: a message that
 * came from one of them by another path is redundant there (the data path suppresses it, and a reload
 * that changes this set changes the link).
 */
export function directRoutesFor(link: LinkConfig, links: readonly LinkConfig[]): ReadonlySet<string> {
  return new Set(
    links
      .filter((l) => l.to.region === link.to.region && l.to.stream === link.to.stream)
      .map((l) => l.from.region),
  );
}
