/**
 * Mesh expansion: each entry of `meshes` becomes ordinary links, one per stream and ordered pair of its
 * regions, appended to `links` before the links are validated. From there on a generated link is a link
 * like any other (cross checks, reload diff, leases, durables, markers).
 *
 * A generated link's name is `<mesh>_<stream>_<from>-to-<to>` (the stream's `name` lowercased): it
 * depends only on the pair and the stream, never on the order or number of the mesh's regions, so its
 * durable, lease key and markers stay the same when a region is added or removed.
 *
 * Works on the raw tree (before or after `${VAR}` interpolation), written defensively against a tree
 * the schema rejects (it reports those problems; here they are skipped).
 */
import type { ConfigPath, ConfigProblem } from "./problems.js";
import { quote } from "./problems.js";
import { MESH_LINK_KEYS, MESH_NAME, OVERRIDE_LINK_KEYS } from "./schema-meshes.js";

const LINK_NAME_PART = /^[a-z0-9_-]+$/;

/** Where a generated link came from, to put its problems at the mesh's path. */
export interface GeneratedLink {
  /** Index in the expanded `links`. */
  readonly index: number;
  readonly name: string;
  readonly mesh: number;
  readonly meshName: string;
  /** Index in the mesh's `streams` (or `buckets`, by `list`). */
  readonly stream: number;
  /** Where the link's stream or bucket is listed. */
  readonly list: "streams" | "buckets";
  readonly from: string;
  readonly to: string;
  /** The link keys the mesh's `link` set. */
  readonly defaultKeys: ReadonlySet<string>;
  /** For each key an override set: the index of the last override that set it. */
  readonly overrideKeys: ReadonlyMap<string, number>;
  /** The link as written in a `links` section (values as in the file). */
  readonly raw: Readonly<Record<string, unknown>>;
}

export interface MeshExpansion {
  /** The tree with the generated links appended to `links` (the same tree when there are no meshes). */
  readonly tree: unknown;
  /** Generated links, in order. */
  readonly links: readonly GeneratedLink[];
  /** Per mesh (by index): its name and how many links it generated. */
  readonly meshes: readonly { readonly name: string; readonly links: number }[];
  /** Problems of the meshes themselves (unknown regions, name collisions...). */
  readonly problems: readonly ConfigProblem[];
}

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

const asString = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

interface MeshStream {
  readonly label: string;
  readonly in: Readonly<Record<string, unknown>>;
  /** A stream, or a key-value bucket (its links are KV links, docs/kv.md). */
  readonly kind: "stream" | "bucket";
  /** Its index in its list (`streams` or `buckets`). */
  readonly index: number;
}

function streamOf(raw: unknown, kind: "stream" | "bucket", index: number): MeshStream | undefined {
  const s = asString(raw);
  if (s !== undefined) return { label: s, in: {}, kind, index };
  const r = asRecord(raw);
  const name = asString(r?.name);
  if (name === undefined) return undefined;
  return { label: name, in: asRecord(r?.in) ?? {}, kind, index };
}

const LIST = { stream: "streams", bucket: "buckets" } as const;

/** The name of the link a mesh generates for `stream` from `from` to `to`. */
export function meshLinkName(mesh: string, stream: string, from: string, to: string): string {
  return `${mesh}_${stream.toLowerCase()}_${from}-to-${to}`;
}

/**
 * Pair (and stream or bucket) filters of `overrides` / `exclude`: an absent key matches any; `stream`
 * matches only a stream's links, `bucket` only a bucket's.
 */
function matches(entry: Record<string, unknown>, from: string, to: string, stream: MeshStream): boolean {
  const f = asString(entry.from);
  const t = asString(entry.to);
  const s = asString(entry[stream.kind]);
  const other = asString(entry[stream.kind === "stream" ? "bucket" : "stream"]);
  return (
    (f === undefined || f === from) &&
    (t === undefined || t === to) &&
    (s === undefined || s === stream.label) &&
    other === undefined
  );
}

