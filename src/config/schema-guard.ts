/**
 * A link's `guard` section of the config schema: the store (Redis by URL, Sentinel or Cluster, or
 * memory), id and claim TTLs, and the optional per-entity `versions`.
 */
import type { FieldSource } from "./types.js";
import { parseFieldSource } from "./field-source.js";
import { quote } from "./problems.js";
import { TlsSchema } from "./schema-regions.js";
import {
  boolean,
  duration,
  expectString,
  fail,
  field,
  hostPort,
  integer,
  list,
  nonEmptyString,
  obj,
  secretString,
} from "./schema-fields.js";

const redisUrl = field((v) => {
  const s = expectString(v);
  let ok = /^rediss?:\/\//.test(s);
  if (ok) {
    try {
      ok = new URL(s).hostname !== "";
    } catch {
      ok = false;
    }
  }
  if (!ok) fail(`invalid Redis URL ${quote(s)}: use redis://[:password@]host:port[/db] or rediss://...`);
  return s;
});

const fieldSource = field((v): FieldSource => {
  const s = expectString(v);
  try {
    return parseFieldSource(s);
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
});

const RedisSchema = obj({
  url: redisUrl.optional(),
  sentinel: obj({
    name: nonEmptyString,
    nodes: list(hostPort, "must list at least one sentinel"),
    /** The sentinels' own ACL user and password (Sentinel's requirepass / ACL), apart from the data nodes'. */
    username: nonEmptyString.optional(),
    password: secretString.optional(),
  }).optional(),
  cluster: obj({ nodes: list(hostPort, "must list at least one node") }).optional(),
  /** ACL user (Redis 6+); the password is then that user's. */
  username: nonEmptyString.optional(),
  password: secretString.optional(),
  tls: TlsSchema.optional(),
  /** A commit counts once WAIT reports this many replicas (0: no WAIT). */
  waitReplicas: integer(0, 16).optional(),
  waitTimeout: duration({ allowZero: false }).optional(),
});

export const GuardSchema = obj({
  redis: RedisSchema.optional(),
  memory: boolean.optional(),
  idTtl: duration({ allowZero: false }).optional(),
  claimTtl: duration({ allowZero: false }).optional(),
  versions: obj({
    entity: fieldSource.optional(),
    version: fieldSource.optional(),
    /** Sizes the Redis layout of versions (hashes of ~64 entities each); fixed for a scope when first used. */
    expectedEntities: integer(1, 1_000_000_000_000).optional(),
  }).optional(),
  strict: boolean.optional(),
});
