import type { LinkConfig } from "../config/types.js";

/**
 * The source subject a destination subject was made from (the inverse of transformSubject), for
 * `subject-token` entity/version sources: drop `addPrefix`, put back `stripPrefix`. Assumes the source
 * subject carried `stripPrefix`, which a link with a strip prefix is normally filtered to ensure.
 */
export function sourceSubject(subject: string, link: LinkConfig): string {
  const { stripPrefix, addPrefix } = link.to.transform;
  const s = addPrefix && subject.startsWith(addPrefix) ? subject.slice(addPrefix.length) : subject;
  return stripPrefix ? `${stripPrefix}${s}` : s;
}