/** Expands `meshes` (see the file comment). Never throws. */
export function expandMeshes(tree: unknown): MeshExpansion {
  const root = asRecord(tree);
  if (root === undefined || !Array.isArray(root.meshes)) return { tree, links: [], meshes: [], problems: [] };
  const problems: ConfigProblem[] = [];
  const handWritten = Array.isArray(root.links) ? root.links : [];
  const taken = new Map<string, string>();
  handWritten.forEach((l, i) => {
    const name = asString(asRecord(l)?.name);
    if (name !== undefined && !taken.has(name)) taken.set(name, `links[${i}]`);
  });
  const known = asRecord(root.regions) === undefined ? undefined : Object.keys(asRecord(root.regions) ?? {});
  const generated: GeneratedLink[] = [];
  const meshes: { name: string; links: number }[] = [];
  const meshNames = new Set<string>();

  root.meshes.forEach((rawMesh, m) => {
    const mesh = asRecord(rawMesh);
    const name = asString(mesh?.name);
    meshes.push({ name: name ?? `meshes[${m}]`, links: 0 });
    if (mesh === undefined || name === undefined || !MESH_NAME.test(name)) return;
    const at = (...path: (string | number)[]): ConfigPath => ["meshes", m, ...path];
    if (meshNames.has(name)) {
      problems.push({ path: at("name"), message: `duplicate mesh name ${quote(name)}` });
      return;
    }
    meshNames.add(name);

    const regions: string[] = [];
    (Array.isArray(mesh.regions) ? mesh.regions : []).forEach((r, i) => {
      if (typeof r !== "string") return;
      if (known !== undefined && !known.includes(r)) {
        problems.push({
          path: at("regions", i),
          message: `unknown region ${quote(r)} (known: ${known.join(", ")})`,
        });
      } else if (regions.includes(r)) {
        problems.push({ path: at("regions", i), message: `region ${quote(r)} is listed twice` });
      } else regions.push(r);
    });

    const listed = (kind: "stream" | "bucket"): (MeshStream | undefined)[] => {
      const raw = mesh[LIST[kind]];
      return (Array.isArray(raw) ? raw : []).map((r, i) => streamOf(r, kind, i));
    };
    if (mesh.streams === undefined && mesh.buckets === undefined) {
      problems.push({ path: at("streams"), message: "is required (or buckets)" });
    }
    const streams: (MeshStream | undefined)[] = [...listed("stream"), ...listed("bucket")];
    const labels = new Map<string, string>();
    streams.forEach((s, i) => {
      if (s === undefined) return;
      const list = LIST[s.kind];
      const part = s.label.toLowerCase();
      if (/[\s.*>/\\]/.test(part)) {
        streams[i] = undefined; // not a stream name at all: the schema says so
      } else if (!LINK_NAME_PART.test(part)) {
        problems.push({
          path: at(list, s.index),
          message: `${s.kind} ${quote(s.label)} cannot be part of a link name (letters, digits, "-" and "_"): write it as { name: <label>, in: { <region>: ${s.label}, ... } }`,
        });
        streams[i] = undefined;
      } else if (labels.has(part)) {
        problems.push({
          path: at(list, s.index),
          message: `${s.kind} ${quote(s.label)} is listed twice (also ${labels.get(part)})`,
        });
        streams[i] = undefined;
      } else labels.set(part, `${list}[${s.index}]`);
      for (const r of Object.keys(s.in)) {
        if (!regions.includes(r) && !(Array.isArray(mesh.regions) && mesh.regions.includes(r))) {
          problems.push({
            path: at(list, s.index, "in", r),
            message: `region ${quote(r)} is not in this mesh (regions: ${regions.join(", ")})`,
          });
        }
      }
    });

    const pairChecks = (key: "overrides" | "exclude"): Record<string, unknown>[] =>
      (Array.isArray(mesh[key]) ? (mesh[key] as unknown[]) : []).map((raw, j) => {
        const entry = asRecord(raw) ?? {};
        for (const side of ["from", "to"] as const) {
          const r = asString(entry[side]);
          if (r !== undefined && !regions.includes(r)) {
            problems.push({
              path: at(key, j, side),
              message: `region ${quote(r)} is not in this mesh (regions: ${regions.join(", ")})`,
            });
          }
        }
        for (const kind of ["stream", "bucket"] as const) {
          const s = asString(entry[kind]);
          if (s !== undefined && !streams.some((x) => x?.kind === kind && x.label === s)) {
            problems.push({
              path: at(key, j, kind),
              message: `${kind} ${quote(s)} is not in this mesh's ${LIST[kind]}`,
            });
          }
        }
        if (key === "overrides" && asString(entry.from) !== undefined && entry.from === entry.to) {
          problems.push({
            path: at(key, j),
            message: "from and to are the same region: a mesh has no such link",
          });
        }
        return entry;
      });
    const overrides = pairChecks("overrides");
    // An entry with none of from, to and stream (misspelt keys: the schema says so) excludes nothing.
    const excludes = pairChecks("exclude").filter((e) =>
      ["from", "to", "stream", "bucket"].some((k) => e[k] !== undefined),
    );
    // Only the keys a mesh may set (the schema reports the others at the mesh).
    const defaults = Object.fromEntries(
      Object.entries(asRecord(mesh.link) ?? {}).filter(([k]) => MESH_LINK_KEYS.has(k)),
    );

    streams.forEach((stream) => {
      if (stream === undefined) return;
      for (const from of regions) {
        for (const to of regions) {
          if (from === to || excludes.some((e) => matches(e, from, to, stream))) continue;
          const linkName = meshLinkName(name, stream.label, from, to);
          const clash = taken.get(linkName);
          if (clash !== undefined) {
            problems.push({
              path: at(LIST[stream.kind], stream.index),
              message: `generated link ${quote(linkName)} has the same name as ${clash}: rename one, or exclude the pair`,
            });
            continue;
          }
          taken.set(linkName, `the link of meshes[${m}] (${name})`);
          const raw: Record<string, unknown> = { name: linkName };
          const overrideKeys = new Map<string, number>();
          const settings: Record<string, unknown> = structuredClone(defaults);
          overrides.forEach((o, j) => {
            if (
              asString(o.from) === undefined ||
              asString(o.to) === undefined ||
              !matches(o, from, to, stream)
            )
              return;
            for (const [k, v] of Object.entries(o)) {
              if (!OVERRIDE_LINK_KEYS.has(k)) continue;
              settings[k] = structuredClone(v);
              overrideKeys.set(k, j);
            }
          });
          raw.from = { region: from, [stream.kind]: stream.in[from] ?? stream.label };
          raw.to = { region: to, [stream.kind]: stream.in[to] ?? stream.label };
          Object.assign(raw, settings);
          generated.push({
            index: handWritten.length + generated.length,
            name: linkName,
            mesh: m,
            meshName: name,
            stream: stream.index,
            list: LIST[stream.kind],
            from,
            to,
            defaultKeys: new Set(Object.keys(defaults)),
            overrideKeys,
            raw,
          });
          const entry = meshes[m];
          if (entry) entry.links++;
        }
      }
    });
  });

  if (root.links !== undefined && !Array.isArray(root.links)) return { tree, links: [], meshes, problems };
  const expanded = { ...root, links: [...handWritten, ...generated.map((g) => g.raw)] };
  return { tree: expanded, links: generated, meshes, problems };
}

