/**
 * A link's `guard` section of the config schema: the store (Redis by URL, Sentinel or Cluster, or
 * memory), id and claim TTLs, and the optional per-entity `versions`.
 */
import type { FieldSource } from "./types.js";
import { DEFAULTS } from "./defaults.js";
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
}).meta({
  valueType: "Redis URL",
  allowed: "`redis://[[user]:password@]host[:port][/db]` or `rediss://...`",
});

const fieldSource = field((v): FieldSource => {
  const s = expectString(v);
  try {
    return parseFieldSource(s);
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
}).meta({
  valueType: "[field source](#guardversions)",
  allowed: "`header:<Name>` or `subject-token:<index>`",
});

const RedisSchema = obj({
  url: redisUrl.optional().meta({
    description: "A single Redis; `rediss://` for TLS. The password in the URL is **secret**.",
  }),
  sentinel: obj({
    name: nonEmptyString.meta({ description: "The master's name, as the Sentinels know it." }),
    nodes: list(hostPort, "must list at least one sentinel").meta({ description: "The Sentinels." }),
    username: nonEmptyString.optional().meta({
      description: "The Sentinels' own ACL user (Sentinel's ACL), apart from the data nodes'.",
    }),
    password: secretString.optional().meta({
      description:
        "The Sentinels' own password (their `requirepass`, or the ACL user's password), apart from the data nodes'.",
    }),
  })
    .optional()
    .meta({
      description: "Redis Sentinel: the relay asks the Sentinels for the master and follows a failover.",
    }),
  cluster: obj({
    nodes: list(hostPort, "must list at least one node").meta({
      description: "Some of the cluster's nodes; the rest are discovered.",
    }),
  })
    .optional()
    .meta({ description: "Redis Cluster." }),
  username: nonEmptyString.optional().meta({
    description:
      "The data nodes' ACL user (Redis 6+), for `url`, `sentinel` and `cluster`; `password` is then that user's.",
  }),
  password: secretString.optional().meta({
    description:
      "The data nodes' password, for `sentinel` and `cluster` (or for `url` instead of putting it in the URL: giving it in both places is an error).",
  }),
  tls: TlsSchema.optional().meta({
    description: "`{ ca, cert, key }`, as for [regions](#regionsnametls-and-guardredistls).",
  }),
  waitReplicas: integer(0, 16).optional().meta({
    default: DEFAULTS.redisWaitReplicas,
    description:
      'A commit counts only once `WAIT` reports this many replicas of the master that took it (per slot group on Redis Cluster); with fewer, the commit fails (`GUARD_UNAVAILABLE`, naming the node: "1 replica required, 0 acknowledged"), nothing is acked, and the link pauses and retries as for an unreachable Redis. `0`: commits are not waited for, and a failover can lose the last ones.',
  }),
  waitTimeout: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.redisWaitTimeoutMs,
    description:
      "How long a commit's `WAIT` may take. A slow or absent replica delays every commit by up to this much, and the link's other guard calls behind it (one connection).",
  }),
});

export const GuardSchema = obj({
  redis: RedisSchema.optional().meta({
    description:
      "The Redis the guard uses: exactly one of `url`, `sentinel` or `cluster`; see [below](#guardredis). One store: `redis` or `memory`.",
  }),
  memory: boolean.optional().meta({
    description:
      "An in-process store. **For tests and demos only**: it is forgotten when the relay stops and is not shared between relays. `memory: false` is the same as leaving it out. One store: `redis` or `memory`.",
  }),
  idTtl: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.idTtlMs,
    description:
      "How long a relayed message id is remembered. A redelivery or replay of the same message within this time is recognised as a duplicate.",
  }),
  claimTtl: duration({ allowZero: false })
    .optional()
    .meta({
      defaultText: `${DEFAULTS.claimTtlAckWaitFactor} × \`ackWait\``,
      description:
        "How long a relay's claim on a message that it is publishing lives, if the relay dies before it finishes. Until then another relay waits for that message and relays nothing newer past it (`relay_claims_held_total`), except a new owner after a takeover: it takes the previous owner's claims on the messages that owner held at once.",
    }),
  versions: obj({
    entity: fieldSource.optional().meta({
      description:
        "Identifies the entity the message is about (an order id, a customer id). Goes with `version`: one without the other is an error.",
    }),
    version: fieldSource.optional().meta({
      description:
        "A non-negative integer that grows with each change of the entity. A message whose version is not greater than the last relayed version of its entity is dropped as stale.",
    }),
    expectedEntities: integer(1, 1_000_000_000_000).optional().meta({
      default: DEFAULTS.expectedEntities,
      description:
        "How many entities the Redis guard sizes its version hashes for (about 64 per hash, so they stay in Redis's compact encoding). Far more still work, at several times the memory each (a hash past 128 entries leaves the compact encoding). Fixed for a destination stream by the first relay that stores a version there: a later change does not resize it.",
    }),
  })
    .optional()
    .meta({
      description:
        "Per-entity ordering: an older version of an entity never overwrites a newer one; see [below](#guardversions).",
    }),
  strict: boolean.optional().meta({
    default: DEFAULTS.guardStrict,
    description:
      "Refuse to start when the guard's Redis does not keep what it writes: AOF off (versions would be lost on a Redis restart) or a `maxmemory-policy` other than `noeviction` with a memory limit (`GUARD_NOT_DURABLE`); with `redis.waitReplicas`, wait (paused) until the master has that many online replicas. A running link whose Redis turns unsafe pauses. Without `strict`, these are warnings and `relay_guard_unsafe{reason}`.",
  }),
});
