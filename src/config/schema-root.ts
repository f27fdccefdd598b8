/**
 * The whole config file's schema: the top-level keys, composed from the regions and links sections,
 * plus the small top-level sections (`http`, `log`, `shutdown`, `group`, `reload`), and the types of
 * its validated output (what compile.ts turns into a `RelayConfig`).
 */
import { z } from "zod";
import { boolean, duration, list, listenAddress, obj, oneOf } from "./schema-fields.js";
import { LinkSchema } from "./schema-links.js";
import { RegionsSchema } from "./schema-regions.js";

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

/** The whole file. Output: values checked and converted, optional fields still optional. */
export const ConfigSchema = obj({
  regions: RegionsSchema,
  links: list(LinkSchema, "must list at least one link"),
  http: obj({
    listen: listenAddress.optional(),
    token: z.string().min(16, { error: "must be at least 16 characters (use a random secret, e.g. from ${RELAY_HTTP_TOKEN})" }).optional(),
    protectMetrics: z.boolean().optional(),
  }).optional(),
  log: obj({ level: oneOf(LOG_LEVELS, { lowercase: true }).optional(), progressInterval: duration({ allowZero: true }).optional() }).optional(),
  shutdown: obj({ grace: duration({ allowZero: true }).optional() }).optional(),
  group: obj({
    bucket: z.string().regex(/^[-\w]+$/, { error: "must be a KV bucket name: letters, digits, - and _" }).optional(),
    lease: duration({ allowZero: false }).optional(),
    renew: duration({ allowZero: false }).optional(),
  }).optional(),
  reload: obj({ watch: boolean.optional() }).optional(),
});

export type ParsedConfig = z.output<typeof ConfigSchema>;
export type ParsedLink = ParsedConfig["links"][number];
export type ParsedRegion = ParsedConfig["regions"][string];
