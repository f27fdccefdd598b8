import { ErrorCodes, RelayError } from "../errors.js";
import type { RelayStatus } from "../relay/relay.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, plural, requireString } from "./args.js";

export const statusSpec: CommandSpec = {
  name: "status",
  summary: "print the link status of a running relay as a table",
  usage: "jetstream-relay status --url http://HOST:9464 [--json] [--token TOKEN]",
  options: {
    url: { type: "string", short: "u", description: "the relay's HTTP address" },
    token: { type: "string", description: "the relay's http.token, when /status needs one (or env RELAY_HTTP_TOKEN)" },
    json: { type: "boolean", description: "print the raw /status JSON" },
  },
};

export async function statusCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(statusSpec, argv);
  if (values.help) {
    console.log(helpText(statusSpec));
    return 0;
  }
  const base = relayUrl(requireString(statusSpec, values, "url"));
  let status: RelayStatus;
  try {
    const token = typeof values.token === "string" ? values.token : process.env["RELAY_HTTP_TOKEN"];
    const res = await fetch(`${base}/status`, { signal: AbortSignal.timeout(5_000), ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}) });
    if (res.status === 401) throw new Error(token ? "the token was refused (401)" : "it needs a token (401): pass --token or set RELAY_HTTP_TOKEN");
    if (!res.ok) throw new Error(`it answered HTTP ${res.status}`);
    status = (await res.json()) as RelayStatus;
  } catch (err) {
    throw new RelayError(ErrorCodes.RELAY_UNREACHABLE, `cannot read ${base}/status: ${describeFetchError(err)}`, { cause: err });
  }
  if (values.json) {
    console.log(JSON.stringify(status, null, 2));
    return 0;
  }
  console.log(`relay region ${status.region}, started ${status.startedAt}${configHeader(status)}`);
  console.log(formatTable(status));
  const errors = formatErrors(status, process.stdout.columns || 100);
  if (errors) console.log(`\n${errors}`);
  const pauses = formatPauses(status);
  if (pauses) console.log(`\n${pauses}`);
  const audits = formatAudits(status);
  if (audits) console.log(`\n${audits}`);
  if (status.group) console.log(`\n${formatGroup(status)}`);
  // As /readyz: a standby link is healthy (another relay of the group owns it).
  // A link an operator paused on purpose is not a failure either (`jetstream-relay link pause`).
  return status.links.every((l) => l.state === "live" || l.state === "catching-up" || l.state === "standby" || (l.state === "paused" && l.operatorPause)) ? 0 : 1;
}

/** `, config <hash> loaded <time>` and a reload that failed or waits for a restart (a relay before reloads has none). */
export function configHeader(status: RelayStatus): string {
  const c = status.config;
  if (!c) return "";
  const notStarted = c.lastReload?.notStarted?.map((n) => n.link) ?? [];
  const last =
    c.lastReload?.result === "failure"
      ? ` (last reload at ${c.lastReload.at} failed)`
      : notStarted.length > 0
        ? ` (last reload at ${c.lastReload?.at}: not started: ${notStarted.join(", ")})`
        : "";
  const restart = c.needsRestart?.length ? ` (needs a restart: ${c.needsRestart.join(", ")})` : "";
  return `, config ${c.hash} loaded ${c.loadedAt}${last}${restart}`;
}

/** `--url`: an http(s) URL, or a USAGE error naming the flag. */
function relayUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new RelayError(ErrorCodes.USAGE, `--url ${JSON.stringify(text)}: not a URL; use the relay's HTTP address, e.g. http://127.0.0.1:9464`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new RelayError(ErrorCodes.USAGE, `--url ${JSON.stringify(text)}: use an http:// or https:// address, e.g. http://127.0.0.1:9464`);
  }
  return text.replace(/\/+$/, "");
}

/** fetch() says "fetch failed"; the reason (refused, timed out, not found) is in its cause. */
function describeFetchError(err: unknown): string {
  if (err instanceof Error && err.name === "TimeoutError") return "no answer within 5 s";
  const cause = err instanceof Error ? (err.cause as (Error & { code?: string }) | undefined) : undefined;
  if (cause?.code === "ECONNREFUSED") return `connection refused (is the relay running, and is this its http.listen address?)`;
  if (cause?.code === "ENOTFOUND") return `host not found`;
  if (cause) return cause.code ? `${cause.code}: ${cause.message}` : cause.message;
  return err instanceof Error ? err.message : String(err);
}

