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
  sizeInBytes,
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

/** The most a rate cap takes: 10 million messages, 64 GiB a second (beyond anything a link moves). */
const MAX_MESSAGE_RATE = 10_000_000;
const MAX_BYTE_RATE = 64 * 1024 ** 3;

/** A rate per second: a number, or a string ending in "/s" (`2000/s`, `2MiB/s`). Checks the value is > 0. */
function perSecond(example: string, read: (amount: unknown) => number | undefined, max: number) {
  return field((v) => {
    const amount = typeof v === "string" ? /^\s*(.*?)\s*\/\s*s\s*$/.exec(v)?.[1] : typeof v === "number" ? v : undefined;
    const n = amount === undefined ? undefined : read(amount);
    if (n === undefined || !Number.isFinite(n)) fail(`must be a rate per second such as ${example} (got ${quote(v)})`);
    if (n <= 0) fail(`must be > 0 (got ${quote(v)}): leave maxRate out for no cap`);
    if (n > max) fail(`must be at most ${max} a second (got ${quote(v)})`);
    return n;
  });
}

/** Messages a second: `2000/s` or 2000 (fractions allowed: `0.5/s`). */
const messageRate = perSecond('"2000/s"', (a) => (typeof a === "number" ? a : typeof a === "string" && /^\d+(\.\d+)?$/.test(a) ? Number(a) : undefined), MAX_MESSAGE_RATE);

/** Bytes a second: `2MiB/s`, `512KiB/s`, or a whole number of bytes (KiB, MiB, GiB are 1024-based, as for inFlightBytes). */
const byteRate = perSecond('"2MiB/s", "512KiB/s" or a number of bytes', (a) => {
  const n = sizeInBytes(a);
  return n !== undefined && Number.isSafeInteger(n) ? n : undefined;
}, MAX_BYTE_RATE);

/** `maxRate: { messages: 2000/s, bytes: 2MiB/s }`: either or both. */
const MaxRateSchema = obj({ messages: messageRate.optional(), bytes: byteRate.optional() }).check((ctx) => {
  // Said only of a cap with nothing else wrong (an unknown key is the likelier mistake).
  const v = ctx.value;
  if (ctx.issues.length === 0 && v.messages === undefined && v.bytes === undefined) {
    ctx.issues.push({ code: "custom", message: 'must set messages, bytes or both, e.g. { messages: "2000/s", bytes: "2MiB/s" }', input: undefined });
  }
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
  maxRate: MaxRateSchema.optional(),
});
