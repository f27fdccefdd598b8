/**
 * The `links` section of the config schema: one entry per link (name, source, destination, flow
 * control, headers, bad-message and gap policies, partitions), with its guard from schema-guard.ts.
 */
import { z } from "zod";
import { quote } from "./problems.js";
import { DEFAULTS, defaultDeadLetterSubject, defaultDurableName } from "./defaults.js";
import { GuardSchema } from "./schema-guard.js";
import type { StartAt } from "./types.js";
import {
  boolean,
  byteSize,
  duration,
  expectString,
  fail,
  field,
  formatSize,
  headerName,
  integer,
  natsName,
  nonEmptyString,
  obj,
  oneOf,
  sizeInBytes,
  subject,
} from "./schema-fields.js";

const LINK_NAME = /^[a-z0-9][a-z0-9_-]*$/;
const LINK_NAME_RULE = 'use lowercase letters, digits, "-" and "_", starting with a letter or digit';

const linkName = field((v) => {
  const s = expectString(v);
  if (!LINK_NAME.test(s)) fail(`invalid link name ${quote(s)}: ${LINK_NAME_RULE}`);
  return s;
}).meta({ valueType: "[link name](#names)", allowed: `\`${LINK_NAME.source}\`` });

/** A key-value bucket's name, as the KV API allows it (`KV_<bucket>` is its stream). */
export const bucketName = field((v) => {
  const s = expectString(v);
  if (!/^[-\w]+$/.test(s)) fail(`invalid bucket name ${quote(s)}: use letters, digits, "-" and "_"`);
  if (s.length > 252) fail("bucket name is too long (at most 252 characters)");
  return s;
}).meta({ valueType: "bucket name", allowed: "`^[-\\w]+$`" });

/** Region references in links: only the type here; existence is a cross check. */
const regionRef = nonEmptyString.meta({ valueType: "region name", allowed: "a key of `regions`" });

const DeadLetterSchema = obj({
  deadLetter: subject("dead-letter subject", { wildcards: false, prefix: false }),
});

/** `"halt"` or `{ deadLetter: <subject> }`. */
const badMessagePolicy = z
  .unknown()
  .transform((v, ctx): { deadLetter: string } | "halt" => {
    if (v === "halt") return "halt";
    if (typeof v === "object" && v !== null && !Array.isArray(v)) {
      const r = DeadLetterSchema.safeParse(v);
      if (r.success) return r.data;
      for (const iss of r.error.issues) ctx.issues.push({ ...iss, input: undefined } as never);
      return z.NEVER;
    }
    ctx.issues.push({
      code: "custom",
      message: `must be "halt" or { deadLetter: <subject> } (got ${quote(v)})`,
      input: undefined,
    });
    return z.NEVER;
  })
  .meta({ valueType: "`halt` or `{ deadLetter: <subject> }`" });

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
const START_AT_RULE = 'must be "earliest", "new", { time: <RFC 3339 time> } or { seq: <source sequence> }';

/** An RFC 3339 time that has passed, compiled to an ISO time in UTC (ms precision). */
const startTime = field((v) => {
  const s = v instanceof Date ? v.toISOString() : expectString(v);
  const m = RFC3339.exec(s);
  const ms = Date.parse(s);
  const day = m ? new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]))) : undefined;
  // Date.parse rolls 2026-02-30 over to March: the date must be one of the calendar's.
  if (
    !m ||
    Number.isNaN(ms) ||
    day?.getUTCDate() !== Number(m[3]) ||
    day.getUTCMonth() !== Number(m[2]) - 1
  ) {
    fail(`must be an RFC 3339 time such as "2026-01-02T15:04:05Z" (got ${quote(v)})`);
  }
  if (ms > Date.now())
    fail(
      `${quote(s)} is in the future: a link can only start at a time that has passed (use "new" to start with the next message stored)`,
    );
  return new Date(ms).toISOString();
});

const StartPointSchema = obj({
  time: startTime.optional(),
  seq: integer(1, Number.MAX_SAFE_INTEGER).optional(),
});

