import { ErrorCodes, isRelayError } from "../errors.js";
import { versionOf } from "./items.js";
import { ID_DIGEST_BYTES, digest, groupOf } from "./layout.js";
import type { GuardItem } from "./types.js";

/**
 * A batch as the layout client's operations see it: each item with its digest, slot group and
 * entity (layout.ts), the batch split by group, and the group calls' failures put together.
 */

export interface Entity {
  readonly name: string;
  readonly digest: string;
  readonly group: number;
}

export interface Item {
  /** Position in the caller's batch. */
  readonly index: number;
  readonly id: string;
  readonly digest: string;
  readonly group: number;
  readonly token: string;
  readonly entity: Entity | undefined;
  readonly version: number | undefined;
}

export function prepare(
  items: readonly (GuardItem & { token?: string })[],
  withVersions: boolean,
  groups: number,
): Item[] {
  const entities = new Map<string, Entity>();
  return items.map((item, index) => {
    // The digest its claim answered (GuardItem.key), else computed: SHA-256 is a third of this side's work.
    const d = item.key !== undefined && item.key.length === ID_DIGEST_BYTES ? item.key : digest(item.id);
    const v = withVersions ? versionOf(item) : undefined;
    let entity: Entity | undefined;
    if (v) {
      entity = entities.get(v.entity);
      if (!entity) {
        const ed = digest(v.entity);
        entity = { name: v.entity, digest: ed, group: groupOf(ed, groups) };
        entities.set(v.entity, entity);
      }
    }
    return {
      index,
      id: item.id,
      digest: d,
      group: groupOf(d, groups),
      token: item.token ?? "",
      entity,
      version: v?.version,
    };
  });
}

export function split(items: readonly Item[]): Map<number, Item[]> {
  const byGroup = new Map<number, Item[]>();
  for (const p of items) push(byGroup, p.group, p);
  return byGroup;
}

export function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** The distinct entities of some items, each with its 1-based index in order of first appearance. */
export function distinctEntities(items: readonly Item[]): Map<Entity, number> {
  const out = new Map<Entity, number>();
  for (const p of items) if (p.entity && !out.has(p.entity)) out.set(p.entity, out.size + 1);
  return out;
}

/** The first LEASE_FENCED and the first other failure of the group calls. */
export function failures(settled: PromiseSettledResult<unknown>[]): { fenced?: unknown; failed?: unknown } {
  let fenced: unknown;
  let failed: unknown;
  for (const s of settled) {
    if (s.status !== "rejected") continue;
    if (isRelayError(s.reason, ErrorCodes.LEASE_FENCED)) fenced ??= s.reason;
    else failed ??= s.reason;
  }
  return { ...(fenced === undefined ? {} : { fenced }), ...(failed === undefined ? {} : { failed }) };
}
