/**
 * Pass 2 of validation: rules that span fields (region references, duplicate names and durables,
 * "exactly one of" for auth and guard stores, partitions, lease timing, batch vs. window), run on
 * the raw tree and tolerant of anything pass 1 rejects.
 */
import { DEFAULTS, defaultDurableName } from "./defaults.js";
import { parseDuration } from "./durations.js";
import { kvChecks } from "./kv-checks.js";
import { orderChecks } from "./order-checks.js";
import { quote } from "./problems.js";
import type { ConfigPath, ConfigProblem } from "./problems.js";

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function asString(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function has(o: Record<string, unknown>, key: string): boolean {
  return o[key] !== undefined;
}

function listWords(words: readonly string[]): string {
  if (words.length <= 1) return words.join("");
  return `${words.slice(0, -1).join(", ")} and ${words[words.length - 1] ?? ""}`;
}

function checkTls(tls: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const t = asRecord(tls);
  if (t === undefined) return;
  if (has(t, "cert") && !has(t, "key"))
    out.push({ path, message: "cert requires key (give both, or neither)" });
  if (has(t, "key") && !has(t, "cert"))
    out.push({ path, message: "key requires cert (give both, or neither)" });
}

function checkAuth(auth: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const a = asRecord(auth);
  if (a === undefined) return;
  const forms: string[] = [];
  if (has(a, "token")) forms.push("token");
  if (has(a, "user") || has(a, "password")) forms.push("user");
  if (has(a, "creds")) forms.push("creds");
  if (has(a, "nkey")) forms.push("nkey");
  if (forms.length !== 1) {
    out.push({
      path,
      message:
        "give exactly one of token, user + password, creds or nkey " +
        `(found ${forms.length === 0 ? "none" : listWords(forms)})`,
    });
    return;
  }
  if (has(a, "user") && !has(a, "password")) out.push({ path, message: "user requires password" });
  if (has(a, "password") && !has(a, "user")) out.push({ path, message: "password requires user" });
}

function checkGuard(guard: unknown, path: ConfigPath, out: ConfigProblem[]): void {
  const g = asRecord(guard);
  if (g === undefined) return;
  const stores: string[] = [];
  if (has(g, "redis")) stores.push("redis");
  if (g.memory === true || g.memory === "true") stores.push("memory");
  if (stores.length !== 1) {
    out.push({
      path,
      message: `give exactly one store: redis or memory: true (found ${stores.length === 0 ? "none" : "both"})`,
    });
  }
  const redis = asRecord(g.redis);
  if (redis !== undefined) {
    const rpath = [...path, "redis"];
    const kinds = ["url", "sentinel", "cluster"].filter((k) => has(redis, k));
    if (kinds.length !== 1) {
      out.push({
        path: rpath,
        message: `give exactly one of url, sentinel or cluster (found ${kinds.length === 0 ? "none" : listWords(kinds)})`,
      });
    }
    const url = asString(redis.url);
    if (url !== undefined && has(redis, "password") && /^rediss?:\/\/[^/]*:[^/]*@/.test(url)) {
      out.push({ path: rpath, message: "give the password either in url or in password, not both" });
    }
    checkTls(redis.tls, [...rpath, "tls"], out);
  }
  const versions = asRecord(g.versions);
  if (versions !== undefined) {
    const vpath = [...path, "versions"];
    if (has(versions, "entity") && !has(versions, "version")) {
      out.push({ path: vpath, message: "entity requires version (give both, or neither)" });
    }
    if (has(versions, "version") && !has(versions, "entity")) {
      out.push({ path: vpath, message: "version requires entity (give both, or neither)" });
    }
  }
}

function intOrUndefined(v: unknown): number | undefined {
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "string" && /^\s*\d+\s*$/.test(v)) return Number(v.trim());
  return undefined;
}

/**
 * A partitioned link needs a source filter with a `*` at the partition token: each partition's filter
 * is that filter with the token fixed to the partition number.
 */
function checkPartitions(link: Record<string, unknown>, from: Record<string, unknown> | undefined, i: number, out: ConfigProblem[]): void {
  const partitions = asRecord(link.partitions);
  if (partitions === undefined) return;
  const token = intOrUndefined(partitions.token);
  const filter = asString(from?.filter);
  if (filter === undefined) {
    out.push({
      path: ["links", i, "partitions"],
      message: "needs from.filter with a * at the partition token (e.g. filter: orders.*.> with token: 2)",
    });
    return;
  }
  if (token === undefined) return;
  const tokens = filter.split(".");
  if (tokens[token - 1] !== "*" || tokens.slice(0, token - 1).includes(">")) {
    out.push({
      path: ["links", i, "partitions", "token"],
      message: `from.filter ${quote(filter)} must have * as token ${token} (the partition number)`,
    });
  }
}