/**
 * A problem found in the expanded tree, put where the user wrote it: a generated link's problem at its
 * mesh (the key's `link` or override entry, else the stream or the mesh), with the generated link's name
 * in `link` (`groupMeshProblems` writes it into the message).
 * `fromSchema`: a problem of a key's value the mesh's own schema reports too (dropped, as a duplicate).
 */
export function placeProblem(
  p: ConfigProblem,
  expansion: MeshExpansion,
  fromSchema: boolean,
): (ConfigProblem & { readonly link?: string }) | undefined {
  const [section, index, key, ...rest] = p.path;
  if (section !== "links" || typeof index !== "number") return p;
  const g = expansion.links.find((l) => l.index === index);
  if (g === undefined) return p;
  const meshPath: (string | number)[] = ["meshes", g.mesh];
  const link = g.name;
  // The generated links a problem concerns are named once, before it (groupMeshProblems).
  const message = p.message.replace(`link ${quote(link)}`, "the link");
  if (typeof key === "string") {
    const override = g.overrideKeys.get(key);
    if (override !== undefined) {
      return fromSchema
        ? undefined
        : { path: [...meshPath, "overrides", override, key, ...rest], message, link };
    }
    if (g.defaultKeys.has(key))
      return fromSchema ? undefined : { path: [...meshPath, "link", key, ...rest], message, link };
    if ((key === "from" || key === "to") && rest[0] === "region")
      return { path: [...meshPath, "regions"], message, link };
    if (key === "from" || key === "to" || key === "name")
      return { path: [...meshPath, g.list, g.stream], message, link };
  }
  return { path: meshPath, message, link };
}

/**
 * One line per place and problem: the generated links that share it are named in it (the first few),
 * so a mistake in a mesh's `link` does not print once per link.
 */
export function groupMeshProblems(
  placed: readonly (ConfigProblem & { readonly link?: string })[],
): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  const groups = new Map<string, { path: ConfigPath; message: string; links: string[] }>();
  for (const p of placed) {
    if (p.link === undefined) {
      out.push({ path: p.path, message: p.message });
      continue;
    }
    const key = JSON.stringify([p.path, p.message]);
    const group = groups.get(key);
    if (group) group.links.push(p.link);
    else {
      const created = { path: p.path, message: p.message, links: [p.link] };
      groups.set(key, created);
      out.push(created);
    }
  }
  return out.map((p) => {
    if (!("links" in p)) return p;
    const links = p.links as string[];
    const shown = links.slice(0, 3).map(quote).join(", ");
    const more = links.length > 3 ? ` and ${links.length - 3} more` : "";
    const what = links.length === 1 ? `generated link ${shown}` : `generated links ${shown}${more}`;
    return { path: p.path, message: `${what}: ${p.message}` };
  });
}
