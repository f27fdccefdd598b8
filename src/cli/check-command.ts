import { loadConfig } from "../config/load.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const checkSpec: CommandSpec = {
  name: "check",
  summary: "validate a config file offline and print, per region, the links a relay there would run",
  usage: "jetstream-relay check --config FILE",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
  },
};

export async function checkCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(checkSpec, argv);
  if (values.help) {
    console.log(helpText(checkSpec));
    return 0;
  }
  const path = requireString(checkSpec, values, "config");
  const config = await loadConfig(path);
  console.log(`config ${path} is valid: ${config.regions.size} regions, ${config.links.length} links`);
  for (const region of config.regions.keys()) {
    const links = config.links.filter((l) => l.to.region === region);
    console.log(`\nregion ${region}: jetstream-relay run --region ${region} runs ${links.length} link(s)`);
    for (const l of links) {
      const filter = l.from.filterSubject ? ` filter ${l.from.filterSubject}` : "";
      const guard = l.guard ? `guard ${l.guard.store.kind}` : "broker dedup only";
      console.log(`  ${l.name}: ${l.from.region}/${l.from.stream}${filter} -> ${l.to.region}/${l.to.stream} (${guard})`);
    }
  }
  return 0;
}
