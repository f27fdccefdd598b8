/**
 * Every key of the config schema, read from the schema itself: its path (`links[].to.stream`), its type
 * and allowed values (set by the field builders in src/config/schema-fields.ts, or read from a plain zod
 * string's checks), whether it is required, its default and its description (each key's `.meta()`).
 */
import { z } from "zod";
import { formatDuration } from "../../src/config/durations.js";
import { formatSize } from "../../src/config/schema-fields.js";

type Schema = z.core.$ZodType;

export interface ConfigKey {
  /** `links[].guard.versions.entity`: map keys joined by `.`, a list's items as `[]`, a record's as `<name>`. */
  readonly path: string;
  /** Markdown. */
  readonly valueType: string;
  /** Markdown; "" when the type says it all. */
  readonly allowed: string;
  /** Required where its parent is given. */
  readonly required: boolean;
  /** The nearest optional mapping it is in (`links[].partitions`), if any: required only with that. */
  readonly within: string | undefined;
  /** Markdown; "" for none. */
  readonly defaultText: string;
  /** The default as a value (ms for a duration, bytes for a size), when it is one value. */
  readonly defaultValue: string | number | boolean | undefined;
  /** Markdown; undefined when the schema has none (docs-drift.test.ts fails then). */
  readonly description: string | undefined;
  readonly secret: boolean;
}

function metaOf(schema: Schema): z.GlobalMeta {
  return z.globalRegistry.get(schema) ?? {};
}

function code(text: string): string {
  return `\`${text}\``;
}

function defaultOf(meta: z.GlobalMeta): string {
  if (meta.defaultText !== undefined) return meta.defaultText;
  const d = meta.default;
  if (d === undefined) return "";
  if (typeof d === "number" && meta.format === "duration") return code(formatDuration(d));
  if (typeof d === "number" && meta.format === "size") return code(formatSize(d));
  return code(String(d));
}

/** What a plain zod leaf (not one of the builders) allows: a string's length and pattern. */
function nativeLeaf(schema: Schema): { valueType: string; allowed: string } {
  const json = z.toJSONSchema(schema, { unrepresentable: "any" }) as {
    type?: string;
    minLength?: number;
    pattern?: string;
  };
  const allowed = [
    json.minLength === undefined ? "" : `at least ${json.minLength} characters`,
    json.pattern === undefined ? "" : code(json.pattern),
  ].filter((s) => s !== "");
  return { valueType: json.type ?? "any", allowed: allowed.join("; ") };
}

function join(...parts: (string | undefined)[]): string {
  return parts.filter((p): p is string => p !== undefined && p !== "").join("; ");
}

/** The keys of the schema in document order, parents before their keys. */
export function configKeys(root: Schema): ConfigKey[] {
  const keys: ConfigKey[] = [];

  const shapeOf = (schema: Schema): Record<string, Schema> =>
    (schema as z.core.$ZodObject)._zod.def.shape as Record<string, Schema>;

  const visitShape = (schema: Schema, prefix: string, within: string | undefined): void => {
    for (const [name, child] of Object.entries(shapeOf(schema)))
      visit(child, prefix === "" ? name : `${prefix}.${name}`, within);
  };

  const visit = (outer: Schema, path: string, within: string | undefined): void => {
    // Wrappers first: `.optional()` makes a key optional, and metadata given on the outside wins.
    let schema = outer;
    let meta: z.GlobalMeta = {};
    let required = true;
    for (;;) {
      meta = { ...metaOf(schema), ...meta };
      const def = schema._zod.def;
      if (def.type !== "optional") break;
      required = false;
      schema = (def as z.core.$ZodOptionalDef).innerType;
    }
    const def = schema._zod.def;
    const key = (valueType: string, allowed: string): void => {
      keys.push({
        path,
        valueType: meta.valueType ?? valueType,
        allowed: meta.allowed ?? allowed,
        required,
        within,
        defaultText: defaultOf(meta),
        defaultValue: meta.default,
        description: meta.description,
        secret: meta.secret === true,
      });
    };
    if (def.type === "object") {
      key("mapping", "");
      visitShape(schema, path, required ? within : path);
    } else if (def.type === "record") {
      const rec = def as z.core.$ZodRecordDef;
      const names = nativeLeaf(rec.keyType).allowed;
      key("mapping", names === "" ? "" : `names: ${names}`);
      visitShape(rec.valueType, `${path}.<name>`, within);
    } else if (def.type === "array") {
      const element = (def as z.core.$ZodArrayDef).element;
      if (element._zod.def.type === "object") {
        key("list of mappings", "");
        visitShape(element, `${path}[]`, within);
      } else {
        const em = metaOf(element);
        meta = { ...meta, allowed: join(meta.allowed, em.allowed) };
        key(`list of ${em.valueType ?? nativeLeaf(element).valueType}`, "");
      }
    } else if (def.type === "pipe") {
      key("any", "");
    } else {
      const leaf = nativeLeaf(schema);
      key(leaf.valueType, leaf.allowed);
    }
  };

  visitShape(root, "", undefined);
  return keys;
}
