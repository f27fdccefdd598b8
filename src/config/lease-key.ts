import type { LinkConfig } from "./types.js";

/**
 * The lease key of a link: what it protects is the source cursor, so the key names the source region,
 * stream and durable (two links with separate durables on one stream are separate cursors). Characters a
 * KV key cannot hold become "_".
 */
export function leaseKey(link: LinkConfig): string {
  const safe = (s: string) => s.replace(/[^-\w]/g, "_");
  return [link.from.region, link.from.stream, link.durableName].map(safe).join(".");
}
