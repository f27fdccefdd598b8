/**
 * The `links` section of the config schema: one entry per link (name, source, destination, flow
 * control, headers, bad-message and gap policies, partitions), with its guard from schema-guard.ts.
 */
import { z } from "zod";
import { quote } from "./problems.js";
import { GuardSchema } from "./schema-guard.js";
import type { StartAt } from "./types.js";
import {
  boolean,
  byteSize,
  duration,
  expectString,
  fail,
  field,
  headerName,
  integer,
  natsName,
  nonEmptyString,
  obj,
  oneOf,
  subject,
} from "./schema-fields.js";

const LINK_NAME = /^[a-z0-9][a-z0-9_-]*$/;
const LINK_NAME_RULE = 'use lowercase letters, digits, "-" and "_", starting with a letter or digit';

const linkName = field((v) => {
  const s = expectString(v);
  if (!LINK_NAME.test(s)) fail(`invalid link name ${quote(s)}: ${LINK_NAME_RULE}`);
  return s;
});

/** Region references in links: only the type here; existence is a cross check. */
const regionRef = nonEmptyString;

const DeadLetterSchema = obj({
  deadLetter: subject("dead-letter subject", { wildcards: false, prefix: false }),
});

/** `"halt"` or `{ deadLetter: <subject> }`. */
const badMessagePolicy = z.unknown().transform((v, ctx): { deadLetter: string } | "halt" => {
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
});

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
const START_AT_RULE = 'must be "earliest", "new", { time: <RFC 3339 time> } or { seq: <source sequence> }';

/** An RFC 3339 time that has passed, compiled to an ISO time in UTC (ms precision). */
const startTime = field((v) => {
  const s = v instanceof Date ? v.toISOString() : expectString(v);
  const m = RFC3339.exec(s);
  const ms = Date.parse(s);
  const day = m ? new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]))) : undefined;
  // Date.parse rolls 2026-02-30 over to March: the date must be one of the calendar's.
  if (!m || Number.isNaN(ms) || day?.getUTCDate() !== Number(m[3]) || day.getUTCMonth() !== Number(m[2]) - 1) {
    fail(`must be an RFC 3339 time such as "2026-01-02T15:04:05Z" (got ${quote(v)})`);
  }
  if (ms > Date.now()) fail(`${quote(s)} is in the future: a link can only start at a time that has passed (use "new" to start with the next message stored)`);
  return new Date(ms).toISOString();
});

const StartPointSchema = obj({ time: startTime.optional(), seq: integer(1, Number.MAX_SAFE_INTEGER).optional() });

/** `"earliest"`, `"new"`, `{ time: <RFC 3339> }` or `{ seq: <n> }`. */
const startAt = z.unknown().transform((v, ctx): StartAt => {
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
});

export const LinkSchema = obj({
  name: linkName,
  from: obj({
    region: regionRef,
    stream: natsName("stream name"),
    filter: subject("subject filter", { wildcards: true, prefix: false }).optional(),
  }),
  to: obj({
    region: regionRef,
    stream: natsName("stream name"),
    subject: obj({
      stripPrefix: subject("subject prefix", { wildcards: false, prefix: true }).optional(),
      addPrefix: subject("subject prefix", { wildcards: false, prefix: true }).optional(),
    }).optional(),
    /** Every publish carries `Nats-Expected-Stream: <stream>` (stored with the message): the server refuses another stream. */
    expectStream: boolean.optional(),
  }),
  batchSize: integer(1, 10_000).optional(),
  inFlight: integer(1, 65_536).optional(),
  inFlightBytes: byteSize(64 * 1024, 16 * 1024 ** 3).optional(),
  ackWait: duration({ allowZero: false }).optional(),
  sourceAcks: oneOf(["each", "cumulative"] as const).optional(),
  publishTimeout: duration({ allowZero: false }).optional(),
  stripHeaders: z.array(headerName).optional(),
  maxHops: integer(1, 255).optional(),
  durable: natsName("durable consumer name").optional(),
  onBadMessage: badMessagePolicy.optional(),
  onGap: oneOf(["continue", "resync", "halt"] as const).optional(),
  maxReplayAge: duration({ allowZero: false }).optional(),
  stallAfter: duration({ allowZero: false }).optional(),
  guard: GuardSchema.optional(),
  partitions: obj({ count: integer(2, 1_024), token: integer(1, 32) }).optional(),
  startAt: startAt.optional(),
});