/** `"earliest"`, `"new"`, `{ time: <RFC 3339> }` or `{ seq: <n> }`. */
const startAt = z
  .unknown()
  .transform((v, ctx): StartAt => {
    if (v === "earliest" || v === "new") return v;
    if (typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Date)) {
      const r = StartPointSchema.safeParse(v);
      if (!r.success) {
        for (const iss of r.error.issues) ctx.issues.push({ ...iss, input: undefined } as never);
        return z.NEVER;
      }
      const { time, seq } = r.data;
      if (time !== undefined && seq === undefined) return { time };
      if (seq !== undefined && time === undefined) return { seq };
      ctx.issues.push({ code: "custom", message: "give exactly one of time or seq", input: undefined });
      return z.NEVER;
    }
    ctx.issues.push({ code: "custom", message: `${START_AT_RULE} (got ${quote(v)})`, input: undefined });
    return z.NEVER;
  })
  .meta({
    valueType: "`earliest`, `new`, `{ time }` or `{ seq }`",
    allowed: "`time`: an RFC 3339 time that has passed; `seq`: 1 or more",
  });

/** The most a rate cap takes: 10 million messages, 64 GiB a second (beyond anything a link moves). */
const MAX_MESSAGE_RATE = 10_000_000;
const MAX_BYTE_RATE = 64 * 1024 ** 3;

/** A rate per second: a number, or a string ending in "/s" (`2000/s`, `2MiB/s`). Checks the value is > 0. */
function perSecond(
  example: string,
  read: (amount: unknown) => number | undefined,
  max: number,
  maxShown: string,
) {
  return field((v) => {
    const amount =
      typeof v === "string" ? /^\s*(.*?)\s*\/\s*s\s*$/.exec(v)?.[1] : typeof v === "number" ? v : undefined;
    const n = amount === undefined ? undefined : read(amount);
    if (n === undefined || !Number.isFinite(n))
      fail(`must be a rate per second such as ${example} (got ${quote(v)})`);
    if (n <= 0) fail(`must be > 0 (got ${quote(v)}): leave maxRate out for no cap`);
    if (n > max) fail(`must be at most ${max} a second (got ${quote(v)})`);
    return n;
  }).meta({ valueType: "rate per second", allowed: `more than 0, at most ${maxShown}/s` });
}

/** Messages a second: `2000/s` or 2000 (fractions allowed: `0.5/s`). */
const messageRate = perSecond(
  '"2000/s"',
  (a) =>
    typeof a === "number" ? a : typeof a === "string" && /^\d+(\.\d+)?$/.test(a) ? Number(a) : undefined,
  MAX_MESSAGE_RATE,
  String(MAX_MESSAGE_RATE),
);

/** Bytes a second: `2MiB/s`, `512KiB/s`, or a whole number of bytes (KiB, MiB, GiB are 1024-based, as for inFlightBytes). */
const byteRate = perSecond(
  '"2MiB/s", "512KiB/s" or a number of bytes',
  (a) => {
    const n = sizeInBytes(a);
    return n !== undefined && Number.isSafeInteger(n) ? n : undefined;
  },
  MAX_BYTE_RATE,
  formatSize(MAX_BYTE_RATE),
);

/** `maxRate: { messages: 2000/s, bytes: 2MiB/s }`: either or both. */
const MaxRateSchema = obj({
  messages: messageRate
    .optional()
    .meta({ description: "Messages a second (`2000/s`, or a number; fractions allowed)." }),
  bytes: byteRate
    .optional()
    .meta({ description: "Bytes a second: a [size](#sizes) per second (`2MiB/s`), or a number of bytes." }),
}).check((ctx) => {
  // Said only of a cap with nothing else wrong (an unknown key is the likelier mistake).
  const v = ctx.value;
  if (ctx.issues.length === 0 && v.messages === undefined && v.bytes === undefined) {
    ctx.issues.push({
      code: "custom",
      message: 'must set messages, bytes or both, e.g. { messages: "2000/s", bytes: "2MiB/s" }',
      input: undefined,
    });
  }
});

