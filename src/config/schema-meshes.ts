/**
 * The `meshes` section of the config schema: a set of regions and streams declared once, which
 * mesh.ts expands into one link per stream and ordered pair of regions (before the links are
 * validated). Link settings (`link`, `overrides`) are checked here with the links' own checkers.
 */
import { z } from "zod";
import { quote } from "./problems.js";
import { bucketName, LinkSchema } from "./schema-links.js";
import { expectString, fail, field, natsName, nonEmptyString, obj } from "./schema-fields.js";

export const MESH_NAME = /^[a-z0-9][a-z0-9-]*$/;

const meshName = field((v) => {
  const s = expectString(v);
  if (!MESH_NAME.test(s))
    fail(
      `invalid mesh name ${quote(s)}: use lowercase letters, digits and "-", starting with a letter or digit`,
    );
  return s;
}).meta({ valueType: "mesh name", allowed: `\`${MESH_NAME.source}\`` });

const regionRef = nonEmptyString.meta({ valueType: "region name", allowed: "a key of `regions`" });
const streamName = natsName("stream name");

/** Link keys a mesh sets for its links: all but those the mesh itself decides (name, ends, durable). */
const { name: _name, from: _from, to: _to, durable: _durable, ...LINK_SETTINGS } = LinkSchema.shape;
const { name: _n, from: _f, to: _t, ...OVERRIDE_SETTINGS } = LinkSchema.shape;

/** The keys a mesh's `link` and its overrides may set: only these are copied into generated links. */
export const MESH_LINK_KEYS: ReadonlySet<string> = new Set(Object.keys(LINK_SETTINGS));
export const OVERRIDE_LINK_KEYS: ReadonlySet<string> = new Set(Object.keys(OVERRIDE_SETTINGS));

const LinkDefaultsSchema = obj(LINK_SETTINGS);
const OverrideSchema = obj({
  from: regionRef,
  to: regionRef,
  stream: streamName.optional(),
  bucket: bucketName.optional(),
  ...OVERRIDE_SETTINGS,
});

/** Runs `schema` on the value and keeps its issues (paths relative to here), for a leaf the docs list once. */
function checkedBy<T extends z.ZodType>(schema: T, valueType: string) {
  return z
    .unknown()
    .transform((v, ctx): z.output<T> => {
      const r = schema.safeParse(v);
      if (r.success) return r.data;
      for (const iss of r.error.issues) ctx.issues.push({ ...iss, input: undefined } as never);
      return z.NEVER;
    })
    .meta({ valueType });
}

/** A stream (or bucket) name, or `{ name, in: { <region>: <name> } }` when a region names it differently. */
function meshEntry(what: "stream" | "bucket", nameField: typeof streamName) {
  const EntrySchema = obj({ name: nameField, in: z.record(nonEmptyString, nameField).optional() });
  return z
    .unknown()
    .transform((v, ctx): { name: string; in?: Record<string, string> } => {
      const r = typeof v === "string" ? nameField.safeParse(v) : EntrySchema.safeParse(v);
      if (r.success) return typeof r.data === "string" ? { name: r.data } : (r.data as { name: string; in?: Record<string, string> });
      if (typeof v !== "string" && (typeof v !== "object" || v === null || Array.isArray(v))) {
        ctx.issues.push({
          code: "custom",
          message: `must be a ${what} name or { name, in } (got ${quote(v)})`,
          input: undefined,
        });
        return z.NEVER;
      }
      for (const iss of r.error.issues) ctx.issues.push({ ...iss, input: undefined } as never);
      return z.NEVER;
    })
    .meta({ valueType: `${what} name or \`{ name, in }\`` });
}
const meshStream = meshEntry("stream", streamName);
const meshBucket = meshEntry("bucket", bucketName);

export const MeshSchema = obj({
  name: meshName.meta({
    description:
      "Unique among meshes. The first part of every generated link's name (`<mesh>_<stream>_<from>-to-<to>`).",
  }),
  regions: z.array(regionRef).min(2, { error: "a mesh needs at least two regions" }).meta({
    allowed: "at least two",
    description:
      "The regions of the mesh. Each stream is relayed from every one to every other (active-active: each region's stream is both a source and a destination; loop prevention stops the echoes).",
  }),
  streams: z.array(meshStream).min(1, { error: "must list at least one stream" }).optional().meta({
    allowed: "at least one",
    defaultText: "none; `streams` or `buckets` is required",
    description:
      'The streams to relay between the regions: a name (the same in every region), or `{ name, in: { <region>: <stream> } }` for regions that name it differently (`name` elsewhere). `name`, lowercased, is the stream\'s part of the link names, so it may hold only letters, digits, "-" and "_".',
  }),
  buckets: z.array(meshBucket).min(1, { error: "must list at least one bucket" }).optional().meta({
    allowed: "at least one",
    defaultText: "none",
    description:
      "Key-value buckets to relay between the regions as [KV links](kv.md) (last writer wins per key): a name, or `{ name, in: { <region>: <bucket> } }`, as for `streams`. A bucket's links are named like a stream's (`<mesh>_<bucket>_<from>-to-<to>`).",
  }),
  link: checkedBy(LinkDefaultsSchema, "link settings").optional().meta({
    defaultText: "each key's default",
    description:
      "Settings for every generated link: any key of [`links`](#links) but `name`, `from`, `to` and `durable`.",
  }),
  overrides: z.array(checkedBy(OverrideSchema, "`{ from, to, stream?, bucket?, <link keys> }`")).optional().meta({
    defaultText: "none",
    description:
      "Settings for the links of one pair of regions: `{ from, to, <link keys> }`, with `stream` (or `bucket`) for only that stream's (bucket's) link. Any key of [`links`](#links) but `name`, `from` and `to`; over `link`, later overrides over earlier ones.",
  }),
  exclude: z
    .array(
      obj({
        from: regionRef
          .optional()
          .meta({ defaultText: "any region", description: "The source region of the links left out." }),
        to: regionRef
          .optional()
          .meta({ defaultText: "any region", description: "The destination region of the links left out." }),
        stream: streamName.optional().meta({
          defaultText: "every stream",
          description: "The stream (its `name` in `streams`) whose links are left out.",
        }),
        bucket: bucketName.optional().meta({
          defaultText: "every bucket",
          description: "The bucket (its `name` in `buckets`) whose links are left out.",
        }),
      }),
    )
    .optional()
    .meta({
      defaultText: "none",
      description:
        "Links not generated: `{ from, to }` for one direction of a pair; leave out `from` or `to` for any region, add `stream` (or `bucket`) for only that stream's (bucket's) link.",
    }),
});

export type ParsedMesh = z.output<typeof MeshSchema>;