/** A lease must outlive at least one failed renewal: renew at most every half lease. */
function checkGroup(group: Record<string, unknown> | undefined, out: ConfigProblem[]): void {
  if (group === undefined) return;
  const ms = (v: unknown, fallback: number) => {
    if (v === undefined) return fallback;
    try {
      return parseDuration(v);
    } catch {
      return undefined; // reported by the schema
    }
  };
  const lease = ms(group.lease, DEFAULTS.leaseMs);
  const renew = ms(group.renew, DEFAULTS.leaseRenewMs);
  if (lease !== undefined && renew !== undefined && renew * 2 > lease) {
    out.push({ path: ["group", "renew"], message: `must be at most half of group.lease (${lease} ms): a lease must outlive one failed renewal` });
  }
}

/** Rules that span fields. Exported for tests; `validateConfig` runs it. */
export function crossChecks(tree: unknown): ConfigProblem[] {
  const out: ConfigProblem[] = [];
  const root = asRecord(tree);
  if (root === undefined) return out;

  checkGroup(asRecord(root.group), out);
  const regions = asRecord(root.regions);
  const known = regions === undefined ? undefined : Object.keys(regions);
  if (regions !== undefined) {
    if (known?.length === 0) out.push({ path: ["regions"], message: "must define at least one region" });
    for (const [name, region] of Object.entries(regions)) {
      const r = asRecord(region);
      if (r === undefined) continue;
      checkAuth(r.auth, ["regions", name, "auth"], out);
      checkTls(r.tls, ["regions", name, "tls"], out);
    }
  }

  if (!Array.isArray(root.links)) return out;
  const linkNames = new Map<string, number>();
  const durables = new Map<string, number>();
  root.links.forEach((raw, i) => {
    const link = asRecord(raw);
    if (link === undefined) return;
    const name = asString(link.name);
    let duplicateName = false;
    if (name !== undefined) {
      const first = linkNames.get(name);
      if (first !== undefined) {
        duplicateName = true;
        out.push({
          path: ["links", i, "name"],
          message: `duplicate link name ${quote(name)} (also links[${first}])`,
        });
      } else {
        linkNames.set(name, i);
      }
    }

    const from = asRecord(link.from);
    const to = asRecord(link.to);
    const fromRegion = asString(from?.region);
    const toRegion = asString(to?.region);
    if (known !== undefined) {
      for (const [side, region] of [
        ["from", fromRegion],
        ["to", toRegion],
      ] as const) {
        if (region !== undefined && !known.includes(region)) {
          out.push({
            path: ["links", i, side, "region"],
            message: `unknown region ${quote(region)} (known: ${known.join(", ") || "none"})`,
          });
        }
      }
    }
    if (fromRegion !== undefined && fromRegion === toRegion) {
      out.push({
        path: ["links", i, "to", "region"],
        message: `must differ from from.region (both are ${quote(fromRegion)})`,
      });
    }

    // Two links reading one source stream with one durable would share (and fight over) a consumer.
    const bucket = asString(from?.bucket);
    const stream = asString(from?.stream) ?? (bucket === undefined ? undefined : `KV_${bucket}`);
    const explicitDurable = asString(link.durable);
    const durable = explicitDurable ?? (name === undefined ? undefined : defaultDurableName(name));
    if (fromRegion !== undefined && stream !== undefined && durable !== undefined) {
      const key = JSON.stringify([fromRegion, stream, durable]);
      const first = durables.get(key);
      if (first === undefined) {
        durables.set(key, i);
      } else if (explicitDurable !== undefined || !duplicateName) {
        out.push({
          path: ["links", i, "durable"],
          message:
            `durable ${quote(durable)} is already used by links[${first}] on the same source stream ` +
            `(stream ${stream} in ${fromRegion})${explicitDurable === undefined ? "; set a different durable" : ""}`,
        });
      }
    }

    checkPartitions(link, from, i, out);

    const batch = link.batchSize === undefined ? DEFAULTS.batchSize : intOrUndefined(link.batchSize);
    const defaultInFlight = link.guard === undefined ? DEFAULTS.inFlight : DEFAULTS.guardedInFlight;
    const inFlight = link.inFlight === undefined ? defaultInFlight : intOrUndefined(link.inFlight);
    if (
      batch !== undefined &&
      inFlight !== undefined &&
      batch > inFlight &&
      batch <= 10_000 &&
      inFlight >= 1
    ) {
      out.push({
        path: ["links", i, "batchSize"],
        message: `must not be larger than inFlight (${inFlight})`,
      });
    }

    checkGuard(link.guard, ["links", i, "guard"], out);
  });
  out.push(...orderChecks(root.links));
  out.push(...kvChecks(root.links));
  return out;
}