const AuditSchema = obj({
  enabled: boolean.optional().meta({
    default: DEFAULTS.audit.enabled,
    description: "Whether the link's owner audits what the link delivered.",
  }),
  after: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.audit.afterMs,
    description:
      "A relayed range is checked once it is this old (its source messages all acknowledged this long ago): the destination must hold each message the link should have delivered exactly once, in source order, versions never backwards.",
  }),
  sweepEvery: duration({ allowZero: true }).optional().meta({
    default: DEFAULTS.audit.sweepEveryMs,
    description:
      "How often the whole retained window of the source is checked again, so a destination that lost messages after their first check (a power loss, a restored backup, an operator's purge) is found too. `0`: never.",
  }),
  repair: oneOf(["report", "auto"] as const)
    .optional()
    .meta({
      default: DEFAULTS.audit.repair,
      description:
        "`report`: a missing message is counted, logged and alerted on. `auto`: it is also put back through the guard, as `jetstream-relay repair` does (stale versions refused, `Relay-Repair: true`).",
    }),
  maxReadRate: messageRate.optional().meta({
    default: DEFAULTS.audit.maxReadRate,
    description:
      "The most messages a second the audit reads (headers only, both streams together). When the link relays faster, the audit skips ahead and says so: `relay_audit_coverage_ratio` is the share of each range it checked.",
  }),
});

