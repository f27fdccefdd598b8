import type { FieldSource, LinkConfig } from "../config/types.js";
import { RelayHeaders } from "../protocol/headers.js";

/** What the relay knows about a source message before deciding anything. */
export interface MessageIdentity {
  /**
   * `Nats-Msg-Id`, else `<region>:<stream>:<incarnation>:<seq>` (incarnation: the source stream's
   * creation time in ms, so a stream deleted and recreated, which restarts at seq 1, does not reuse
   * ids): the same on every redelivery and restart.
   */
  readonly id: string;
  /** Region where the message was first published. */
  readonly origin: string;
  /** Regions the message was stored in before the destination, in hop order (source region last). */
  readonly path: readonly string[];
  readonly entity?: string;
  readonly version?: number;
}

export type IdentityResult =
  | { readonly ok: true; readonly identity: MessageIdentity }
  | { readonly ok: false; readonly id: string; readonly reason: string };

export interface SourceMessage {
  readonly subject: string;
  /** Only `get` is read (exact key, first value, "" when absent): MsgHdrs or WireHeaders. */
  readonly headers: { get(key: string): string } | undefined;
  readonly streamSequence: number;
}

/** Non-negative integer, no sign, no exponent, no leading junk: a version is never guessed. */
const VERSION_RE = /^(0|[1-9]\d{0,15})$/;

/**
 * `incarnation`: the source stream's creation time (ms since the epoch), when known. Without it the
 * derived id has the form relays before it used, `<region>:<stream>:<seq>`.
 */
export function identify(msg: SourceMessage, link: LinkConfig, incarnation?: number): IdentityResult {
  const h = msg.headers;
  const sourceRegion = link.from.region;
  const msgId = h?.get(RelayHeaders.MsgId) || "";
  const id = msgId !== "" ? msgId : derivedId(sourceRegion, link.from.stream, msg.streamSequence, incarnation);
  const origin = h?.get(RelayHeaders.Origin) || sourceRegion;
  const pathHeader = h?.get(RelayHeaders.Path) ?? "";
  const path = pathHeader === "" ? firstHop(sourceRegion) : withSource(splitPath(pathHeader), sourceRegion);

  const versions = link.guard?.versions;
  if (!versions) return { ok: true, identity: { id, origin, path } };
  const entity = readField(msg, versions.entity);
  if (entity === undefined || entity === "") {
    return { ok: false, id, reason: `missing entity (${describe(versions.entity)})` };
  }
  const rawVersion = readField(msg, versions.version);
  if (rawVersion === undefined || rawVersion === "") {
    return { ok: false, id, reason: `missing version (${describe(versions.version)})` };
  }
  if (!VERSION_RE.test(rawVersion) || !Number.isSafeInteger(Number(rawVersion))) {
    return { ok: false, id, reason: `malformed version ${JSON.stringify(rawVersion.slice(0, 32))} (${describe(versions.version)}): want a non-negative integer` };
  }
  return { ok: true, identity: { id, origin, path, entity, version: Number(rawVersion) } };
}

/** The id of a source message without a `Nats-Msg-Id` (see MessageIdentity.id). */
export function derivedId(region: string, stream: string, seq: number, incarnation?: number): string {
  return incarnation === undefined ? `${region}:${stream}:${seq}` : `${region}:${stream}:${incarnation}:${seq}`;
}

/**
 * The id a relay before incarnations derived for the same message (`<region>:<stream>:<seq>`), when `id`
 * is a derived id of this form; tools comparing across an upgrade read both.
 */
export function legacyDerivedId(id: string, region: string, stream: string): string | undefined {
  const prefix = `${region}:${stream}:`;
  if (!id.startsWith(prefix)) return undefined;
  const m = /^\d+:(\d+)$/.exec(id.slice(prefix.length));
  return m ? `${prefix}${m[1]}` : undefined;
}

function readField(msg: SourceMessage, source: FieldSource): string | undefined {
  if (source.kind === "header") return msg.headers?.get(source.name) || undefined;
  return msg.subject.split(".")[source.index];
}

function describe(source: FieldSource): string {
  return source.kind === "header" ? `header ${source.name}` : `subject token ${source.index}`;
}

/**
 * The path of a message first published in `region`: one shared frozen array per region (a message
 * without a Relay-Path header is the common case, and its identity is built per message).
 */
const firstHopPaths = new Map<string, readonly string[]>();
function firstHop(region: string): readonly string[] {
  let path = firstHopPaths.get(region);
  if (path === undefined) firstHopPaths.set(region, (path = Object.freeze([region])));
  return path;
}

const withSource = (prior: string[], region: string): readonly string[] => (prior[prior.length - 1] === region ? prior : [...prior, region]);

function splitPath(value: string): string[] {
  return value === "" ? [] : value.split(",").map((s) => s.trim()).filter((s) => s !== "");
}

export type RouteDecision = { readonly forward: true } | { readonly forward: false; readonly reason: string };

/** The common decision, one object for every message forwarded. */
const FORWARD: RouteDecision = Object.freeze({ forward: true });

/**
 * Loop prevention and redundant-path suppression for meshes. A message is not forwarded when:
 * - it originated in the destination region, or already passed through it (a loop);
 * - it has made `maxHops` hops;
 * - it did not originate in the source region and the mesh has a direct link from its origin to this
 *   link's destination stream: that link delivers it, so this copy would only be absorbed as a duplicate
 *   (MirrorMaker 2 does the same: one hop per origin when a direct route exists).
 */
export function route(identity: MessageIdentity, link: LinkConfig, directRoutes: ReadonlySet<string>): RouteDecision {
  const dest = link.to.region;
  if (identity.origin === dest) return { forward: false, reason: "originated in the destination region" };
  if (identity.path.includes(dest)) return { forward: false, reason: "already passed through the destination region" };
  if (identity.path.length > link.maxHops) return { forward: false, reason: `more than ${link.maxHops} hops` };
  if (identity.origin !== link.from.region && directRoutes.has(identity.origin)) {
    return { forward: false, reason: `a direct link from ${identity.origin} delivers it` };
  }
  return FORWARD;
}

/** Applies the link's subject transform: strip a prefix when present, then add one. */
export function transformSubject(subject: string, link: LinkConfig): string {
  const { stripPrefix, addPrefix } = link.to.transform;
  let out = subject;
  if (stripPrefix && out.startsWith(stripPrefix)) out = out.slice(stripPrefix.length);
  return addPrefix ? `${addPrefix}${out}` : out;
}
