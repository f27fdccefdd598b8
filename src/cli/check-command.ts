import { looseSecretFiles } from "../config/file-modes.js";
import { loadConfig } from "../config/load.js";
import { scrubSecrets, secretsOf } from "../config/redact.js";
import { exitCodeFor, runPreflight, selectLinks } from "../preflight/preflight.js";
import { formatReport } from "../preflight/report.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, plural, requireString } from "./args.js";

export const checkSpec: CommandSpec = {
  name: "check",
  summary:
    "validate a config file and print, per region, the links a relay there would run; with --live, connect and check streams, subjects, dedup and guards (see docs/check.md)",
  usage: "jetstream-relay check --config FILE [--live] [--strict] [--region NAME]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    live: { type: "boolean", description: "connect to every region (and guard Redis) and check each link" },
    strict: { type: "boolean", description: "exit 1 when any check warns" },
    region: { type: "string", description: "only the links whose destination is this region" },
  },
};

/** Exit codes: 0 ok (warnings allowed), 1 a warning under --strict, 2 an error, a bad config or bad usage. */
export async function checkCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(checkSpec, argv);
  if (values.help) {
    console.log(helpText(checkSpec));
    return 0;
  }
  const path = requireString(checkSpec, values, "config");
  const region = typeof values.region === "string" ? values.region : undefined;
  const config = await loadConfig(path);
  selectLinks(config, region); // a USAGE error for an unknown --region, before anything is printed
  console.log(`config ${path} is valid: ${plural(config.regions.size, "region")}, ${plural(config.links.length, "link")}`);
  for (const mesh of config.meshes ?? []) {
    console.log(`mesh ${mesh.name}: expands to ${plural(mesh.links.length, "link")} (jetstream-relay config expand prints them)`);
  }
  for (const name of config.regions.keys()) {
    if (region !== undefined && name !== region) continue;
    const links = config.links.filter((l) => l.to.region === name);
    console.log(`\nregion ${name}: jetstream-relay run --region ${name} runs ${plural(links.length, "link")}`);
    for (const l of links) {
      const filter = l.from.filterSubject ? ` filter ${l.from.filterSubject}` : "";
      const guard = l.guard ? `guard ${l.guard.store.kind}` : "broker dedup only";
      const side = (s: { readonly region: string; readonly stream: string; readonly bucket?: string }) => (s.bucket !== undefined ? `${s.region}/bucket ${s.bucket}` : `${s.region}/${s.stream}`);
      console.log(`  ${l.name}: ${side(l.from)}${filter} -> ${side(l.to)} (${guard})`);
    }
  }
  const loose = await looseSecretFiles(path, config);
  for (const f of loose) {
    console.log(`\nwarning: ${f.what} ${f.path} is readable by its group or by everyone (mode ${f.mode.toString(8).padStart(4, "0")}); it holds secrets: chmod 600 ${f.path}`);
  }
  const filesCode = loose.length > 0 && values.strict === true ? 1 : 0;
  if (!values.live) return filesCode;

  const report = await runPreflight(config, region === undefined ? {} : { region });
  // The checks never put a secret in a row; scrubbing is the last line of defence.
  console.log(scrubSecrets(formatReport(report), secretsOf(config)));
  return Math.max(exitCodeFor(report, values.strict === true), filesCode);
}