export function formatTable(status: RelayStatus): string {
  const header = ["LINK", "FROM", "TO", "STATE", "SINCE", "OWNER", "LEASE REV", "RELAYED", "DEAD-LETTERED", "BACKLOG", "BACKLOG AGE", "IN FLIGHT", "WINDOW", "RTT", "CORRECTIONS", "GAPS", "GUARD", "LAST ERROR"];
  const rows = status.links.map((l) => [
    l.name,
    l.from,
    l.to,
    l.state,
    l.stateSince,
    l.ownership ? (l.ownership.self ? "this relay" : (l.ownership.owner ?? "-")) : "-",
    leaseRevisionCell(l.ownership),
    String(l.messages?.["relayed"] ?? 0),
    String(l.messages?.["dead_lettered"] ?? 0),
    String(l.backlog?.messages ?? "?"),
    l.backlog ? `${l.backlog.ageSeconds.toFixed(1)}s` : "?",
    String(l.inFlight),
    // The self-sizing window and what holds it now (rtt, bytes cap, messages cap, destination, relay, idle).
    l.window ? `${l.window.messages} ${l.window.limit}` : "-",
    l.window?.rttMs !== undefined ? `${Math.round(l.window.rttMs)}ms` : "-",
    String(Object.values(l.corrections ?? {}).reduce((a, b) => a + b, 0)),
    String((l.gaps ?? []).reduce((a, g) => a + g.count, 0)),
    l.guard,
    l.lastError ? `${l.lastError.code} at ${l.lastError.at}` : "-",
  ]);
  return table(header, rows);
}

/** The LEASE REV cell: the owner's lease revision; a relay before the rename shows it only as `epoch`. */
function leaseRevisionCell(ownership: RelayStatus["links"][number]["ownership"]): string {
  const revision = ownership?.leaseRevision ?? ownership?.epoch;
  return revision !== undefined ? String(revision) : "-";
}

/** Each link's last error in full, wrapped to `width` columns (the table shows only its code). */
export function formatErrors(status: RelayStatus, width = 100): string {
  const blocks = status.links.flatMap((l) => (l.lastError ? [`${l.name}: ${l.lastError.code} at ${l.lastError.at}\n${wrap(l.lastError.message, width - 2, "  ")}`] : []));
  return blocks.length === 0 ? "" : `last errors:\n${blocks.join("\n")}`;
}

/** Links an operator paused (`jetstream-relay link pause`): who, when and why. */
export function formatPauses(status: RelayStatus): string {
  const lines = status.links.flatMap((l) => (l.operatorPause ? [`${l.name}: paused by ${l.operatorPause.by} at ${l.operatorPause.at}: ${l.operatorPause.reason}`] : []));
  return lines.length === 0 ? "" : `paused by an operator (jetstream-relay link resume LINK to go on):\n${lines.map((l) => `  ${l}`).join("\n")}`;
}

/** Each audited link: where its audit has got to and its last finding (docs/verify.md, The continuous audit). */
export function formatAudits(status: RelayStatus): string {
  const lines = status.links.flatMap((l) => {
    const a = l.audit;
    if (!a) return [];
    const t = a.totals;
    const head = `${l.name}: judged to source seq ${a.judgedSeq} (settled ${a.judgedAt}), lag ${a.lagSeconds.toFixed(0)}s, coverage ${a.coverage}, checked ${t.checked}, missing ${t.missing}, extra ${t.extra}, reordered ${t.reordered}, backwards ${t.backwards}, repaired ${t.repaired}`;
    const f = a.lastFinding;
    const finding = f ? [`    last finding (${f.pass} pass, ${f.at}): ${f.count} ${f.kind}, source seqs ${f.sourceSeqs.join(", ")}${f.count > f.sourceSeqs.length ? ", …" : ""}`] : [];
    return [head, ...finding, ...(a.lastError ? [`    audit failing: ${a.lastError}`] : [])];
  });
  return lines.length === 0 ? "" : `audits:\n${lines.map((l) => `  ${l}`).join("\n")}`;
}

/** Breaks text at spaces into lines of at most `width` characters (a longer word gets its own line). */
export function wrap(text: string, width: number, indent = ""): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  if (line !== "") lines.push(line);
  return lines.map((l) => indent + l).join("\n");
}

/** The region's group as the relay sees it: every live member and the links placed on it. */
export function formatGroup(status: RelayStatus): string {
  const group = status.group;
  if (!group) return "";
  const header = ["MEMBER", "NAME", "JOINED", "LINKS PLACED"];
  const rows = group.members.map((m) => [m.id === group.member ? `${m.id} (this relay)` : m.id, m.name, m.startedAt, m.placed.join(",") || "-"]);
  const text = `group bucket ${group.bucket}: ${plural(group.members.length, "member")}\n${table(header, rows)}`;
  // Members that disagree on group.lease/group.renew (a rolling restart that changes them, unfinished).
  const differ = group.members.filter((m) => m.settingsDiffer);
  if (differ.length === 0) return text;
  const self = group.members.find((m) => m.id === group.member);
  const settings = (m: { leaseMs?: number | undefined; renewMs?: number | undefined }) => `lease ${m.leaseMs ?? "?"} ms, renew ${m.renewMs ?? "?"} ms`;
  const list = differ.map((m) => `${m.id} (${settings(m)})`).join(", ");
  return `${text}\nwarning: members disagree on group.lease/group.renew: ${list}; this relay: ${self ? settings(self) : "?"}. Each lease is judged by the duration its owner stored; finish the rolling restart so they agree`;
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}
