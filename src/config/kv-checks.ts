/**
 * A KV link (`from.bucket` / `to.bucket`, docs/kv.md) relays a key-value bucket's stream and converges
 * by last writer wins on the write's KV version. What the config alone shows is checked here: each end
 * names exactly one of `stream` and `bucket`, both ends are buckets or neither, and the settings the KV
 * version supersedes or that cannot judge a bucket are refused (`to.order: strict`, `guard.versions`,
 * `to.subject`, `audit.enabled: true`, an `onGap` other than `continue`).
 */
import { quote } from "./problems.js";
import type { ConfigProblem } from "./problems.js";

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/** Problems with KV links that the config alone shows. Run by `crossChecks`. */
export function kvChecks(links: readonly unknown[]): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  links.forEach((raw, i) => {
    const link = asRecord(raw);
    if (link === undefined) return;
    const named = typeof link.name === "string" ? `link ${quote(link.name)}` : `links[${i}]`;
    const from = asRecord(link.from) ?? {};
    const to = asRecord(link.to) ?? {};
    for (const [side, end] of [["from", from], ["to", to]] as const) {
      if (end.stream !== undefined && end.bucket !== undefined) {
        out.push({ path: ["links", i, side, "bucket"], message: `${named}: give exactly one of ${side}.stream and ${side}.bucket (a bucket's stream is KV_<bucket>)` });
      } else if (end.stream === undefined && end.bucket === undefined && (side === "from" ? link.from : link.to) !== undefined) {
        // As the schema said it before buckets: most links are streams.
        out.push({ path: ["links", i, side, "stream"], message: "is required" });
      }
    }
    const fromBucket = from.bucket !== undefined;
    const toBucket = to.bucket !== undefined;
    if (fromBucket !== toBucket) {
      const [has, lacks] = fromBucket ? ["from", "to"] : ["to", "from"];
      out.push({ path: ["links", i, lacks, "bucket"], message: `${named}: ${has}.bucket needs ${lacks}.bucket (a KV link relays a bucket into a bucket; both ends are buckets or neither)` });
      return;
    }
    if (!fromBucket) return;
    const refuse = (path: (string | number)[], why: string) => out.push({ path: ["links", i, ...path], message: `${named} is a KV link: ${why}` });
    if (to.order === "strict") refuse(["to", "order"], "to.order: strict is not for a bucket (every write is checked against its key's last sequence already, and the KV version decides); remove to.order");
    if (to.subject !== undefined) refuse(["to", "subject"], "to.subject is not for a bucket ($KV.<from.bucket>.<key> is written as $KV.<to.bucket>.<key>); remove it");
    if (link.onGap !== undefined && link.onGap !== "continue") {
      refuse(["onGap"], "a bucket drops a key's older writes by itself (history, a purge, its TTL), and its state is each key's latest write: a KV link has no gaps, and onGap does not apply; remove it");
    }
    const guard = asRecord(link.guard);
    if (guard?.versions !== undefined) refuse(["guard", "versions"], "guard.versions is superseded by the KV version (last writer wins per key); remove it");
    const audit = asRecord(link.audit);
    if (audit?.enabled === true || audit?.enabled === "true") {
      refuse(["audit", "enabled"], "the continuous audit judges every source message, and a bucket keeps only the winning writes: check a KV link with `jetstream-relay verify --kv`; set audit.enabled: false or remove it");
    }
  });
  return out;
}
