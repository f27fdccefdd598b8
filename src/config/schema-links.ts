/**
 * The `links` section of the config schema: one entry per link (name, source, destination, flow
 * control, headers, bad-message and gap policies, partitions), with its guard from schema-guard.ts.
 */
import { z } from "zod";
import { quote } from "./problems.js";
import { GuardSchema } from "./schema-guard.js";
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
});
