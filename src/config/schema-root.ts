/**
 * The whole config file's schema: the top-level keys, composed from the regions and links sections,
 * plus the small top-level sections (`http`, `log`, `shutdown`, `group`, `reload`), and the types of
 * its validated output (what compile.ts turns into a `RelayConfig`).
 */
import { z } from "zod";
import { DEFAULTS } from "./defaults.js";
import { boolean, duration, list, listenAddress, obj, oneOf } from "./schema-fields.js";
import { LinkSchema } from "./schema-links.js";
import { MeshSchema } from "./schema-meshes.js";
import { RegionsSchema } from "./schema-regions.js";

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

/** What a section left out of the file is: each of its keys at its default. */
const EACH_KEY_DEFAULT = "each key's default";

/** The whole file. Output: values checked and converted, optional fields still optional. */
export const ConfigSchema = obj({
  regions: RegionsSchema.meta({
    description:
      "The NATS clusters (with JetStream) that links connect, by region name. See [`regions`](#regions).",
  }),
  links: list(LinkSchema, "must list at least one link").meta({
    description:
      "The links. Each copies the messages of one stream in one region to a stream in another. See [`links`](#links).",
  }),
  meshes: z.array(MeshSchema).optional().meta({
    defaultText: "none",
    description:
      "Regions and streams declared once, expanded into a link per stream and direction. See [Meshes](#meshes).",
  }),
  http: obj({
    listen: listenAddress.optional().meta({
      default: `${DEFAULTS.httpHost}:${DEFAULTS.httpPort}`,
      description:
        'Where the HTTP server (metrics, health, status) listens. 0 as the port picks a free port. An IPv6 host is bracketed: `"[::]:9464"`. The default is loopback only: `/status` shows the topology and errors, so bind the address Prometheus and the probes use explicitly (`0.0.0.0:9464` in a container, `${POD_IP}:9464` on Kubernetes).',
    }),
    token: z
      .string()
      .min(16, {
        error: "must be at least 16 characters (use a random secret, e.g. from ${RELAY_HTTP_TOKEN})",
      })
      .optional()
      .meta({
        secret: true,
        description:
          "Use `${RELAY_HTTP_TOKEN}`. `/status` then answers only requests with `Authorization: Bearer <token>` (401 otherwise); `jetstream-relay status --token` or `RELAY_HTTP_TOKEN` sends it. `/healthz` and `/readyz` stay open for probes. Redacted like every secret.",
      }),
    protectMetrics: z.boolean().optional().meta({
      default: false,
      description:
        "With `http.token`, `/metrics` needs the token too (configure Prometheus' `authorization` for the scrape).",
    }),
  })
    .optional()
    .meta({
      defaultText: EACH_KEY_DEFAULT,
      description: "The HTTP server. See [`http`, `log`, `shutdown`](#http-log-shutdown).",
    }),
  log: obj({
    level: oneOf(LOG_LEVELS, { lowercase: true })
      .optional()
      .meta({ default: DEFAULTS.logLevel, description: "The lowest level logged." }),
    progressInterval: duration({ allowZero: true }).optional().meta({
      default: DEFAULTS.progressLogMs,
      description:
        "How often a link that is catching up (or resyncing) logs its progress: messages behind, age of the oldest, how fast the backlog shrinks and an ETA. `0s` turns these lines off.",
    }),
  })
    .optional()
    .meta({
      defaultText: EACH_KEY_DEFAULT,
      description: "Logging. See [`http`, `log`, `shutdown`](#http-log-shutdown).",
    }),
  shutdown: obj({
    grace: duration({ allowZero: true }).optional().meta({
      default: DEFAULTS.shutdownGraceMs,
      description:
        "On SIGTERM/SIGINT, how long the relay waits for in-flight messages to finish before it exits anyway. `0s` is allowed.",
    }),
  })
    .optional()
    .meta({
      defaultText: EACH_KEY_DEFAULT,
      description: "Stopping. See [`http`, `log`, `shutdown`](#http-log-shutdown).",
    }),
  group: obj({
    bucket: z
      .string()
      .regex(/^[-\w]+$/, { error: "must be a KV bucket name: letters, digits, - and _" })
      .optional()
      .meta({
        valueType: "KV bucket name",
        default: DEFAULTS.leaseBucket,
        description:
          "The KV bucket holding the leases, in each destination region. Letters, digits, `-` and `_`. Created when missing (replicas min(3, cluster size)); an existing bucket is used as it is. The relay's user needs to create, read and write it (the stream `KV_<bucket>`, subjects `$KV.<bucket>.>`).",
      }),
    lease: duration({ allowZero: false }).optional().meta({
      default: DEFAULTS.leaseMs,
      description:
        "How long a lease lasts without a renewal. Every lease write stores it (with `renew`), and a relay takes a link over when its lease has not changed for the duration **stored in it** (this relay's own for a value without one) by the relay's own monotonic clock (the time stored in the key is never read); the owner stops working the link on its own before that. Also how long a member whose key stopped changing still counts as live (each member's own, stored in its key). Members may run different values for a while (a rolling restart that changes it): each lease is still judged by its owner's value; `/status` marks the members whose `lease`/`renew` differ (`settingsDiffer`), `relay_group_settings_mismatch` counts them.",
    }),
    renew: duration({ allowZero: false }).optional().meta({
      default: DEFAULTS.leaseRenewMs,
      description:
        "How often the owner renews its leases, how often the other relays read them, and how often every member writes its member key and reads the others'. At most half of `group.lease`, so a lease outlives one failed renewal.",
    }),
  })
    .optional()
    .meta({
      defaultText: EACH_KEY_DEFAULT,
      description: "The region's group of relays and their leases. See [`group`](#group).",
    }),
  reload: obj({
    watch: boolean.optional().meta({
      default: false,
      description:
        "Also reload when the file changes. The file's directory is watched (an editor that saves by renaming, a Kubernetes ConfigMap volume that swaps its `..data` symlink), events are debounced for 300 ms, and the file is reloaded only when its content differs from what was last read. Turning it on or off in the file takes effect with that reload.",
    }),
  })
    .optional()
    .meta({
      defaultText: EACH_KEY_DEFAULT,
      description: "Reloading the file while the relay runs. See [`reload`](#reload).",
    }),
});

export type ParsedConfig = z.output<typeof ConfigSchema>;
export type ParsedLink = ParsedConfig["links"][number];
export type ParsedRegion = ParsedConfig["regions"][string];