export const LinkSchema = obj({
  name: linkName.meta({
    description:
      "Unique among links. Used in logs, metrics, the `Relay-Link` header of every relayed message (a new cursor starts after the destination's newest marker naming the link) and the default durable name and dead-letter subject. Renamed, a link finds none of its old markers: set `durable` to its old durable name to keep its position.",
  }),
  from: obj({
    region: regionRef.meta({ description: "The source region; must be defined under `regions`." }),
    stream: natsName("stream name").optional().meta({ defaultText: "`KV_<bucket>` with `from.bucket`", description: "The source stream. Give exactly one of `stream` and `bucket`." }),
    bucket: bucketName.optional().meta({
      description:
        "A key-value bucket to relay instead of a stream (its stream `KV_<bucket>`): puts, deletes and purges converge by last writer wins across regions. `to.bucket` must be given too. See [KV buckets](kv.md).",
    }),
    filter: subject("subject filter", { wildcards: true, prefix: false }).optional().meta({
      defaultText: "whole stream",
      description:
        "Only messages whose subject matches are relayed. It becomes the durable consumer's filter subject.",
    }),
  }).meta({ description: "Where the link reads: a stream in a region." }),
  to: obj({
    region: regionRef.meta({
      description:
        "The destination region; must be defined under `regions`, and must differ from `from.region`.",
    }),
    bucket: bucketName.optional().meta({
      description:
        "The destination key-value bucket of a KV link (`from.bucket`): `$KV.<from.bucket>.<key>` is written as `$KV.<to.bucket>.<key>`, applied only when newer than what the bucket holds for the key. See [KV buckets](kv.md).",
    }),
    stream: natsName("stream name").optional().meta({
      defaultText: "`KV_<bucket>` with `to.bucket`",
      description:
        "The destination stream (give exactly one of `stream` and `bucket`). It must bind every subject the link publishes (after `to.subject`) and have `limits` retention: the link checks both when it starts and again whenever the stream changes while it runs (see [Destination changes](#destination-changes-while-a-link-runs)), and fails with `DESTINATION_MISMATCH` (naming the subjects that are not bound) or `DESTINATION_RETENTION`; a PubAck from any other stream fails the link too. Without `to.expectStream` the relay sets no `Nats-Expected-Stream` header (see [Headers always stripped](#headers-always-stripped)).",
    }),
    subject: obj({
      stripPrefix: subject("subject prefix", { wildcards: false, prefix: true }).optional().meta({
        description:
          "Removed from the front of the source subject when the subject starts with it; a subject that does not is left alone.",
      }),
      addPrefix: subject("subject prefix", { wildcards: false, prefix: true })
        .optional()
        .meta({ description: "Added to the front, after stripping." }),
    })
      .optional()
      .meta({
        defaultText: "subjects unchanged",
        description:
          "How the subject is rewritten before publishing; see [below](#subject-rewriting-tosubject).",
      }),
    expectStream: boolean.optional().meta({
      default: DEFAULTS.expectStream,
      description:
        "Every publish carries `Nats-Expected-Stream: <to.stream>`, so the server itself refuses to store a message into any other stream (err_code 10060, which fails the link with `DESTINATION_MISMATCH`, nothing acked). The header is **stored with every message**; see [the trade-off](#toexpectstream-the-trade-off).",
    }),
    deleteMarkers: oneOf(["relay", "drop"] as const)
      .optional()
      .meta({
        default: DEFAULTS.deleteMarkers,
        description:
          "What to do with a subject delete marker from the source (a message carrying `Nats-Marker-Reason`, which nats-server 2.11+ writes when a subject's last message ages out): `relay` copies it like any message (as server sourcing does), `drop` acks it at the source without publishing it and counts it in `relay_delete_markers_dropped_total`. See [the header policy](data-path.md#header-policy).",
      }),
    order: oneOf(["default", "strict"] as const)
      .optional()
      .meta({
        default: DEFAULTS.order,
        description:
          "`strict`: pipelined publishes are chained by `Nats-Expected-Last-Sequence`, so the destination never stores a message after a later one, even when a publish is lost while later ones in flight are stored (a destination leader dying under a window); a refused publish (err_code 10071) rolls the window back and the link resumes from the destination's last sequence and markers (`relay_order_rejections_total`). Only for a link that is its destination stream's **only writer**: refused at load for two links into one stream, and at start, by `check --live` and whenever the stream changes for a stream that binds subjects beyond the link's, sources or mirrors, or captures the dead-letter subject (`ORDER_NOT_SOLE_WRITER`). The header is **stored with every message** (a downstream re-publisher must strip it; on nats-server 2.9 a stream that sources the destination stalls on it); see [Strict order](#toorder-strict-order-for-a-single-writer-destination).",
      }),
  }).meta({ description: "Where the link publishes: a stream in another region." }),
  batchSize: integer(1, 10_000).optional().meta({
    default: DEFAULTS.batchSize,
    description:
      "Messages fetched per pull request. Pulls stay outstanding for a window of `inFlight` messages, at most `inFlightBytes` of the largest message the source allows and at least one batch (a new pull goes out as each batch arrives), so a link that reads another region receives the whole window per round trip. Must not be larger than `inFlight`.",
  }),
  inFlight: integer(1, 65_536)
    .optional()
    .meta({
      defaultText: `\`${DEFAULTS.inFlight}\`; \`${DEFAULTS.guardedInFlight}\` with a \`guard\``,
      description:
        "The cap of the link's self-sizing window: the most messages received but not yet acknowledged (the durable consumer's `MaxAckPending` is the window, which grows with the round trip up to this). A guarded link starts at its cap and stays there (it waits for its guard). The default covers about 27,000 msgs/s over a 300 ms round trip; raise it only for more ([data path: A link across a WAN](data-path.md#a-link-across-a-wan)).",
    }),
  inFlightBytes: byteSize(64 * 1024, 16 * 1024 ** 3)
    .optional()
    .meta({
      default: DEFAULTS.inFlightBytes,
      description:
        "The most payload and header bytes received but not yet acknowledged. At this bound the link lowers its consumer's `MaxAckPending` to the number of messages it holds, so the server stops delivering (a few pulls already on their way still arrive), and sets it back to the window once it holds less than half. The link's current bytes are the metric `relay_inflight_bytes`.",
    }),
  ackWait: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.ackWaitMs,
    description:
      "The durable consumer's ack wait: a message not acknowledged within it is redelivered. A message the link holds longer than half of it (a slow or paused destination, a claim another relay holds) gets an in-progress ack (`+WPI`) instead, so the source does not redeliver it.",
  }),
  sourceAcks: oneOf(["each", "cumulative"] as const)
    .optional()
    .meta({
      default: DEFAULTS.sourceAcks,
      description:
        'How the source consumer is acked: `cumulative` (AckAll): one ack per run of finished messages, never past a message the link still holds; or `each` message on its own (AckExplicit). Changing it replaces the consumer at its ack floor + 1 ([data path: Source acks](data-path.md#source-acks)).',
    }),
  publishTimeout: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.publishTimeoutMs,
    description: "How long a publish to the destination waits for its acknowledgement before it is retried.",
  }),
  stripHeaders: z.array(headerName).optional().meta({
    defaultText: "`[]`",
    description:
      "Headers removed from each message before it is published, **in addition to** the [default list](#headers-always-stripped), which is always stripped.",
  }),
  maxHops: integer(1, 255).optional().meta({
    default: DEFAULTS.maxHops,
    description:
      "A message whose `Relay-Path` header already lists this many regions is not forwarded further (protection against loops in a mesh of links).",
  }),
  durable: natsName("durable consumer name")
    .optional()
    .meta({
      defaultText: `\`${defaultDurableName("<name>")}\``,
      description:
        "Name of the durable consumer on the source stream, and part of the link's lease key (see [`group`](#group)).",
    }),
  onBadMessage: badMessagePolicy.optional().meta({
    defaultText: `\`{ deadLetter: "${defaultDeadLetterSubject("<name>")}" }\``,
    description:
      "What to do with a message the link cannot relay: it lacks the entity or version the guard needs, or it is larger than the destination takes (headers included); see [`onBadMessage`](#onbadmessage).",
  }),
  onGap: oneOf(["continue", "resync", "halt"] as const)
    .optional()
    .meta({
      default: DEFAULTS.onGap,
      description:
        "What to do when messages the link has not relayed yet are gone from the source stream (removed by limits or a purge); see [`onGap`](#ongap).",
    }),
  maxReplayAge: duration({ allowZero: false }).optional().meta({
    description:
      "Limit on how old source messages may be when the link (re)plays them; see [`maxReplayAge`](#maxreplayage).",
  }),
  stallAfter: duration({ allowZero: false }).optional().meta({
    default: DEFAULTS.stallAfterMs,
    description:
      'The source has messages for the link and delivers none for this long, while the link could move: the link is `stalled` and healed in steps (a new pull, the consumer re-created, a new connection); see [Silent paths and stalls](data-path.md#silent-paths-and-stalls).',
  }),
  guard: GuardSchema.optional().meta({
    description:
      "Exactly-once protection beyond the destination's duplicate window; see [`links[].guard`](#linksguard).",
  }),
  partitions: obj({
    count: integer(2, 1_024).meta({
      description: "How many partitions: the subjects carry 0…count−1 at `token`.",
    }),
    token: integer(1, 32).meta({
      description: "The subject token (1-based) that carries the partition number.",
    }),
  })
    .optional()
    .meta({
      description:
        "Splits the link into `count` partitions by the number at subject token `token`; see [`partitions`](#partitions).",
    }),
  startAt: startAt.optional().meta({
    default: DEFAULTS.startAt,
    description:
      "Where a link without a record (no source consumer, none of its messages in the destination) starts: the first message the stream holds, the next one stored, the first one stored at or after an RFC 3339 `time` (ms precision; not in the future), or source sequence `seq`. A link with a record goes on from it, whatever this says. A reload that changes only `startAt` does not restart the link; see [`startAt`](#startat).",
  }),
  audit: AuditSchema.optional().meta({
    description:
      "The link's continuous audit of its own delivery; see [Audit](verify.md#the-continuous-audit).",
  }),
  maxRate: MaxRateSchema.optional().meta({
    description:
      'A cap on what the link pulls, per second: `messages` and/or `bytes`; at least one is required. Deliveries beyond the cap wait, in order and unacked, and the window stops at what the cap needs; a partitioned link shares the cap among its partitions. A reload that changes only `maxRate` applies it to the running link. See [Rate caps](data-path.md#rate-caps).',
  }),
});
