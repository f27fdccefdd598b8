/**
 * Field sources: where the guard reads an entity id or a version from a message, written in the
 * config as `header:<name>` or `subject-token:<index>`, and the header-name rule they share with
 * `stripHeaders`.
 */
import type { FieldSource } from "./types.js";

/** An HTTP/NATS header name: a token of visible characters without separators. */
export const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * `"header:Entity-Id"` → `{ kind: "header", name: "Entity-Id" }`,
 * `"subject-token:2"` → `{ kind: "subject-token", index: 2 }` (0-based: in `orders.eu.42`, token 2 is `42`).
 * Throws an Error whose message is a phrase meant to follow `<path>: `.
 */
export function parseFieldSource(text: string): FieldSource {
  const shown = JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}…` : text);
  const colon = text.indexOf(":");
  const kind = colon < 0 ? text : text.slice(0, colon);
  const arg = colon < 0 ? undefined : text.slice(colon + 1);
  if (kind === "header") {
    if (arg === undefined || !HEADER_NAME.test(arg)) {
      throw new Error(
        `invalid field source ${shown}: "header:" must be followed by a header name, e.g. "header:Entity-Id"`,
      );
    }
    return { kind: "header", name: arg };
  }
  if (kind === "subject-token") {
    if (arg === undefined || !/^\d{1,3}$/.test(arg)) {
      throw new Error(
        `invalid field source ${shown}: the token index must be a whole number from 0 (0-based), e.g. "subject-token:2"`,
      );
    }
    return { kind: "subject-token", index: Number(arg) };
  }
  throw new Error(`invalid field source ${shown}: use "header:<name>" or "subject-token:<index>"`);
}
